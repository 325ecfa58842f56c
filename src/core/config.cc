#include "config.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sharc/error.hpp>
#include <sstream>
#include <string_view>

#include "core/collective.hpp"
#include "fault_plan.hpp"

namespace sharc::core {
namespace {

// Returns the variable's value, or nullopt when it is unset or empty (an empty value is
// treated as unset, as shells make `VAR=` easy to write by accident).
std::optional<std::string> envValue(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

[[noreturn]] void badValue(const std::string& variable, const std::string& value,
                           const std::string& expected) {
  throw Error(Result::InvalidArgument,
              variable + "='" + value + "' is malformed: expected " + expected);
}

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

// Parses the whole string as an unsigned decimal integer (no sign, no spaces).
bool parseUnsigned(std::string_view text, uint64_t& out) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text.front()))) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

LogLevel parseLogLevel(const std::string& value) {
  const std::string u = upper(value);
  if (u == "NONE") return LogLevel::None;
  if (u == "WARN") return LogLevel::Warn;
  if (u == "INFO") return LogLevel::Info;
  if (u == "TRACE") return LogLevel::Trace;
  badValue("SHARC_DEBUG", value, "one of NONE, WARN, INFO, TRACE (case-insensitive)");
}

std::chrono::milliseconds parseTimeout(const std::string& value) {
  uint64_t ms = 0;
  // Anything beyond ~292 years would overflow steady_clock arithmetic in deadlines.
  constexpr uint64_t kMaxMs = uint64_t{1} << 50;
  if (!parseUnsigned(value, ms) || ms == 0 || ms > kMaxMs) {
    badValue("SHARC_TIMEOUT_MS", value,
             "a positive integer number of milliseconds (1.." + std::to_string(kMaxMs) + ")");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

// A byte count >= 4096 with an optional K/M/G suffix; errors name `variable`.
size_t parseChunkBytes(const std::string& value, const char* variable = "SHARC_CHUNK_BYTES") {
  const char* expected =
      "an integer number of bytes >= 4096, optionally with a K, M or G suffix (e.g. 512K)";
  uint64_t multiplier = 1;
  // Accept "64K", "64KB", "64KiB" (all binary multiples), case-insensitive.
  const size_t split = std::min(value.find_first_not_of("0123456789"), value.size());
  const std::string digits = value.substr(0, split);
  const std::string suffix = upper(value.substr(split));
  if (suffix == "B" || suffix.empty()) {
    multiplier = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    multiplier = uint64_t{1} << 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    multiplier = uint64_t{1} << 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    multiplier = uint64_t{1} << 30;
  } else {
    badValue(variable, value, expected);
  }
  uint64_t count = 0;
  if (!parseUnsigned(digits, count)) badValue(variable, value, expected);
  if (count > std::numeric_limits<size_t>::max() / multiplier) {
    badValue(variable, value, "a value that fits in size_t (>= 4096)");
  }
  const uint64_t bytes = count * multiplier;
  if (bytes < kMinChunkBytes) badValue(variable, value, expected);
  return static_cast<size_t>(bytes);
}

// Parses a non-negative int; `expected` describes the acceptable values.
int parseIntVar(const char* name, const std::string& value, const char* expected) {
  uint64_t v = 0;
  if (!parseUnsigned(value, v) || v > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    badValue(name, value, expected);
  }
  return static_cast<int>(v);
}

// The first set variable of `names` and its value.
struct Found {
  const char* name = nullptr;
  std::string value;
};
Found firstSet(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto v = envValue(name)) return {name, *v};
  }
  return {};
}

