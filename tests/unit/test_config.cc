// Config::load, readLaunchEnv and parseHostPort against the environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <sharc/error.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/config.hpp"

namespace sharc::core {
namespace {

const char* const kVars[] = {
    "SHARC_DEBUG",
    "SHARC_TIMEOUT_MS",
    "SHARC_FI_PROVIDER",
    "FI_PROVIDER",
    "SHARC_ALGO",
    "SHARC_CHUNK_BYTES",
    "SHARC_NODE_ID",
    "SHARC_SOCKET_IFNAME",
    "SHARC_ROOT",
    "SHARC_RANK",
    "SHARC_WORLD_SIZE",
    "SHARC_JOB_TOKEN",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SHARC_CMA",
    "SHARC_TUNER_FILE",
    "SHARC_CUDA_IPC",
    "SHARC_NCCL_HMEM",
    "SHARC_DEVICE_PATH",
    "SHARC_HOST_QUEUE_DELAY_US",
};

// Clears every variable the code under test reads, and restores them afterwards.
class ConfigEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVars) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kVars) {
      auto it = saved_.find(name);
      if (it != saved_.end()) {
        ::setenv(name, it->second.c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }

 private:
  std::map<std::string, std::string> saved_;
};

// Expects fn() to throw InvalidArgument whose message contains every string of `parts`.
template <typename Fn>
void expectInvalid(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected sharc::Error(InvalidArgument)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Result::InvalidArgument) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message '" << e.what() << "' lacks '" << part << "'";
    }
  }
}

TEST_F(ConfigEnvTest, Defaults) {
  const Config c = Config::load();
  EXPECT_EQ(c.logLevel, LogLevel::Warn);
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(300000));
  EXPECT_EQ(c.provider, "");
  EXPECT_FALSE(c.algorithms.allGather || c.algorithms.reduceScatter || c.algorithms.allReduce);
  EXPECT_EQ(c.chunkBytes, size_t{1} << 20);
  EXPECT_EQ(c.nodeId, "");
  EXPECT_EQ(c.socketIfname, "");
}

TEST_F(ConfigEnvTest, DebugLevels) {
  const std::pair<const char*, LogLevel> cases[] = {{"NONE", LogLevel::None},
                                                    {"warn", LogLevel::Warn},
                                                    {"Info", LogLevel::Info},
                                                    {"TRACE", LogLevel::Trace},
                                                    {"trace", LogLevel::Trace}};
  for (const auto& [text, level] : cases) {
    set("SHARC_DEBUG", text);
    EXPECT_EQ(Config::load().logLevel, level) << text;
  }
  set("SHARC_DEBUG", "verbose");
  expectInvalid([] { Config::load(); }, {"SHARC_DEBUG", "'verbose'", "NONE, WARN, INFO, TRACE"});
}

TEST_F(ConfigEnvTest, Timeout) {
  set("SHARC_TIMEOUT_MS", "5000");
  EXPECT_EQ(Config::load().timeout, std::chrono::milliseconds(5000));
  set("SHARC_TIMEOUT_MS", "1");
  EXPECT_EQ(Config::load().timeout, std::chrono::milliseconds(1));
  for (const char* bad : {"0", "-1", "abc", "10ms", "1.5", " 5", "+5", "99999999999999999999"}) {
    set("SHARC_TIMEOUT_MS", bad);
    expectInvalid([] { Config::load(); },
                  {"SHARC_TIMEOUT_MS", std::string("'") + bad + "'", "positive integer"});
  }
}

TEST_F(ConfigEnvTest, ProviderPrecedence) {
  set("FI_PROVIDER", "tcp");
  EXPECT_EQ(Config::load().provider, "tcp");
  set("SHARC_FI_PROVIDER", "efa");
  EXPECT_EQ(Config::load().provider, "efa");
  ::unsetenv("FI_PROVIDER");
  EXPECT_EQ(Config::load().provider, "efa");
}

