// sharc::Communicator: creation (bootstrap -> provider -> endpoint) and the public methods.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "communicator_impl.hpp"
#include "core/config.hpp"
#include "core/fault_plan.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "factory.hpp"
#include "topology/nic_mapping.hpp"
#include "topology/topology.hpp"
#include "transport/cma.hpp"
#include "transport/faulty_endpoint.hpp"
#include "transport/routed_endpoint.hpp"
#include "transport/striped_endpoint.hpp"

namespace sharc {
namespace detail {
namespace {

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

// The running kernel's boot id: the same in every container and network namespace of one
// machine, so it tells which ranks share CPUs even where SHARC_NODE_ID splits them into nodes.
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

}  // namespace

std::shared_ptr<Communicator> CommunicatorImpl::wrap(std::shared_ptr<CommState> state) {
  return std::shared_ptr<Communicator>(
      new Communicator(std::make_unique<CommunicatorImpl>(std::move(state))));
}

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
  const auto& algos = config.algorithms;
  // SHARC_FAULT (fault injection, off by default): parsed before any traffic, so that a
  // malformed plan fails every rank at once.
  core::FaultPlan* const faults = config.fault.empty() ? nullptr : core::FaultPlan::active();

  // Round 1: which ranks share this host decides whether shm, loopback and single-copy reads
  // are candidates. Each rank also says its pid, where its CMA probe word is and which
  // machine it runs on (ranks of several emulated nodes may share one machine's CPUs).
  const std::string node = nodeIdentity();
  const std::string machine = machineIdentity();
  const std::vector<std::string> hello =
      boot->allGather(node + '\0' + std::to_string(getpid()) + '\0' +
                      std::to_string(transport::cmaProbeAddress()) + '\0' + machine);
  std::vector<std::string> nodes(hello.size());
  long ranksOnThisMachine = 0;
  std::vector<int32_t> pids(hello.size());
  std::vector<uint64_t> probes(hello.size());
  for (size_t r = 0; r < hello.size(); ++r) {
    const auto a = hello[r].find('\0'), b = hello[r].find('\0', a + 1);
    const auto c = b == std::string::npos ? b : hello[r].find('\0', b + 1);
    if (a == std::string::npos || b == std::string::npos || c == std::string::npos)
      throw Error(Result::InternalError, "init: malformed hello from rank " + std::to_string(r));
    nodes[r] = hello[r].substr(0, a);
    pids[r] = static_cast<int32_t>(std::stol(hello[r].substr(a + 1, b - a - 1)));
    probes[r] = std::stoull(hello[r].substr(b + 1, c - b - 1));
    if (!machine.empty() && hello[r].substr(c + 1) == machine) ++ranksOnThisMachine;
  }
  const bool allLocal =
      std::all_of(nodes.begin(), nodes.end(), [&](const std::string& n) { return n == node; });
  if (allLocal && config.cma) transport::cmaAllowPeers();

  // The ranks of this node (ascending) share a segment that the lowest of them creates.
  std::vector<int> local;
  for (int r = 0; r < size; ++r)
    if (nodes[r] == node) local.push_back(r);
  const bool wantShm = options.sharedMemory && config.shm && local.size() > 1;
  transport::EndpointOptions epOptions;
  epOptions.provider = !options.provider.empty() ? options.provider : config.provider;
  epOptions.allLocal = allLocal;
  epOptions.sharedMemoryCarriesAll = allLocal && wantShm;
  const int localIndex =
      static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
  const topo::RankPlacement place = placeOnHost(rank, localIndex, static_cast<int>(local.size()));
  epOptions.nearNics = place.nicNames;
  // Several NICs (SHARC_NICS, else the placement's): one endpoint per NIC, striped.
  std::vector<std::string> railNics = !config.nics.empty() ? config.nics : place.railNames;
  if (allLocal) railNics.clear();  // one host: nothing crosses a NIC
  std::unique_ptr<transport::Endpoint> endpoint;
  if (railNics.size() > 1) {
    std::vector<std::unique_ptr<transport::Endpoint>> rails;
    for (const std::string& nic : railNics) {
      transport::EndpointOptions o = epOptions;
      o.requiredNic = nic;
      rails.push_back(transport::openFabricEndpoint(o));
    }
    endpoint = std::make_unique<transport::StripedEndpoint>(std::move(rails));
  } else {
    endpoint = transport::openFabricEndpoint(epOptions);
  }

