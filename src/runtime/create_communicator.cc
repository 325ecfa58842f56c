// createCommunicator as named steps: survey the ranks, open the endpoint, share the node's
// segment, exchange addresses, agree on the paths, stack the endpoint's layers, start.
#include "runtime/create_communicator.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sharc/cuda.hpp>
#include <string_view>
#include <unordered_map>

#include "core/config.hpp"
#include "core/fault_plan.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "runtime/bootstrap_messages.hpp"
#include "runtime/communicator_impl.hpp"
#include "topology/nic_mapping.hpp"
#include "topology/topology.hpp"
#include "transport/cma.hpp"
#include "transport/faulty_endpoint.hpp"
#include "transport/routed_endpoint.hpp"
#include "transport/shm_endpoint.hpp"
#include "transport/striped_endpoint.hpp"

namespace sharc::detail {
namespace {

// The kernel's boot id: the same in every container and network namespace of one machine, so
// it tells which ranks share CPUs even where SHARC_NODE_ID splits them into nodes.
std::string machineIdentity() {
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  return bootId;
}

std::string nodeIdentity() {
  const std::string& configured = core::Config::get().nodeId;
  if (!configured.empty()) return configured;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + machineIdentity();
}

// What round 1 tells about every rank, and what follows from it for this one.
struct Survey {
  std::vector<HelloMessage> hello;  // per rank
  std::vector<int> local;           // the ranks of this node, ascending
  int localIndex = 0;               // this rank's index in `local`
  bool allLocal = false;            // every rank is on this node
  long ranksOnThisMachine = 0;      // ranks that share this machine's CPUs
};

Survey surveyRanks(bootstrap::Bootstrap& boot) {
  const int rank = boot.rank();
  HelloMessage mine{nodeIdentity(), static_cast<int32_t>(getpid()), transport::cmaProbeAddress(),
                    machineIdentity()};
  const std::vector<std::string> all = boot.allGather(mine.encode());
  Survey s;
  for (size_t r = 0; r < all.size(); ++r) {
    s.hello.push_back(HelloMessage::decode(all[r], rank, static_cast<int>(r)));
    const HelloMessage& h = s.hello.back();
    if (h.node == mine.node) s.local.push_back(static_cast<int>(r));
    if (!mine.machine.empty() && h.machine == mine.machine) ++s.ranksOnThisMachine;
  }
  s.allLocal = s.local.size() == all.size();
  s.localIndex =
      static_cast<int>(std::find(s.local.begin(), s.local.end(), rank) - s.local.begin());
  return s;
}

// Where this rank sits on its host (nearest NICs and CPUs, from hwloc or SHARC_TOPO_FILE).
// A topology that cannot be read costs only the placement, with a warning.
topo::RankPlacement placeOnHost(int rank, int localIndex, int localRanks) {
  try {
    const topo::HostTopology host = topo::HostTopology::load();
    topo::RankPlacement p = topo::placeRank(host, localIndex, localRanks);
    for (int nic : p.nics) {  // the first OS name of each NIC: one rail per NIC
      const topo::PciDevice& d = host.nics[static_cast<size_t>(nic)];
      if (d.osDevices.empty()) continue;
      p.nicNames.push_back(d.osDevices.front());
      if (d.vendorId == 0x1d0f || d.classId == 0x0207) p.railNames.push_back(d.osDevices.front());
    }
    std::string names;
    for (const auto& n : p.nicNames) names += (names.empty() ? "" : ",") + n;
    SHARC_INFO("rank " << rank << ": local rank " << localIndex << " of " << localRanks << " on "
                       << host.source << " topology: gpu " << p.gpu << ", nics "
                       << (names.empty() ? "none" : names) << ", cpus "
                       << (p.cpus.empty() ? "any" : p.cpus) << " (" << p.reason << ")");
    if (core::Config::get().bindThread) topo::bindCurrentThreadNear(p.cpus);
    return p;
  } catch (const Error& e) {
    SHARC_WARN("rank " << rank << ": host topology unavailable: " << e.what());
    return {};
  }
}

// The fabric endpoint: one per NIC, striped, where several rails lead off the host.
std::unique_ptr<transport::Endpoint> openEndpoint(const transport::EndpointOptions& options,
                                                  const std::vector<std::string>& railNics) {
  if (railNics.size() <= 1) return transport::openFabricEndpoint(options);
  std::vector<std::unique_ptr<transport::Endpoint>> rails;
  for (const std::string& nic : railNics) {
    transport::EndpointOptions o = options;
    o.requiredNic = nic;
    rails.push_back(transport::openFabricEndpoint(o));
  }
  return std::make_unique<transport::StripedEndpoint>(std::move(rails));
}

// The node's shared-memory segment, created (by the lowest rank) or opened (by the others),
// with this rank's FIFOs reserved on its NUMA node. A failure costs only the shm path.
struct NodeSegment {
  transport::ShmGeometry geometry;
  transport::ShmSegment segment;
  bool ready = false;