TEST_F(ConfigEnvTest, Passthrough) {
  set("SHARC_ALGO", "ring");
  set("SHARC_NODE_ID", "node-17");
  set("SHARC_SOCKET_IFNAME", "eth0,ib");
  const Config c = Config::load();
  EXPECT_EQ(c.algorithms.allGather, algo::Algorithm::Ring);
  EXPECT_EQ(c.algorithms.allReduce, algo::Algorithm::Ring);
  EXPECT_EQ(c.nodeId, "node-17");
  EXPECT_EQ(c.socketIfname, "eth0,ib");
}

TEST_F(ConfigEnvTest, EmptyValueMeansUnset) {
  set("SHARC_DEBUG", "");
  set("SHARC_TIMEOUT_MS", "");
  set("SHARC_CHUNK_BYTES", "");
  const Config c = Config::load();
  EXPECT_EQ(c.logLevel, LogLevel::Warn);
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(300000));
  EXPECT_EQ(c.chunkBytes, size_t{1} << 20);
}

TEST_F(ConfigEnvTest, ChunkBytes) {
  const std::pair<const char*, size_t> good[] = {
      {"4096", 4096},        {"65536", 65536},
      {"64K", 64 << 10},     {"64k", 64 << 10},
      {"512KiB", 512 << 10}, {"2M", 2 << 20},
      {"3mb", 3 << 20},      {"1G", size_t{1} << 30},
      {"4K", 4096},          {"1048576B", size_t{1} << 20}};
  for (const auto& [text, bytes] : good) {
    set("SHARC_CHUNK_BYTES", text);
    EXPECT_EQ(Config::load().chunkBytes, bytes) << text;
  }
  for (const char* bad : {"4095", "1K", "0", "abc", "12X", "K", "-4096", "1.5M", "64 K",
                          "99999999999999999999", "99999999999G"}) {
    set("SHARC_CHUNK_BYTES", bad);
    expectInvalid([] { Config::load(); }, {"SHARC_CHUNK_BYTES", std::string("'") + bad + "'"});
  }
}

TEST_F(ConfigEnvTest, SingleCopySwitch) {
  EXPECT_TRUE(Config::load().cma);
  for (const char* off : {"0", "off", "NO", "false"}) {
    set("SHARC_CMA", off);
    EXPECT_FALSE(Config::load().cma) << off;
  }
  for (const char* on : {"1", "ON", "yes", "True"}) {
    set("SHARC_CMA", on);
    EXPECT_TRUE(Config::load().cma) << on;
  }
  set("SHARC_CMA", "maybe");
  expectInvalid([] { Config::load(); }, {"SHARC_CMA", "'maybe'"});
}

// The GPU switches: CUDA IPC for stream-ordered calls, FI_HMEM for the NCCL plugin.
TEST_F(ConfigEnvTest, GpuSwitches) {
  EXPECT_TRUE(Config::load().cudaIpc);
  EXPECT_EQ(Config::load().ncclHmem, HmemMode::Auto);
  set("SHARC_CUDA_IPC", "0");
  EXPECT_FALSE(Config::load().cudaIpc);
  const std::pair<const char*, HmemMode> modes[] = {
      {"auto", HmemMode::Auto}, {"0", HmemMode::Off}, {"1", HmemMode::On}};
  for (const auto& [text, mode] : modes) {
    set("SHARC_NCCL_HMEM", text);
    EXPECT_EQ(Config::load().ncclHmem, mode) << text;
  }
  set("SHARC_NCCL_HMEM", "yes");
  expectInvalid([] { Config::load(); }, {"SHARC_NCCL_HMEM", "'yes'", "auto, 0 or 1"});
  ::unsetenv("SHARC_NCCL_HMEM");
  EXPECT_EQ(Config::load().devicePath, DevicePath::Direct);
  const std::pair<const char*, DevicePath> paths[] = {
      {"direct", DevicePath::Direct}, {"staged", DevicePath::Staged}, {"host", DevicePath::Host}};
  for (const auto& [text, path] : paths) {
    set("SHARC_DEVICE_PATH", text);
    EXPECT_EQ(Config::load().devicePath, path) << text;
  }
  set("SHARC_HOST_QUEUE_DELAY_US", "250");
  EXPECT_EQ(Config::load().hostQueueDelayUs, 250);
  set("SHARC_HOST_QUEUE_DELAY_US", "-1");
  expectInvalid([] { Config::load(); }, {"SHARC_HOST_QUEUE_DELAY_US", "'-1'"});
  ::unsetenv("SHARC_HOST_QUEUE_DELAY_US");
  set("SHARC_DEVICE_PATH", "gpu");
  expectInvalid([] { Config::load(); }, {"SHARC_DEVICE_PATH", "'gpu'", "direct, staged or host"});
}

