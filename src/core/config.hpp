// Every SHARC_* environment variable is read here and nowhere else (docs/environment.md
// documents them).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/algorithm.hpp"

namespace sharc::core {

enum class LogLevel : int { None = 0, Warn = 1, Info = 2, Trace = 3 };

/// The smallest pipelining chunk: SHARC_CHUNK_BYTES and a tuner file's `chunk=` are refused
/// below it, and the tuner and its cost model never cut messages finer.
inline constexpr size_t kMinChunkBytes = 4096;

/// One learned choice of a SHARC_TUNER_FILE:
/// `choice.<collective>.<bytes per rank>.<ranks>.<nodes> = <algorithm> chunk=<bytes>`.
struct TunerChoice {
  CollectiveKind collective = CollectiveKind::AllGather;  ///< AllGather, ReduceScatter, AllReduce
  uint64_t bytes = 0;  ///< count * element size (per rank; the whole vector for AllReduce)
  int ranks = 0;
  int nodes = 0;
  algo::Algorithm algorithm = algo::Algorithm::Ring;  ///< a choosable algorithm
  size_t chunkBytes = 0;                              ///< >= kMinChunkBytes
};

/// SHARC_NCCL_HMEM's values.
/// SHARC_DEVICE_PATH's values.
enum class DevicePath {
  /// The engine's schedules run on the device buffers: a device queue reduces and copies,
  /// links whose provider has FI_HMEM carry device memory, the others stage each message.
  Direct,
  /// Each chunk of a call is copied to pinned host memory and the host collective runs on it.
  Staged,
  /// For tests without a GPU: host-memory collectives take the Direct path with the host
  /// device queue standing in for the GPU.
  Host,
};

enum class HmemMode { Auto, On, Off };

/// SHARC_HIER_PROXY's values.
enum class HierProxy {
  Auto,     ///< rotated over tcp, rail elsewhere
  Rail,     ///< the rank of the same local index
  Rotated,  ///< shifted by the node index: one-way connections
};

/// Settings taken from the environment once per process (or per call to load()).
struct Config {
  LogLevel logLevel = LogLevel::Warn;         ///< SHARC_DEBUG=NONE|WARN|INFO|TRACE
  std::chrono::milliseconds timeout{300000};  ///< SHARC_TIMEOUT_MS (> 0)
  std::string provider;                       ///< SHARC_FI_PROVIDER, else FI_PROVIDER, else ""
  algo::AlgorithmOverride algorithms;         ///< SHARC_ALGO (none set = automatic)
  size_t chunkBytes = 1u << 20;  ///< SHARC_CHUNK_BYTES: pipelining chunk (>= kMinChunkBytes)
  bool chunkBytesSet = false;    ///< SHARC_CHUNK_BYTES was set (else the tuner picks the chunk)
  std::string nodeId;            ///< SHARC_NODE_ID: overrides hostname+boot id
  std::string socketIfname;      ///< SHARC_SOCKET_IFNAME: bootstrap interface
  bool cma = true;        ///< SHARC_CMA: single-copy reads between ranks of one host (Linux CMA)
  std::string tunerFile;  ///< SHARC_TUNER_FILE: cost-model parameters ("" = built-in)
  /// The settings of SHARC_TUNER_FILE (key -> value; see kTunerKeys).
  std::map<std::string, double> tuner;
  /// The learned choices of SHARC_TUNER_FILE (`choice.` lines; src/api/learned_tuner.hpp).
  std::vector<TunerChoice> tunerChoices;
  /// SHARC_TUNER_LEARN: for shapes called often, measure the model's runner-up algorithms
  /// and chunks and keep the fastest (0 = the model's choice only).
  bool tunerLearn = true;
  /// SHARC_TUNER_LEARN_AFTER: calls of one shape on one communicator before it is explored
  /// (64: more than a default sharc-perf size makes, 2 x (5 + 20 + 1)).
  int tunerLearnAfter = 64;
  /// SHARC_SCHEDULE_CACHE: a call of a shape called before rearms that call's schedule
  /// instead of building a new one (docs/api.md, "Schedules are reused").
  bool scheduleCache = true;
  /// SHARC_TUNER_SAVE: file the learned choices are merged into (with this job's
  /// SHARC_TUNER_FILE parameters) when a communicator is destroyed, in SHARC_TUNER_FILE form
  /// ("" = not written).
  std::string tunerSave;
  bool shm = true;  ///< SHARC_SHM: ranks of one node exchange through sharc's shared memory
  /// SHARC_CUDA_IPC: stream-ordered collectives among ranks of one host map each other's
  /// device buffers through CUDA IPC (0: they stage through host memory like remote ranks).
  bool cudaIpc = true;
  /// SHARC_NCCL_HMEM: which of the NCCL plugin's providers are opened with FI_HMEM (GPU
  /// memory): "auto" the NIC providers only (efa, verbs, ...; on shm it slows host transfers
  /// of 256 KiB to 4 MiB by a fifth), "1" every provider that has it, "0" none.
  HmemMode ncclHmem = HmemMode::Auto;
  /// SHARC_DEVICE_PATH: how collectives on device memory between hosts run (docs/gpu.md).
  DevicePath devicePath = DevicePath::Direct;
  /// SHARC_HOST_QUEUE_DELAY_US: the host device queue (SHARC_DEVICE_PATH=host) sleeps this
  /// long before each operation: a slow "GPU" for tests, so that operations are still queued
  /// while the network moves on (0: none).
  int hostQueueDelayUs = 0;
  /// SHARC_BIND_THREAD: bind the thread that creates a communicator (the one that drives its
  /// progress) to the CPUs nearest the rank's NIC. Off by default: launchers bind too.
  bool bindThread = false;
  /// SHARC_HIER_PROXY: which rank of a node stands in for a rank of another node in the
  /// hierarchical collectives.
  HierProxy hierProxy = HierProxy::Auto;
  /// SHARC_NICS: comma-separated NICs (libfabric domain names or prefixes, e.g.
  /// "eth0,eth1" or "rdmap16s27,rdmap32s27"): one fabric endpoint per NIC, large messages
  /// striped over them. Empty: the NICs the host topology places the rank on.
  std::vector<std::string> nics;
  /// FI_TCP_IFACE: the one interface libfabric's tcp provider uses (read for the tuner's
  /// fabric link when SHARC_NICS is not set).
  std::string tcpIface;
  /// SHARC_NIC_MBITS: line rate of each of the NICs above in Mbit/s, instead of what sysfs
  /// says (a veth always says 10000: tools/emulate-cluster.sh sets its --rate here); 0 = sysfs.
  double nicMbits = 0;
  std::string topoFile;  ///< SHARC_TOPO_FILE: hwloc XML topology to use instead of the live one
  /// SHARC_GPU_STAGING_CHUNK: bytes per rank of each chunk that a collective on CUDA buffers
  /// stages through host memory (>= 4096)
  size_t gpuStagingChunkBytes = size_t{4} << 20;
  /// SHARC_TRACE_ENTRIES: operations the flight recorder keeps per communicator (>= 1).
  size_t traceEntries = 2000;
  /// SHARC_TRACE_DIR: where each rank writes its flight record when a communicator fails
  /// ("" = no dump unless asked for through the API, SIGUSR1 or the trace socket).
  std::string traceDir;
  /// SHARC_TRACE_SIGNAL: SIGUSR1 makes the process write its flight records to traceDir.
  bool traceSignal = false;
  /// SHARC_TRACE_SOCKET: a directory where each rank listens on a Unix socket (owner-only)
  /// and answers with its flight records (`sharc-trace --live DIR`); "" = off.
  std::string traceSocket;
  /// SHARC_STALL_PROBE_MS: an operation that waited this long asks the peer it waits on
  /// which call that peer is in (0 = never).
  std::chrono::milliseconds stallProbe{1500};
  /// SHARC_FAULT: faults to inject (docs/faults.md "Fault injection"; "" = none). Parsed by
  /// core::FaultPlan.
  std::string fault;