  const bool leader = local.front() == rank;
  const auto geometry = transport::ShmGeometry::forRanks(static_cast<int>(local.size()));
  transport::ShmSegment segment;
  bool shmReady = false;  // mapped, and this rank's FIFOs reserved on its NUMA node
  if (wantShm && leader) {
    try {
      segment = transport::ShmSegment::create(geometry.segmentBytes());
      geometry.reserveInbound(segment, localIndex);
      shmReady = true;
    } catch (const Error& e) {
      SHARC_WARN("rank " << rank << ": " << e.what()
                         << "; the provider carries this node's traffic");
    }
  }

  // Round 2: provider name, the node's segment (from its creator) and fabric address.
  const std::string provider = endpoint->providerName();
  const std::vector<std::string> blobs =
      boot->allGather(provider + '\0' + segment.name() + '\0' + endpoint->localAddress());
  std::vector<std::string> addresses(blobs.size());
  std::string segmentName;
  for (size_t r = 0; r < blobs.size(); ++r) {
    const auto nul = blobs[r].find('\0');
    const auto nul2 = nul == std::string::npos ? nul : blobs[r].find('\0', nul + 1);
    const std::string theirs = blobs[r].substr(0, nul);
    if (nul2 == std::string::npos || theirs != provider)
      throw Error(Result::InvalidUsage,
                  "rank " + std::to_string(rank) + ": init: rank " + std::to_string(r) +
                      " uses provider '" + theirs + "' but this rank uses '" + provider +
                      "' (set SHARC_FI_PROVIDER to the same value on every rank)");
    if (static_cast<int>(r) == local.front())
      segmentName = blobs[r].substr(nul + 1, nul2 - nul - 1);
    addresses[r] = blobs[r].substr(nul2 + 1);
  }
  endpoint->setPeers(addresses);
  if (wantShm && !leader && !segmentName.empty()) {
    try {
      segment = transport::ShmSegment::open(segmentName, geometry.segmentBytes());
      geometry.reserveInbound(segment, localIndex);
      shmReady = true;
    } catch (const Error& e) {
      SHARC_WARN("rank " << rank << ": " << e.what()
                         << "; the provider carries this node's traffic");
    }
  }