  void create(int rank, int localIndex) { attach(rank, localIndex, ""); }
  void open(int rank, int localIndex, const std::string& name) { attach(rank, localIndex, name); }

 private:
  void attach(int rank, int localIndex, const std::string& name) {
    try {
      segment = name.empty() ? transport::ShmSegment::create(geometry.segmentBytes())
                             : transport::ShmSegment::open(name, geometry.segmentBytes());
      geometry.reserveInbound(segment, localIndex);
      ready = true;
    } catch (const Error& e) {
      SHARC_WARN("rank " << rank << ": " << e.what()
                         << "; the provider carries this node's traffic");
    }
  }
};

// Round 2: every rank's provider (which must match), its node's segment name and its fabric
// address; the endpoint learns its peers.
std::vector<std::string> exchangeAddresses(bootstrap::Bootstrap& boot,
                                           transport::Endpoint& endpoint, const Survey& survey,
                                           std::string* segmentName, const std::string& mySegment) {
  const int rank = boot.rank();
  const AddressMessage mine{endpoint.providerName(), mySegment, endpoint.localAddress()};
  const std::vector<std::string> all = boot.allGather(mine.encode());
  std::vector<std::string> addresses(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    AddressMessage m = AddressMessage::decode(all[r], rank, static_cast<int>(r));
    if (m.provider != mine.provider)
      throw Error(Result::InvalidUsage,
                  "rank " + std::to_string(rank) + ": init: rank " + std::to_string(r) +
                      " uses provider '" + m.provider + "' but this rank uses '" + mine.provider +
                      "' (set SHARC_FI_PROVIDER to the same value on every rank)");
    if (static_cast<int>(r) == survey.local.front()) *segmentName = m.segment;
    addresses[r] = std::move(m.address);
  }
  endpoint.setPeers(addresses);
  return addresses;
}

// What round 3 decides: the single-copy algorithms are used only if every rank can read the
// next one's memory, shared memory on a node only if all its ranks have mapped the segment.
struct Paths {
  bool singleCopy = false;
  bool shm = false;
};

Paths agreeOnPaths(bootstrap::Bootstrap& boot, const Survey& survey, bool wantShm, bool shmReady) {
  const int rank = boot.rank(), next = (rank + 1) % boot.size();
  const HelloMessage& peer = survey.hello[static_cast<size_t>(next)];
  ReadinessMessage mine;
  mine.canReadNext =
      survey.allLocal && core::Config::get().cma && transport::cmaProbe(peer.pid, peer.cmaProbe);
  mine.shmMapped = shmReady;
  std::vector<ReadinessMessage> all;
  int r = 0;
  for (const std::string& bytes : boot.allGather(mine.encode()))
    all.push_back(ReadinessMessage::decode(bytes, rank, r++));
  Paths p;
  p.singleCopy = std::all_of(all.begin(), all.end(), [](auto& m) { return m.canReadNext; });
  p.shm = wantShm && std::all_of(survey.local.begin(), survey.local.end(),
                                 [&](int l) { return all[static_cast<size_t>(l)].shmMapped; });
  return p;
}

// The fabric endpoint with shared memory routed beside it for the node's ranks, and the
// fault injector on top where SHARC_FAULT concerns this rank.
std::unique_ptr<transport::Endpoint> stackEndpoint(std::unique_ptr<transport::Endpoint> fabric,
                                                   NodeSegment node, const Survey& survey, bool shm,
                                                   int rank, int size) {
  std::unique_ptr<transport::Endpoint> endpoint = std::move(fabric);
  if (shm) {
    std::vector<uint32_t> peerOfLocal(survey.local.begin(), survey.local.end());
    std::vector<pid_t> pidOfLocal;
    for (int r : survey.local) pidOfLocal.push_back(survey.hello[static_cast<size_t>(r)].pid);
    endpoint = std::make_unique<transport::RoutedEndpoint>(
        std::move(endpoint),
        std::make_unique<transport::ShmEndpoint>(std::move(node.segment), node.geometry,
                                                 survey.localIndex, std::move(peerOfLocal),
                                                 std::move(pidOfLocal)),
        static_cast<size_t>(size));
  }
  core::FaultPlan* const faults =
      core::Config::get().fault.empty() ? nullptr : core::FaultPlan::active();
  if (faults && faults->concerns(rank))  // only a rank that injects pays for the decorator
    endpoint = std::make_unique<transport::FaultyEndpoint>(std::move(endpoint), *faults, rank);
  return endpoint;
}

// Who is who, for flight records: the key hashes every rank's fabric address (the same on
// all ranks of this world, different for another job or another init).
WorldInfo worldInfo(int rank, const Survey& survey, const std::vector<std::string>& addresses) {
  WorldInfo w;
  w.rank = rank;
  w.size = static_cast<int>(survey.hello.size());
  uint64_t hash = core::kFnv1a64Basis;
  for (const std::string& a : addresses) hash = core::fnv1a64(a + '\n', hash);
  char keyText[17];
  std::snprintf(keyText, sizeof(keyText), "%016llx", static_cast<unsigned long long>(hash));
  w.key = keyText;
  for (const HelloMessage& h : survey.hello) {
    w.hosts.push_back(h.node.substr(0, h.node.find('/')));
    w.pids.push_back(h.pid);
  }
  return w;
}

// Milliseconds each step of creation took, for the INFO log (as NCCL's "Init timings").
class StepTimer {
 public:
  void step(const char* name) {
    const auto now = std::chrono::steady_clock::now();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.1f", line_.empty() ? "" : ", ", name,
                  std::chrono::duration<double, std::milli>(now - last_).count());
    line_ += buf;
    last_ = now;
  }
  std::string line() const {
    char buf[48];
    std::snprintf(buf, sizeof buf, "; total %.1f",
                  std::chrono::duration<double, std::milli>(last_ - start_).count());
    return line_ + buf;
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
  std::string line_;
};

long usableCpus() {
  cpu_set_t cpus;
  return sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus)
                                                        : sysconf(_SC_NPROCESSORS_ONLN);
}

}  // namespace

