// One NCCL request of the network plugin (a send, a grouped receive, or one of the plugin's
// own control messages) and the fixed pool each comm draws them from: NCCL may hold
// NCCL_NET_MAX_REQUESTS per comm; beyond the pool isend/irecv return a NULL request.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <sharc/error.hpp>
#include <string>
#include <vector>

#include "net_api.hpp"
#include "net_handle.hpp"
#include "transport/endpoint.hpp"

namespace sharc::nccl {

class NetRequest final : public transport::TransferOwner {
 public:
  enum class Use : uint8_t { Free, Send, Recv, Flush, Control, Ping };

  Use use = Use::Free;
  void* owner = nullptr;  ///< the comm that posted it; nullptr once it outlives its comm
  int n = 0;              ///< buffers (a grouped receive has several)
  int pending = 0;        ///< transfers still posted
  uint32_t peer = 0;      ///< the fabric peer it talks to
  std::array<transport::Transfer, kMaxGroupedRecvs> transfers{};
  std::array<bool, kMaxGroupedRecvs> posted{};
  std::array<size_t, kMaxGroupedRecvs> sizes{};  ///< bytes sent / received per buffer
  uint64_t matchedTag = 0;                       ///< the tag a receive matched
  uint32_t polls = 0;                            ///< test() calls that found it pending
  Result error = Result::Success;
  std::string message;
  /// Bytes of a control message, owned here so that it outlives a closed comm.
  alignas(8) std::array<char, kConnectRequestBytes> scratch{};

  void reset(Use u, void* comm, uint32_t toPeer);
  void onTransferDone(transport::Transfer& t, size_t bytes, uint64_t tag) override;
  void onTransferError(transport::Transfer& t, Result code, const std::string& msg) override;
  /// Asks the provider to cancel what is still posted (completions arrive later).
  void cancelPosted(transport::Endpoint& endpoint);
};

/// Requests of one comm; a request in flight when its comm closes moves to the device.
class RequestPool {
 public:
  explicit RequestPool(size_t capacity);
  /// nullptr when every request is in use.
  NetRequest* acquire(NetRequest::Use use, void* comm, uint32_t peer);
  void release(NetRequest* request);
  /// Cancels the requests still in flight and hands them over (for the device to keep
  /// until their completions arrive); the rest are freed with the pool.
  std::vector<std::unique_ptr<NetRequest>> takeInFlight(transport::Endpoint& endpoint);
  bool owns(const NetRequest* request) const;

 private:
  std::vector<std::unique_ptr<NetRequest>> slots_;
  std::vector<NetRequest*> free_;
};

}  // namespace sharc::nccl