  cpu_set_t cpus;
  const long usableCpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
                              ? CPU_COUNT(&cpus)
                              : sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<uint32_t> peers(static_cast<size_t>(size));
  std::iota(peers.begin(), peers.end(), 0u);
  // Round 3 (also the barrier before any fabric traffic): can this rank read the next one's
  // memory (single-copy algorithms are used only if every rank can), and has it mapped its
  // node's segment (shared memory is used on a node only if all its ranks have)?
  const int next = (rank + 1) % size;
  const bool canRead = allLocal && config.cma && transport::cmaProbe(pids[next], probes[next]);
  const std::vector<std::string> flags =
      boot->allGather(std::string(canRead ? "1" : "0") + (shmReady ? "1" : "0"));
  segment.unlink();  // every rank of the node has mapped it (or given up): no name is left
  const bool singleCopy =
      std::all_of(flags.begin(), flags.end(), [](const std::string& v) { return v[0] == '1'; });
  const bool shm = wantShm && std::all_of(local.begin(), local.end(), [&](int r) {
                     return flags[r].size() == 2 && flags[r][1] == '1';
                   });
  if (shm) {
    std::vector<uint32_t> peerOfLocal(local.begin(), local.end());
    std::vector<pid_t> pidOfLocal;
    for (int r : local) pidOfLocal.push_back(pids[r]);
    const int me = static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
    endpoint = std::make_unique<transport::RoutedEndpoint>(
        std::move(endpoint),
        std::make_unique<transport::ShmEndpoint>(std::move(segment), geometry, me,
                                                 std::move(peerOfLocal), std::move(pidOfLocal)),
        static_cast<size_t>(size));
  }
  if (faults && faults->concerns(rank))  // only a rank that injects pays for the decorator
    endpoint = std::make_unique<transport::FaultyEndpoint>(std::move(endpoint), *faults, rank);
  auto engine = std::make_shared<Engine>(std::move(endpoint));
  // Ranks outnumber the CPUs they share: counted per machine, not per node, so that emulated
  // nodes (namespaces) or containers on one host also wait politely (request.cc).
  engine->oversubscribed =
      std::max(static_cast<long>(local.size()), ranksOnThisMachine) > usableCpus;
  engine->sharedMemory = shm;
  // One tcp connection carrying bulk data both ways got about half the link rate on the
  // emulated cluster: over tcp the hierarchical collectives pair ranks one way only.
  engine->hierRotate = config.hierProxy == core::HierProxy::Rotated ||
                       (config.hierProxy == core::HierProxy::Auto && provider.rfind("tcp", 0) == 0);
  engine->locality = !allLocal    ? algo::Locality::Network
                     : singleCopy ? algo::Locality::OneHostSingleCopy
                                  : algo::Locality::OneHost;
  const std::vector<int32_t> worldPids = pids;
  if (!singleCopy) pids.clear();
  std::vector<uint64_t> nodeKeys;
  for (const std::string& n : nodes)  // key: the lowest rank on the same node
    nodeKeys.push_back(
        static_cast<uint64_t>(std::find(nodes.begin(), nodes.end(), n) - nodes.begin()));
  // Who is who, for flight records: the key is a hash of every rank's fabric address (the
  // same on all ranks of this world, different for another job or another init).
  engine->world.rank = rank;
  engine->world.size = size;
  uint64_t hash = core::kFnv1a64Basis;
  for (const std::string& a : addresses) hash = core::fnv1a64(a + '\n', hash);
  char keyText[17];
  std::snprintf(keyText, sizeof(keyText), "%016llx", static_cast<unsigned long long>(hash));
  engine->world.key = keyText;
  for (const std::string& n : nodes) engine->world.hosts.push_back(n.substr(0, n.find('/')));
  engine->world.pids = worldPids;
  auto state = std::make_shared<CommState>(engine, 0, rank, std::move(peers), std::move(pids),
                                           algo::NodeMap::fromKeys(nodeKeys), timeout, algos);
  {
    std::lock_guard<std::mutex> lock(engine->mu);
    state->start();
  }
  boot->allGather(std::string());  // every rank's abort-notice receive is posted
  engine->startWatch();
  SHARC_INFO("rank " << rank << " of " << size << ": provider " << provider
                     << (allLocal ? " (all ranks on this host)" : "")
                     << (engine->oversubscribed ? ", more ranks on this machine than CPUs" : "")
                     << (singleCopy ? ", single-copy reads between ranks" : "")
                     << (railNics.size() > 1
                             ? ", " + std::to_string(railNics.size()) + " rails (striped)"
                             : std::string())
                     << (shm ? ", shared memory between the " + std::to_string(local.size()) +
                                   " ranks of this node"
                             : std::string())
                     << ", timeout " << timeout.count() << " ms");
  return CommunicatorImpl::wrap(std::move(state));
}

}  // namespace detail

Communicator::Communicator(std::unique_ptr<detail::CommunicatorImpl> impl)
    : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  destroy();
}

std::shared_ptr<Communicator> Communicator::create(const UniqueId& id, int nranks, int rank,
                                                   const CommOptions& options) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    throw Error(Result::InvalidArgument, "rank " + std::to_string(rank) +
                                             ": init: rank must be in "
                                             "[0, nranks) and nranks >= 1 (got nranks " +
                                             std::to_string(nranks) + ")");
  const bootstrap::RootAddress root = bootstrap::decodeUniqueId(id);
  const auto timeout = options.timeout.count() > 0 ? options.timeout : core::Config::get().timeout;
  return detail::createCommunicator(bootstrap::connectToRoot(root, rank, nranks, timeout), options);
}