TEST_F(ConfigEnvTest, GetIsOneSharedInstance) {
  std::vector<const Config*> seen(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] { seen[i] = &Config::get(); });
  }
  for (auto& t : threads) t.join();
  for (const Config* c : seen) EXPECT_EQ(c, &Config::get());
}

TEST_F(ConfigEnvTest, ParseHostPort) {
  std::string host;
  uint16_t port = 0;
  parseHostPort("10.0.0.1:29500", "X", host, port);
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_EQ(port, 29500);
  parseHostPort("node-3.cluster:1", "X", host, port);
  EXPECT_EQ(host, "node-3.cluster");
  EXPECT_EQ(port, 1);
  parseHostPort("[::1]:65535", "X", host, port);
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 65535);
  for (const char* bad : {"nocolon", ":80", "h:0", "h:65536", "h:abc", "h:", "[::1]80", "::1:80",
                          "h:-1", "[]:80", "[::1", "h:8o"}) {
    std::string h;
    uint16_t p = 0;
    expectInvalid([&] { parseHostPort(bad, "SHARC_ROOT", h, p); },
                  {"SHARC_ROOT", std::string("'") + bad + "'"});
  }
}

TEST_F(ConfigEnvTest, NoRootMeansNoLaunchEnv) {
  EXPECT_FALSE(readLaunchEnv().has_value());
  set("SHARC_RANK", "0");
  set("SHARC_WORLD_SIZE", "2");
  set("OMPI_COMM_WORLD_RANK", "1");
  EXPECT_FALSE(readLaunchEnv().has_value());
}

TEST_F(ConfigEnvTest, SharcVariables) {
  set("SHARC_ROOT", "10.1.2.3:4000");
  set("SHARC_RANK", "3");
  set("SHARC_WORLD_SIZE", "4");
  set("SHARC_JOB_TOKEN", "s3cret");
  const std::optional<LaunchEnv> env = readLaunchEnv();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rootHost, "10.1.2.3");
  EXPECT_EQ(env->rootPort, 4000);
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->worldSize, 4);
  EXPECT_EQ(env->jobToken, "s3cret");
}

TEST_F(ConfigEnvTest, Torchrun) {
  set("MASTER_ADDR", "master.example");
  set("MASTER_PORT", "29500");
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  auto env = readLaunchEnv();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rootHost, "master.example");
  EXPECT_EQ(env->rootPort, 29500);
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->worldSize, 2);
  EXPECT_EQ(env->jobToken, "");
  set("MASTER_ADDR", "[fd00::7]");
  env = readLaunchEnv();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rootHost, "fd00::7");
}

TEST_F(ConfigEnvTest, Precedence) {
  set("SHARC_ROOT", "10.0.0.1:1000");
  set("MASTER_ADDR", "10.0.0.2");
  set("MASTER_PORT", "2000");
  set("SLURM_PROCID", "4");
  set("SLURM_NTASKS", "8");
  auto env = readLaunchEnv();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rootHost, "10.0.0.1");  // SHARC_ROOT over MASTER_*
  EXPECT_EQ(env->rootPort, 1000);
  EXPECT_EQ(env->rank, 4);  // Slurm fills in when nothing else is set
  EXPECT_EQ(env->worldSize, 8);
  set("OMPI_COMM_WORLD_RANK", "3");
  set("OMPI_COMM_WORLD_SIZE", "6");
  env = readLaunchEnv();
  EXPECT_EQ(env->rank, 3);  // Open MPI over Slurm
  EXPECT_EQ(env->worldSize, 6);
  set("RANK", "2");
  set("WORLD_SIZE", "5");
  env = readLaunchEnv();
  EXPECT_EQ(env->rank, 2);  // torchrun over Open MPI
  EXPECT_EQ(env->worldSize, 5);
  set("SHARC_RANK", "1");
  set("SHARC_WORLD_SIZE", "3");
  env = readLaunchEnv();
  EXPECT_EQ(env->rank, 1);  // SHARC_* over everything
  EXPECT_EQ(env->worldSize, 3);
  ::unsetenv("SHARC_ROOT");
  env = readLaunchEnv();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rootHost, "10.0.0.2");  // falls back to MASTER_*
  EXPECT_EQ(env->rootPort, 2000);
}

