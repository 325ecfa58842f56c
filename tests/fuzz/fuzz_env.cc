// The environment (core::Config::load, core::readLaunchEnv, core::parseHostPort): each
// variable they read gets a fuzzed value or stays unset. Input: a sequence of records
// {u8 variable index, u8 length, bytes}; SHARC_TUNER_FILE's bytes are the file's content
// (the variable then names a temporary file). Properties: each call returns or throws
// sharc::Error(InvalidArgument) naming a variable that was set (or the world-size/rank
// variable it could not find), and what it returns satisfies the documented ranges.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sharc/error.hpp>
#include <string>

#include "core/config.hpp"
#include "fuzz_common.hpp"

namespace {

using sharc::fuzz::broken;

// Every variable config.cc reads (keep in step with config.cc; make_seeds uses the indices).
const char* const kVariables[] = {"SHARC_DEBUG",
                                  "SHARC_TIMEOUT_MS",
                                  "SHARC_FI_PROVIDER",
                                  "FI_PROVIDER",
                                  "SHARC_ALGO",
                                  "SHARC_CHUNK_BYTES",
                                  "SHARC_GPU_STAGING_CHUNK",
                                  "SHARC_TUNER_FILE",
                                  "SHARC_NODE_ID",
                                  "SHARC_SOCKET_IFNAME",
                                  "SHARC_TOPO_FILE",
                                  "SHARC_CMA",
                                  "SHARC_SHM",
                                  "SHARC_CUDA_IPC",
                                  "SHARC_NCCL_HMEM",
                                  "SHARC_HIER_PROXY",
                                  "SHARC_NICS",
                                  "SHARC_TRACE_ENTRIES",
                                  "SHARC_TRACE_DIR",
                                  "SHARC_TRACE_SIGNAL",
                                  "SHARC_TRACE_SOCKET",
                                  "SHARC_STALL_PROBE_MS",
                                  "SHARC_FAULT",
                                  "SHARC_BIND_THREAD",
                                  "SHARC_ROOT",
                                  "MASTER_ADDR",
                                  "MASTER_PORT",
                                  "SHARC_RANK",
                                  "RANK",
                                  "OMPI_COMM_WORLD_RANK",
                                  "SLURM_PROCID",
                                  "SHARC_WORLD_SIZE",
                                  "WORLD_SIZE",
                                  "OMPI_COMM_WORLD_SIZE",
                                  "SLURM_NTASKS",
                                  "SHARC_JOB_TOKEN"};
constexpr size_t kCount = std::size(kVariables);
constexpr size_t kTunerFile = 7;

const std::string& tunerPath() {
  static const std::string path = [] {
    char name[] = "/tmp/sharc-fuzz-tuner-XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd < 0) broken("mkstemp");
    ::close(fd);
    std::atexit([] { std::remove(tunerPath().c_str()); });
    return std::string(name);
  }();
  return path;
}

// An error must say which variable is wrong: one that was set (or, for a missing rank or
// world size, the variable it expected).
void checkError(const sharc::Error& e, const bool* set) {
  if (e.code() != sharc::Result::InvalidArgument) broken("not InvalidArgument");
  for (size_t i = 0; i < kCount; ++i)
    if ((set[i] || std::strncmp(kVariables[i], "SHARC_", 6) == 0) &&
        std::strstr(e.what(), kVariables[i]) != nullptr)
      return;
  broken("an error names no variable");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bool set[kCount] = {};
  for (const char* v : kVariables) ::unsetenv(v);
  for (size_t pos = 0; pos + 2 <= size;) {
    const size_t var = data[pos] % kCount;
    const size_t len = std::min<size_t>(data[pos + 1], size - pos - 2);
    std::string value(reinterpret_cast<const char*>(data + pos + 2), len);
    pos += 2 + len;
    if (var == kTunerFile) {
      std::ofstream(tunerPath(), std::ios::binary | std::ios::trunc) << value;
      value = tunerPath();
    }
    value = value.substr(0, value.find('\0'));  // what the environment can hold
    ::setenv(kVariables[var], value.c_str(), 1);
    set[var] = !value.empty();  // an empty value counts as unset
  }

  try {
    const sharc::core::Config c = sharc::core::Config::load();
    if (c.timeout.count() <= 0) broken("timeout <= 0");
    if (c.chunkBytes < 4096 || c.gpuStagingChunkBytes < 4096) broken("a chunk below 4096");
    if (c.traceEntries < 1 || c.stallProbe.count() < 0) broken("trace settings out of range");
    for (const std::string& nic : c.nics)
      if (nic.empty() || nic.find(',') != std::string::npos) broken("a malformed NIC name");
  } catch (const sharc::Error& e) {
    checkError(e, set);
  }
  try {
    if (const auto env = sharc::core::readLaunchEnv()) {
      if (env->rootHost.empty() || env->rootPort == 0) broken("no root host or port");
      if (env->worldSize < 1 || env->rank < 0 || env->rank >= env->worldSize)
        broken("rank or world size out of range");
    }
  } catch (const sharc::Error& e) {
    checkError(e, set);
  }
  for (size_t i : {size_t{24}, size_t{25}}) {  // SHARC_ROOT, MASTER_ADDR as host:port text
    const char* text = std::getenv(kVariables[i]);
    if (text == nullptr) continue;
    std::string host;
    uint16_t port = 0;
    try {
      sharc::core::parseHostPort(text, "X_HOST_PORT", host, port);
      if (host.empty() || port == 0) broken("parseHostPort returned no host or port 0");
    } catch (const sharc::Error& e) {
      if (std::strstr(e.what(), "X_HOST_PORT") == nullptr) broken("an error names no variable");
    }
  }
  return 0;
}