std::shared_ptr<Communicator> createCommunicator(std::unique_ptr<bootstrap::Bootstrap> boot,
                                                 const CommOptions& options) {
  const core::Config& config = core::Config::get();
  const int rank = boot->rank(), size = boot->size();
  core::setLogRank(rank);
  if (static_cast<uint32_t>(size) > algo::tag::kMaxRanks)
    throw Error(Result::InvalidArgument,
                "rank " + std::to_string(rank) + ": init: " + std::to_string(size) +
                    " ranks exceed the limit of " + std::to_string(algo::tag::kMaxRanks));
  const auto timeout = options.timeout.count() > 0 ? options.timeout : config.timeout;
  // SHARC_FAULT is parsed before any traffic, so that a malformed plan fails every rank at once.
  if (!config.fault.empty()) core::FaultPlan::active();

  StepTimer timer;
  const Survey survey = surveyRanks(*boot);
  timer.step("survey (all ranks joined)");
  if (survey.allLocal && config.cma) transport::cmaAllowPeers();
  const int localRanks = static_cast<int>(survey.local.size());
  const bool wantShm = options.sharedMemory && config.shm && localRanks > 1;
  const topo::RankPlacement place = placeOnHost(rank, survey.localIndex, localRanks);

  transport::EndpointOptions epOptions;
  epOptions.provider = !options.provider.empty() ? options.provider : config.provider;
  epOptions.allLocal = survey.allLocal;
  epOptions.sharedMemoryCarriesAll = survey.allLocal && wantShm;
  epOptions.nearNics = place.nicNames;
  // The device path's links carry device memory where the provider has FI_HMEM: asked for
  // where that path can run between hosts (CUDA IPC carries device memory within one), and
  // under SHARC_DEVICE_PATH=host, whose "device" memory is host memory.
  epOptions.hmem =
      config.devicePath == core::DevicePath::Host ||
      (config.devicePath == core::DevicePath::Direct && !survey.allLocal && cudaAvailable());
  // Several NICs (SHARC_NICS, else the placement's) get one endpoint each; one host needs none.
  std::vector<std::string> railNics = !config.nics.empty() ? config.nics : place.railNames;
  if (survey.allLocal) railNics.clear();
  std::unique_ptr<transport::Endpoint> fabric = openEndpoint(epOptions, railNics);
  const std::string provider = fabric->providerName();
  timer.step("endpoint");

  NodeSegment node{transport::ShmGeometry::forRanks(localRanks), {}, false};
  const bool leader = survey.local.front() == rank;
  if (wantShm && leader) node.create(rank, survey.localIndex);
  std::string segmentName;
  const std::vector<std::string> addresses =
      exchangeAddresses(*boot, *fabric, survey, &segmentName, node.segment.name());
  if (wantShm && !leader && !segmentName.empty()) node.open(rank, survey.localIndex, segmentName);
  timer.step("addresses");

  const Paths paths = agreeOnPaths(*boot, survey, wantShm, node.ready);
  node.segment.unlink();  // every rank of the node has mapped it (or given up): no name is left
  timer.step("paths");

  auto engine = std::make_shared<Engine>(
      stackEndpoint(std::move(fabric), std::move(node), survey, paths.shm, rank, size));
  // Ranks outnumber the CPUs they share: counted per machine, not per node, so that emulated
  // nodes (namespaces) or containers on one host also wait politely (request_wait.cc).
  engine->oversubscribed =
      std::max(static_cast<long>(localRanks), survey.ranksOnThisMachine) > usableCpus();
  engine->sharedMemory = paths.shm;
  // Over tcp the hierarchical collectives pair ranks one way only (docs/tuner.md, "tcp
  // turn-taking").
  engine->hierRotate = config.hierProxy == core::HierProxy::Rotated ||
                       (config.hierProxy == core::HierProxy::Auto && provider.rfind("tcp", 0) == 0);
  engine->locality = !survey.allLocal   ? algo::Locality::Network
                     : paths.singleCopy ? algo::Locality::OneHostSingleCopy
                                        : algo::Locality::OneHost;
  engine->world = worldInfo(rank, survey, addresses);

  std::vector<uint32_t> peers(static_cast<size_t>(size));
  std::iota(peers.begin(), peers.end(), 0u);
  std::vector<int32_t> pids;       // only where single-copy reads are used
  std::vector<uint64_t> nodeKeys;  // per rank: the lowest rank on its node
  std::unordered_map<std::string_view, uint64_t> firstOnNode;  // linear in the ranks
  for (const HelloMessage& h : survey.hello) {
    if (paths.singleCopy) pids.push_back(h.pid);
    nodeKeys.push_back(firstOnNode.try_emplace(h.node, nodeKeys.size()).first->second);
  }
  auto state =
      std::make_shared<CommState>(engine, 0, rank, std::move(peers), std::move(pids),
                                  algo::NodeMap::fromKeys(nodeKeys), timeout, config.algorithms);
  {
    std::lock_guard<std::mutex> lock(engine->mu);
    state->start();
  }
  timer.step("engine");
  boot->allGather(std::string());  // round 4: every rank's abort-notice receive is posted
  engine->startWatch();
  timer.step("start");
  SHARC_INFO("rank " << rank << " of " << size << ": provider " << provider
                     << (survey.allLocal ? " (all ranks on this host)" : "")
                     << (engine->oversubscribed ? ", more ranks on this machine than CPUs" : "")
                     << (paths.singleCopy ? ", single-copy reads between ranks" : "")
                     << (railNics.size() > 1
                             ? ", " + std::to_string(railNics.size()) + " rails (striped)"
                             : std::string())
                     << (paths.shm ? ", shared memory between the " + std::to_string(localRanks) +
                                         " ranks of this node"
                                   : std::string())
                     << ", timeout " << timeout.count() << " ms");
  SHARC_INFO("rank " << rank << ": init timings (ms): " << timer.line());
  return CommunicatorImpl::wrap(std::move(state));
}

}  // namespace sharc::detail
