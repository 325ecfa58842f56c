// Every SHARC_* environment variable is read here and nowhere else (README documents them).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace sharc::core {

enum class LogLevel : int { None = 0, Warn = 1, Info = 2, Trace = 3 };

/// Settings taken from the environment once per process (or per call to load()).
struct Config {
  LogLevel logLevel = LogLevel::Warn;         ///< SHARC_DEBUG=NONE|WARN|INFO|TRACE
  std::chrono::milliseconds timeout{300000};  ///< SHARC_TIMEOUT_MS (> 0)
  std::string provider;                       ///< SHARC_FI_PROVIDER, else FI_PROVIDER, else ""
  std::string algorithm;                      ///< SHARC_ALGO ("" = automatic)
  size_t chunkBytes = 1u << 20;               ///< SHARC_CHUNK_BYTES: pipelining chunk (>= 4096)
  std::string nodeId;                         ///< SHARC_NODE_ID: overrides hostname+boot id
  std::string socketIfname;                   ///< SHARC_SOCKET_IFNAME: bootstrap interface
  bool cma = true;  ///< SHARC_CMA: single-copy reads between ranks of one host (Linux CMA)

  /// Reads the environment; throws sharc::Error(InvalidArgument) naming the variable and
  /// the expected form when a value is malformed.
  static Config load();
  /// The process-wide configuration, loaded on first use.
  static const Config& get();
};

/// Where the bootstrap should rendezvous, as resolved from the environment:
/// SHARC_ROOT/SHARC_RANK/SHARC_WORLD_SIZE, else torchrun's MASTER_ADDR/MASTER_PORT/RANK/
/// WORLD_SIZE, with OMPI_COMM_WORLD_RANK/SIZE (and SLURM_PROCID/SLURM_NTASKS) filling in
/// rank and size when the SHARC/torchrun ones are unset.
struct LaunchEnv {
  std::string rootHost;
  uint16_t rootPort = 0;
  int rank = -1;
  int worldSize = -1;
  std::string jobToken;  ///< SHARC_JOB_TOKEN, optional extra secret mixed into the job token
};

/// Returns the launch environment, std::nullopt when no root address is set; throws
/// sharc::Error(InvalidArgument) when variables are present but malformed or inconsistent.
std::optional<LaunchEnv> readLaunchEnv();

/// Parses "host:port" ("[v6]:port" too); throws InvalidArgument naming `what` on error.
void parseHostPort(const std::string& text, const char* what, std::string& host, uint16_t& port);

}  // namespace sharc::core