  /// Reads the environment; throws sharc::Error(InvalidArgument) naming the variable and
  /// the expected form when a value is malformed.
  static Config load();
  /// The process-wide configuration, loaded on first use.
  static const Config& get();
};

/// The keys a SHARC_TUNER_FILE may set (the tuner's parameters, src/algorithms/tuner.hpp).
inline constexpr const char* kTunerKeys[] = {
    "local.alpha_us",     "local.gbps", "fabric.alpha_us", "fabric.gbps",      "copy.gbps",
    "reduce.gbps",        "step_us",    "cores",           "local.cache_gbps", "switch_us",
    "fabric.half_duplex", "cma.gbps",   "gpu.copy_gbps",   "gpu.reduce_gbps",  "gpu.pcie_gbps"};

/// The `choice.` lines of a SHARC_TUNER_FILE (parseTunerText skips them); throws
/// sharc::Error(InvalidArgument) naming SHARC_TUNER_FILE, `path`, the line and the form.
std::vector<TunerChoice> parseTunerChoices(const std::string& text, const std::string& path);

/// Parses the text of a SHARC_TUNER_FILE: one `key = value` per line, '#' starts a comment,
/// blank lines are skipped, keys from kTunerKeys, values non-negative decimal numbers
/// (bandwidths and cores > 0 where set; cores may be 0 = detect). Throws
/// sharc::Error(InvalidArgument) naming SHARC_TUNER_FILE, `path`, the line and the key.
std::map<std::string, double> parseTunerText(const std::string& text, const std::string& path);

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