bool parseSwitch(const char* name, const std::string& v) {
  const std::string u = upper(v);
  if (u == "1" || u == "ON" || u == "YES" || u == "TRUE") return true;
  if (u == "0" || u == "OFF" || u == "NO" || u == "FALSE") return false;
  badValue(name, v, "0 or 1 (also on/off, yes/no, true/false)");
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

std::map<std::string, double> parseTunerText(const std::string& text, const std::string& path) {
  std::map<std::string, double> out;
  std::stringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const std::string body = trim(line.substr(0, line.find('#')));
    if (body.empty()) continue;
    const std::string where = "SHARC_TUNER_FILE '" + path + "' line " + std::to_string(number);
    const size_t eq = body.find('=');
    if (eq == std::string::npos)
      throw Error(Result::InvalidArgument,
                  where + ": '" + body + "' is malformed: expected `key = value`");
    const std::string key = trim(body.substr(0, eq)), value = trim(body.substr(eq + 1));
    if (key.starts_with("choice.")) continue;  // learned choices: parseTunerChoices
    const bool known = std::any_of(std::begin(kTunerKeys), std::end(kTunerKeys),
                                   [&](const char* k) { return key == k; });
    if (!known) {
      std::string keys;
      for (const char* k : kTunerKeys) keys += std::string(keys.empty() ? "" : ", ") + k;
      throw Error(Result::InvalidArgument,
                  where + ": unknown key '" + key + "' (expected one of " + keys + ")");
    }
    double v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    const bool zeroOk = key == "cores" || key.ends_with("_us");
    if (value.empty() || ec != std::errc() || end != value.data() + value.size() ||
        !std::isfinite(v) || v < 0 || (v == 0 && !zeroOk) ||
        (key == "cores" && (v != std::floor(v) || v > 1 << 20)))
      throw Error(Result::InvalidArgument,
                  where + ": key '" + key + "' has value '" + value + "': expected " +
                      (key == "cores" ? "a whole number of CPUs (0 = detect)"
                       : zeroOk       ? "a non-negative number of microseconds"
                                      : "a positive number (GB/s)"));
    out[key] = v;
  }
  return out;
}

std::vector<TunerChoice> parseTunerChoices(const std::string& text, const std::string& path) {
  static constexpr const char* kForm =
      "`choice.<allgather|reducescatter|allreduce>.<bytes>.<ranks>.<nodes> = <algorithm> "
      "chunk=<bytes>` with algorithm one of ";
  std::vector<TunerChoice> out;
  std::stringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const std::string body = trim(line.substr(0, line.find('#')));
    const size_t eq = body.find('=');
    if (eq == std::string::npos || !trim(body.substr(0, eq)).starts_with("choice.")) continue;
    const std::string key = trim(body.substr(0, eq)), value = trim(body.substr(eq + 1));
    const auto bad = [&] {
      throw Error(Result::InvalidArgument,
                  "SHARC_TUNER_FILE '" + path + "' line " + std::to_string(number) + ": '" + body +
                      "' is malformed: expected " + kForm + algo::choosableAlgorithmList());
    };
    std::vector<std::string> parts;
    std::stringstream keyParts(key);
    for (std::string part; std::getline(keyParts, part, '.');) parts.push_back(part);
    TunerChoice c;
    uint64_t ranks = 0, nodes = 0;
    if (parts.size() != 5 || !parseUnsigned(parts[2], c.bytes) || !parseUnsigned(parts[3], ranks) ||
        !parseUnsigned(parts[4], nodes) || ranks < 1 || ranks > (1u << 20) || nodes < 1 ||
        nodes > ranks)
      bad();
    const auto kind = parseCollective(parts[1]);
    if (!kind || parts[1] != collectiveKey(*kind) ||
        static_cast<int>(*kind) > static_cast<int>(CollectiveKind::AllReduce))
      bad();
    c.collective = *kind;
    c.ranks = static_cast<int>(ranks);
    c.nodes = static_cast<int>(nodes);
    std::stringstream words(value);
    std::string chunk;
    std::string algorithm;
    if (!(words >> algorithm >> chunk) || !chunk.starts_with("chunk=") || (words >> chunk)) bad();
    const auto a = algo::parseAlgorithm(algorithm);
    if (!a) bad();
    c.algorithm = *a;
    uint64_t chunkBytes = 0;
    if (!parseUnsigned(chunk.substr(6), chunkBytes) || chunkBytes < kMinChunkBytes ||
        chunkBytes > (uint64_t{1} << 40))
      bad();
    c.chunkBytes = static_cast<size_t>(chunkBytes);
    out.push_back(std::move(c));
  }
  return out;
}