TEST_F(ConfigEnvTest, MalformedLaunchEnv) {
  set("SHARC_ROOT", "10.0.0.1:29500");
  expectInvalid([] { readLaunchEnv(); }, {"SHARC_ROOT=10.0.0.1:29500", "rank is unknown"});
  set("SHARC_RANK", "0");
  expectInvalid([] { readLaunchEnv(); }, {"world size is unknown", "SHARC_WORLD_SIZE"});
  set("SHARC_WORLD_SIZE", "4");
  ASSERT_TRUE(readLaunchEnv().has_value());

  set("SHARC_RANK", "4");
  expectInvalid([] { readLaunchEnv(); }, {"SHARC_RANK='4'", "SHARC_WORLD_SIZE=4"});
  set("SHARC_RANK", "-1");
  expectInvalid([] { readLaunchEnv(); }, {"SHARC_RANK", "'-1'", "non-negative"});
  set("SHARC_RANK", "one");
  expectInvalid([] { readLaunchEnv(); }, {"SHARC_RANK", "'one'"});
  set("SHARC_RANK", "0");
  set("SHARC_WORLD_SIZE", "0");
  expectInvalid([] { readLaunchEnv(); }, {"SHARC_WORLD_SIZE", "'0'", "positive"});
  set("SHARC_WORLD_SIZE", "2x");
  expectInvalid([] { readLaunchEnv(); }, {"SHARC_WORLD_SIZE", "'2x'"});
  set("SHARC_WORLD_SIZE", "2");
  set("SHARC_ROOT", "10.0.0.1:0");
  expectInvalid([] { readLaunchEnv(); }, {"SHARC_ROOT", "'10.0.0.1:0'", "1..65535"});
  set("SHARC_ROOT", "10.0.0.1");
  expectInvalid([] { readLaunchEnv(); }, {"SHARC_ROOT", "host:port"});
  ::unsetenv("SHARC_ROOT");

  set("MASTER_ADDR", "10.0.0.1");
  expectInvalid([] { readLaunchEnv(); }, {"MASTER_ADDR", "MASTER_PORT is not"});
  set("MASTER_PORT", "70000");
  expectInvalid([] { readLaunchEnv(); }, {"MASTER_PORT", "'70000'", "1..65535"});
  set("MASTER_PORT", "0");
  expectInvalid([] { readLaunchEnv(); }, {"MASTER_PORT", "'0'"});
  set("MASTER_PORT", "http");
  expectInvalid([] { readLaunchEnv(); }, {"MASTER_PORT", "'http'"});
  ::unsetenv("MASTER_ADDR");
  set("MASTER_PORT", "29500");
  expectInvalid([] { readLaunchEnv(); }, {"MASTER_PORT", "MASTER_ADDR is not"});

  set("MASTER_ADDR", "10.0.0.1");
  ::unsetenv("SHARC_RANK");
  ::unsetenv("SHARC_WORLD_SIZE");
  set("RANK", "2");
  set("WORLD_SIZE", "2");
  expectInvalid([] { readLaunchEnv(); }, {"RANK='2'", "WORLD_SIZE=2"});
  set("RANK", "1");
  ASSERT_TRUE(readLaunchEnv().has_value());
}

}  // namespace
}  // namespace sharc::core
