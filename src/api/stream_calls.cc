// The stream-ordered collectives of sharc::Communicator: forwarding to CommunicatorImpl
// (runtime/communicator_impl_stream.cc).
#include <sharc/communicator.hpp>

#include "runtime/communicator_impl.hpp"

namespace sharc {

void Communicator::allGather(const void* s, void* r, size_t count, DataType type,
                             CudaStream stream) {
  impl_->startStream(CollectiveKind::AllGather, s, r, count, type, RedOp::Sum, 0, stream);
}
void Communicator::reduceScatter(const void* s, void* r, size_t count, DataType type, RedOp op,
                                 CudaStream stream) {
  impl_->startStream(CollectiveKind::ReduceScatter, s, r, count, type, op, 0, stream);
}
void Communicator::allReduce(const void* s, void* r, size_t count, DataType type, RedOp op,
                             CudaStream stream) {
  impl_->startStream(CollectiveKind::AllReduce, s, r, count, type, op, 0, stream);
}
void Communicator::broadcast(const void* s, void* r, size_t count, DataType type, int root,
                             CudaStream stream) {
  impl_->startStream(CollectiveKind::Broadcast, s, r, count, type, RedOp::Sum, root, stream);
}
Result Communicator::asyncError(std::string* message) const {
  return impl_->streamAsyncError(message);
}
void Communicator::synchronizeStreamCalls(std::chrono::milliseconds timeout) {
  impl_->synchronizeStreamCalls(timeout);
}

}  // namespace sharc
