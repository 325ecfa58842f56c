// The comms NCCL holds: a listening comm (accepts connections), a sending comm and a
// receiving comm (one direction of one connection each). All state is guarded by the
// device's mutex; NCCL gets raw pointers to these objects back as its void* comms.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>

#include "net_device.hpp"
#include "net_request.hpp"

namespace sharc::nccl {

/// Every comm starts with its kind, so that a pointer NCCL hands back can be checked.
enum class CommKind : uint32_t { Listen = 0x4c534853, Send = 0x53534853, Recv = 0x52534853 };

struct CommBase {
  CommKind kind;
  NetDevice* device;
  uint64_t id;
};

class ListenComm : public CommBase {
 public:
  explicit ListenComm(NetDevice& device);
  ~ListenComm();
  /// Writes the handle for connect (NCCL_NET_HANDLE_MAXSIZE bytes).
  void writeHandle(void* handle) const;
  /// A receiving comm for the next connection that arrived, else nullptr.
  class RecvComm* accept();

 private:
  std::chrono::steady_clock::time_point firstAccept_{};
};

class SendComm : public CommBase {
 public:
  /// Starts connecting to the listener of `handle`: sends the request, awaits the reply.
  SendComm(NetDevice& device, const ListenHandle& handle);
  ~SendComm();
  /// True once the listener replied; throws when it cannot (timeout, dead listener).
  bool connected();
  /// Posts a send; nullptr when out of requests or the provider is busy (retry later).
  NetRequest* isend(const void* data, size_t size, int tag, const void* mhandle);

  RequestPool pool;
  uint32_t peer;

 private:
  uint64_t connectTag() const {
    return wire::controlTag(wire::Control::Connect, listener_.listenId);
  }
  ListenHandle listener_;
  NetRequest* acceptReceive_ = nullptr;
  uint64_t remoteId_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::unordered_map<int, uint16_t> sequence_;
};

class RecvComm : public CommBase {
 public:
  RecvComm(NetDevice& device, uint32_t peer);
  ~RecvComm();
  /// Posts a grouped receive; nullptr when out of requests or the provider is busy.
  NetRequest* irecv(int n, void** data, const size_t* sizes, const int* tags, void** mhandles);
  /// After a receive of `sizes` bytes into `data`: a read that makes them visible to the GPU
  /// where that takes one (NetDevice::flushNeeded), else nullptr (NCCL: nothing to wait for).
  NetRequest* iflush(int n, void** data, const int* sizes, void** mhandles);

  RequestPool pool;
  uint32_t peer;

 private:
  std::unordered_map<int, uint16_t> sequence_;
};

/// Requests per comm: NCCL keeps up to NCCL_NET_MAX_REQUESTS in flight; a few spare.
inline constexpr size_t kRequestsPerComm = 64;

/// Completion of an NCCL request: true when done (sizes filled, request freed); throws the
/// request's error (and frees it); checks the peer's liveness while it waits.
bool testRequest(NetRequest* request, int* sizes);

}  // namespace sharc::nccl
