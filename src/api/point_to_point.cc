// The public point-to-point calls, members-only sub-communicators and creation through a
// caller's exchange: forwarding to CommunicatorImpl (runtime/communicator_impl_groups.cc).
#include <sharc/communicator.hpp>

#include "bootstrap/exchange_bootstrap.hpp"
#include "runtime/communicator_impl.hpp"
#include "runtime/create_communicator.hpp"

namespace sharc {

std::shared_ptr<Communicator> Communicator::createFromExchange(int rank, int nranks,
                                                               const ExchangeFn& exchange,
                                                               const CommOptions& options) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    throw Error(Result::InvalidArgument, "rank " + std::to_string(rank) +
                                             ": init: rank must be in [0, nranks) and nranks "
                                             ">= 1 (got nranks " +
                                             std::to_string(nranks) + ")");
  if (!exchange)
    throw Error(Result::InvalidArgument,
                "rank " + std::to_string(rank) + ": init: empty exchange function");
  return detail::createCommunicator(bootstrap::exchangeBootstrap(rank, nranks, exchange), options);
}

std::shared_ptr<Communicator> Communicator::subgroup(const std::vector<int>& members,
                                                     const ExchangeFn& exchange,
                                                     std::chrono::milliseconds timeout) {
  return impl_->subgroup(members, exchange, timeout);
}

std::shared_ptr<Communicator> Communicator::shrink(const std::vector<int>& excluded,
                                                   std::chrono::milliseconds timeout,
                                                   bool abortFirst) {
  return impl_->shrink(excluded, timeout, abortFirst);
}

Request Communicator::igroup(const std::vector<PointToPoint>& ops) {
  return impl_->startGroup(ops);
}

Request Communicator::isend(const void* buf, size_t bytes, int peer, uint32_t tag) {
  return impl_->startGroup({{PointToPoint::Kind::Send, peer, const_cast<void*>(buf), bytes, tag}});
}

Request Communicator::irecv(void* buf, size_t bytes, int peer, uint32_t tag) {
  return impl_->startGroup({{PointToPoint::Kind::Recv, peer, buf, bytes, tag}});
}

Request Communicator::irecvAny(void* buf, size_t bytes, uint32_t tag) {
  return impl_->startRecvAny(buf, bytes, tag);
}

}  // namespace sharc
