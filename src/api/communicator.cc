// sharc::Communicator: creation through the root server or a launcher's environment, and the
// public methods, which forward to CommunicatorImpl (src/runtime).
#include <sharc/communicator.hpp>

#include "bootstrap/bootstrap.hpp"
#include "core/collective.hpp"
#include "core/config.hpp"
#include "runtime/communicator_impl.hpp"
#include "runtime/create_communicator.hpp"

namespace sharc {

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

CallPlan Communicator::plan(CollectiveKind kind, size_t count, DataType type) const {
  if (kind != CollectiveKind::AllGather && kind != CollectiveKind::ReduceScatter &&
      kind != CollectiveKind::AllReduce)
    throw Error(Result::InvalidArgument, "rank " + std::to_string(rank()) + ": plan: collective " +
                                             core::collectiveName(kind) +
                                             ": expected AllGather, ReduceScatter or AllReduce");
  const algo::Plan p = impl_->plan(kind, count, type);
  return {algo::algorithmName(p.algorithm), p.chunkBytes, p.predictedUs, p.breakdown,
          impl_->dataPath()};
}

}  // namespace sharc
