// sharc::Communicator: creation (bootstrap -> provider -> endpoint) and the public methods.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "communicator_impl.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "factory.hpp"
#include "transport/cma.hpp"

namespace sharc {
namespace detail {
namespace {

std::string nodeIdentity() {
  const std::string& configured = core::Config::get().nodeId;
  if (!configured.empty()) return configured;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  return std::string(host) + "/" + bootId;
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
  const auto algos = algo::AlgorithmOverride::parse(config.algorithm);

  // Round 1: which ranks share this host decides whether shm, loopback and single-copy reads
  // are candidates. Each rank also says its pid and where its CMA probe word is.
  const std::string node = nodeIdentity();
  const std::vector<std::string> hello = boot->allGather(
      node + '\0' + std::to_string(getpid()) + '\0' + std::to_string(transport::cmaProbeAddress()));
  std::vector<std::string> nodes(hello.size());
  std::vector<int32_t> pids(hello.size());
  std::vector<uint64_t> probes(hello.size());
  for (size_t r = 0; r < hello.size(); ++r) {
    const auto a = hello[r].find('\0'), b = hello[r].find('\0', a + 1);
    if (a == std::string::npos || b == std::string::npos)
      throw Error(Result::InternalError, "init: malformed hello from rank " + std::to_string(r));
    nodes[r] = hello[r].substr(0, a);
    pids[r] = static_cast<int32_t>(std::stol(hello[r].substr(a + 1, b - a - 1)));
    probes[r] = std::stoull(hello[r].substr(b + 1));
  }
  const bool allLocal =
      std::all_of(nodes.begin(), nodes.end(), [&](const std::string& n) { return n == node; });
  if (allLocal && config.cma) transport::cmaAllowPeers();

  transport::EndpointOptions epOptions;
  epOptions.provider = !options.provider.empty() ? options.provider : config.provider;
  epOptions.allLocal = allLocal;
  auto endpoint = transport::openFabricEndpoint(epOptions);

  // Round 2: provider name and fabric address of every rank.
  const std::string provider = endpoint->providerName();
  const std::vector<std::string> blobs =
      boot->allGather(provider + std::string(1, '\0') + endpoint->localAddress());
  std::vector<std::string> addresses(blobs.size());
  for (size_t r = 0; r < blobs.size(); ++r) {
    const auto nul = blobs[r].find('\0');
    const std::string theirs = blobs[r].substr(0, nul);
    if (nul == std::string::npos || theirs != provider)
      throw Error(Result::InvalidUsage,
                  "rank " + std::to_string(rank) + ": init: rank " + std::to_string(r) +
                      " uses provider '" + theirs + "' but this rank uses '" + provider +
                      "' (set SHARC_FI_PROVIDER to the same value on every rank)");
    addresses[r] = blobs[r].substr(nul + 1);
  }
  endpoint->setPeers(addresses);

  auto engine = std::make_shared<Engine>(std::move(endpoint));
  cpu_set_t cpus;
  const long localRanks = std::count(nodes.begin(), nodes.end(), node);
  const long usableCpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
                              ? CPU_COUNT(&cpus)
                              : sysconf(_SC_NPROCESSORS_ONLN);
  engine->oversubscribed = localRanks > usableCpus;
  std::vector<uint32_t> peers(static_cast<size_t>(size));
  std::iota(peers.begin(), peers.end(), 0u);
  // Round 3 (also the barrier before any fabric traffic): can this rank read the next one's
  // memory? Single-copy algorithms are used only if every rank can.
  const int next = (rank + 1) % size;
  const bool canRead = allLocal && config.cma && transport::cmaProbe(pids[next], probes[next]);
  const std::vector<std::string> reads = boot->allGather(canRead ? "1" : "0");
  const bool singleCopy =
      std::all_of(reads.begin(), reads.end(), [](const std::string& v) { return v == "1"; });
  engine->locality = !allLocal    ? algo::Locality::Network
                     : singleCopy ? algo::Locality::OneHostSingleCopy
                                  : algo::Locality::OneHost;
  if (!singleCopy) pids.clear();
  std::vector<uint64_t> nodeKeys;
  for (const std::string& n : nodes)  // key: the lowest rank on the same node
    nodeKeys.push_back(
        static_cast<uint64_t>(std::find(nodes.begin(), nodes.end(), n) - nodes.begin()));
  auto state = std::make_shared<CommState>(engine, 0, rank, std::move(peers), std::move(pids),
                                           algo::NodeMap::fromKeys(nodeKeys), timeout, algos);
  {
    std::lock_guard<std::mutex> lock(engine->mu);
    state->start();
  }
  boot->allGather(std::string());  // every rank's abort-notice receive is posted
  SHARC_INFO("rank " << rank << " of " << size << ": provider " << provider
                     << (allLocal ? " (all ranks on this host)" : "")
                     << (engine->oversubscribed ? ", more local ranks than CPUs" : "")
                     << (singleCopy ? ", single-copy reads between ranks" : "") << ", timeout "
                     << timeout.count() << " ms");
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

using algo::CollKind;

Request Communicator::iallGather(const void* s, void* r, size_t count, DataType type) {
  return impl_->start(CollKind::AllGather, s, r, count, type, RedOp::Sum, 0);
}
Request Communicator::ireduceScatter(const void* s, void* r, size_t count, DataType type,
                                     RedOp op) {
  return impl_->start(CollKind::ReduceScatter, s, r, count, type, op, 0);
}
Request Communicator::iallReduce(const void* s, void* r, size_t count, DataType type, RedOp op) {
  return impl_->start(CollKind::AllReduce, s, r, count, type, op, 0);
}
Request Communicator::ibroadcast(const void* s, void* r, size_t count, DataType type, int root) {
  return impl_->start(CollKind::Broadcast, s, r, count, type, RedOp::Sum, root);
}
Request Communicator::ibarrier() {
  return impl_->start(CollKind::Barrier, nullptr, nullptr, 0, DataType::Uint8, RedOp::Sum, 0);
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

void Communicator::destroy() noexcept {
  if (impl_) impl_->destroy();
}

}  // namespace sharc