Config Config::load() {
  Config config;
  if (auto v = envValue("SHARC_DEBUG")) config.logLevel = parseLogLevel(*v);
  if (auto v = envValue("SHARC_TIMEOUT_MS")) config.timeout = parseTimeout(*v);
  if (auto v = envValue("SHARC_FI_PROVIDER")) {
    config.provider = *v;
  } else if (auto fi = envValue("FI_PROVIDER")) {
    config.provider = *fi;
  }
  if (auto v = envValue("SHARC_ALGO")) config.algorithms = algo::AlgorithmOverride::parse(*v);
  if (auto v = envValue("SHARC_CHUNK_BYTES")) {
    config.chunkBytes = parseChunkBytes(*v);
    config.chunkBytesSet = true;
  }
  if (auto v = envValue("SHARC_GPU_STAGING_CHUNK"))
    config.gpuStagingChunkBytes = parseChunkBytes(*v, "SHARC_GPU_STAGING_CHUNK");
  if (auto v = envValue("SHARC_TUNER_FILE")) {
    // At most 1 MiB is read: a device such as /dev/zero must not read forever.
    constexpr std::streamsize kMaxTunerFile = 1 << 20;
    std::ifstream in(*v, std::ios::binary);
    std::string text(static_cast<size_t>(kMaxTunerFile) + 1, '\0');
    if (in) in.read(text.data(), kMaxTunerFile + 1);
    if (!in && !in.eof())
      badValue("SHARC_TUNER_FILE", *v, "a readable file of `key = value` lines");
    text.resize(static_cast<size_t>(in.gcount()));
    if (text.size() > static_cast<size_t>(kMaxTunerFile))
      badValue("SHARC_TUNER_FILE", *v, "a file of at most 1 MiB of `key = value` lines");
    config.tunerFile = *v;
    config.tuner = parseTunerText(text, *v);
    config.tunerChoices = parseTunerChoices(text, *v);
  }
  if (auto v = envValue("SHARC_TUNER_LEARN"))
    config.tunerLearn = parseSwitch("SHARC_TUNER_LEARN", *v);
  if (auto v = envValue("SHARC_SCHEDULE_CACHE"))
    config.scheduleCache = parseSwitch("SHARC_SCHEDULE_CACHE", *v);
  if (auto v = envValue("SHARC_TUNER_LEARN_AFTER")) {
    const char* expected = "a positive number of calls of one shape";
    config.tunerLearnAfter = parseIntVar("SHARC_TUNER_LEARN_AFTER", *v, expected);
    if (config.tunerLearnAfter < 1) badValue("SHARC_TUNER_LEARN_AFTER", *v, expected);
  }
  if (auto v = envValue("SHARC_TUNER_SAVE")) config.tunerSave = *v;  // written at destroy
  if (auto v = envValue("SHARC_NODE_ID")) config.nodeId = *v;
  if (auto v = envValue("SHARC_SOCKET_IFNAME")) config.socketIfname = *v;
  // Only stored: the topology loader reports a missing or unreadable file with the path.
  if (auto v = envValue("SHARC_TOPO_FILE")) config.topoFile = *v;
  if (auto v = envValue("SHARC_CMA")) config.cma = parseSwitch("SHARC_CMA", *v);
  if (auto v = envValue("SHARC_SHM")) config.shm = parseSwitch("SHARC_SHM", *v);
  if (auto v = envValue("SHARC_CUDA_IPC")) config.cudaIpc = parseSwitch("SHARC_CUDA_IPC", *v);
  if (auto v = envValue("SHARC_NCCL_HMEM")) {
    if (*v != "auto" && *v != "0" && *v != "1") badValue("SHARC_NCCL_HMEM", *v, "auto, 0 or 1");
    config.ncclHmem = *v == "auto" ? HmemMode::Auto : *v == "1" ? HmemMode::On : HmemMode::Off;
  }
  if (auto v = envValue("SHARC_DEVICE_PATH")) {
    if (*v != "direct" && *v != "staged" && *v != "host")
      badValue("SHARC_DEVICE_PATH", *v, "direct, staged or host");
    config.devicePath = *v == "direct"   ? DevicePath::Direct
                        : *v == "staged" ? DevicePath::Staged
                                         : DevicePath::Host;
  }
  if (auto v = envValue("SHARC_HOST_QUEUE_DELAY_US")) {
    const char* expected = "microseconds, 0 to 1000000";
    config.hostQueueDelayUs = parseIntVar("SHARC_HOST_QUEUE_DELAY_US", *v, expected);
    if (config.hostQueueDelayUs < 0 || config.hostQueueDelayUs > 1000000)
      badValue("SHARC_HOST_QUEUE_DELAY_US", *v, expected);
  }
  if (auto v = envValue("SHARC_HIER_PROXY")) {
    if (*v != "auto" && *v != "rail" && *v != "rotated")
      badValue("SHARC_HIER_PROXY", *v, "auto, rail or rotated");
    config.hierProxy = *v == "auto"   ? HierProxy::Auto
                       : *v == "rail" ? HierProxy::Rail
                                      : HierProxy::Rotated;
  }
  if (auto v = envValue("SHARC_NICS")) {
    std::string item;
    std::stringstream items(*v);
    while (std::getline(items, item, ','))
      if (!item.empty()) config.nics.push_back(item);
    if (config.nics.empty()) badValue("SHARC_NICS", *v, "a comma-separated list of NIC names");
  }
  if (auto v = envValue("FI_TCP_IFACE")) config.tcpIface = *v;
  if (auto v = envValue("SHARC_NIC_MBITS")) {
    char* end = nullptr;
    config.nicMbits = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(config.nicMbits > 0) || config.nicMbits > 1e7)
      badValue("SHARC_NIC_MBITS", *v, "a positive line rate in Mbit/s (e.g. 1000)");
  }
  if (auto v = envValue("SHARC_TRACE_ENTRIES")) {
    const char* expected = "a positive number of operations";
    const int entries = parseIntVar("SHARC_TRACE_ENTRIES", *v, expected);
    if (entries == 0) badValue("SHARC_TRACE_ENTRIES", *v, expected);
    config.traceEntries = static_cast<size_t>(entries);
  }
  if (auto v = envValue("SHARC_TRACE_DIR")) config.traceDir = *v;
  if (auto v = envValue("SHARC_TRACE_SIGNAL"))
    config.traceSignal = parseSwitch("SHARC_TRACE_SIGNAL", *v);
  if (auto v = envValue("SHARC_TRACE_SOCKET")) config.traceSocket = *v;
  if (auto v = envValue("SHARC_STALL_PROBE_MS"))
    config.stallProbe = std::chrono::milliseconds(
        parseIntVar("SHARC_STALL_PROBE_MS", *v, "milliseconds (0 = no stall probe)"));
  if (auto v = envValue("SHARC_FAULT")) {
    FaultPlan::parse(*v);  // a malformed plan fails here, before any rank meets another
    config.fault = *v;
  }
  if (auto v = envValue("SHARC_BIND_THREAD"))
    config.bindThread = parseSwitch("SHARC_BIND_THREAD", *v);
  return config;
}