std::shared_ptr<Communicator> Communicator::createFromEnvironment(const CommOptions& options) {
  const auto env = core::readLaunchEnv();
  if (!env)
    throw Error(Result::InvalidArgument,
                "init: no launch environment: set SHARC_ROOT=host:port, SHARC_RANK and "
                "SHARC_WORLD_SIZE (or torchrun's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)");
  const auto timeout = options.timeout.count() > 0 ? options.timeout : core::Config::get().timeout;
  const std::string hostPort = env->rootHost + ":" + std::to_string(env->rootPort);
  bootstrap::RootAddress root{env->rootHost, env->rootPort,
                              bootstrap::environmentToken(hostPort, env->worldSize, env->jobToken)};
  std::unique_ptr<bootstrap::RootServer> server;
  if (env->rank == 0) {
    server = bootstrap::RootServer::start(env->rootHost, env->rootPort, root.token, env->worldSize,
                                          timeout);
    server->detach();  // it ends by itself once every rank has disconnected
  }
  return detail::createCommunicator(
      bootstrap::connectToRoot(root, env->rank, env->worldSize, timeout), options);
}

int Communicator::rank() const noexcept {
  return impl_->rank();
}
int Communicator::size() const noexcept {
  return impl_->size();
}
std::string Communicator::provider() const {
  return impl_->provider();
}

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  return impl_->split(color, key);
}

Request Communicator::iallGather(const void* s, void* r, size_t count, DataType type) {
  return impl_->start(CollectiveKind::AllGather, s, r, count, type, RedOp::Sum, 0);
}
Request Communicator::ireduceScatter(const void* s, void* r, size_t count, DataType type,
                                     RedOp op) {
  return impl_->start(CollectiveKind::ReduceScatter, s, r, count, type, op, 0);
}
Request Communicator::iallReduce(const void* s, void* r, size_t count, DataType type, RedOp op) {
  return impl_->start(CollectiveKind::AllReduce, s, r, count, type, op, 0);
}
Request Communicator::ibroadcast(const void* s, void* r, size_t count, DataType type, int root) {
  return impl_->start(CollectiveKind::Broadcast, s, r, count, type, RedOp::Sum, root);
}
Request Communicator::ibarrier() {
  return impl_->start(CollectiveKind::Barrier, nullptr, nullptr, 0, DataType::Uint8, RedOp::Sum, 0);
}

void Communicator::allGather(const void* s, void* r, size_t count, DataType type) {
  iallGather(s, r, count, type).wait();
}
void Communicator::reduceScatter(const void* s, void* r, size_t count, DataType type, RedOp op) {
  ireduceScatter(s, r, count, type, op).wait();
}
void Communicator::allReduce(const void* s, void* r, size_t count, DataType type, RedOp op) {
  iallReduce(s, r, count, type, op).wait();
}
void Communicator::broadcast(const void* s, void* r, size_t count, DataType type, int root) {
  ibroadcast(s, r, count, type, root).wait();
}
void Communicator::barrier() {
  ibarrier().wait();
}

void Communicator::destroy(std::chrono::milliseconds closingWait) noexcept {
  if (impl_) impl_->destroy(closingWait);
}

void Communicator::abort(const std::string& reason) noexcept {
  if (impl_) impl_->abort(reason);
}

std::string Communicator::traceJson() const {
  return impl_->traceJson();
}

std::string Communicator::dumpTrace(const std::string& dir) const {
  return impl_->dumpTrace(dir);
}

void Communicator::setTimeout(std::chrono::milliseconds timeout) {
  impl_->setTimeout(timeout);
}

Result Communicator::failure(std::string* message) const {
  return impl_->failure(message);
}

}  // namespace sharc