const Config& Config::get() {
  // Function-local static: initialised once, thread-safely. If load() throws, the next call
  // retries (and throws the same error again).
  static const Config config = load();
  return config;
}

void parseHostPort(const std::string& text, const char* what, std::string& host, uint16_t& port) {
  const char* expected = "host:port or [ipv6-address]:port with a port in 1..65535";
  std::string h;
  std::string portText;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      badValue(what, text, expected);
    }
    h = text.substr(1, close - 1);
    portText = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) badValue(what, text, expected);
    h = text.substr(0, colon);
    portText = text.substr(colon + 1);
    // An unbracketed IPv6 address is ambiguous ("::1:29500"): require brackets.
    if (h.find(':') != std::string::npos) {
      badValue(what, text, "[ipv6-address]:port (IPv6 addresses need brackets)");
    }
  }
  uint64_t p = 0;
  if (h.empty() || !parseUnsigned(portText, p) || p == 0 || p > 65535) {
    badValue(what, text, expected);
  }
  host = h;
  port = static_cast<uint16_t>(p);
}

std::optional<LaunchEnv> readLaunchEnv() {
  LaunchEnv env;
  std::string rootVars;  // names the variables the root came from, for messages
  if (auto root = envValue("SHARC_ROOT")) {
    parseHostPort(*root, "SHARC_ROOT", env.rootHost, env.rootPort);
    rootVars = "SHARC_ROOT=" + *root;
  } else {
    auto addr = envValue("MASTER_ADDR");
    auto portText = envValue("MASTER_PORT");
    if (!addr && !portText) return std::nullopt;
    if (!addr) {
      throw Error(Result::InvalidArgument,
                  "MASTER_PORT='" + *portText +
                      "' is set but MASTER_ADDR is not: expected both (or SHARC_ROOT=host:port)");
    }
    if (!portText) {
      throw Error(Result::InvalidArgument,
                  "MASTER_ADDR='" + *addr +
                      "' is set but MASTER_PORT is not: expected both (or SHARC_ROOT=host:port)");
    }
    std::string host = *addr;
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (host.empty()) badValue("MASTER_ADDR", *addr, "a host name or IP address");
    uint64_t p = 0;
    if (!parseUnsigned(*portText, p) || p == 0 || p > 65535) {
      badValue("MASTER_PORT", *portText, "a port number in 1..65535");
    }
    env.rootHost = host;
    env.rootPort = static_cast<uint16_t>(p);
    rootVars = "MASTER_ADDR=" + *addr + " MASTER_PORT=" + *portText;
  }

  // Rank and size: SHARC_* first, then torchrun's, then the MPI launcher's, then Slurm's.
  const Found rank = firstSet({"SHARC_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"});
  const Found size =
      firstSet({"SHARC_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"});
  if (rank.name == nullptr) {
    throw Error(Result::InvalidArgument,
                "the bootstrap root is set (" + rootVars +
                    ") but the rank is unknown: expected SHARC_RANK (or RANK, "
                    "OMPI_COMM_WORLD_RANK, SLURM_PROCID) to be set");
  }
  if (size.name == nullptr) {
    throw Error(Result::InvalidArgument,
                "the bootstrap root is set (" + rootVars +
                    ") but the world size is unknown: expected SHARC_WORLD_SIZE (or WORLD_SIZE, "
                    "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS) to be set");
  }
  env.rank = parseIntVar(rank.name, rank.value, "a non-negative integer rank");
  env.worldSize = parseIntVar(size.name, size.value, "a positive integer world size");
  if (env.worldSize < 1) badValue(size.name, size.value, "a positive integer world size");
  if (env.rank >= env.worldSize) {
    throw Error(Result::InvalidArgument,
                std::string(rank.name) + "='" + rank.value + "' is out of range: expected a rank " +
                    "below the world size " + size.name + "=" + size.value);
  }
  if (auto token = envValue("SHARC_JOB_TOKEN")) env.jobToken = *token;
  return env;
}

}  // namespace sharc::core
