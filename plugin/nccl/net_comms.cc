#include "net_comms.hpp"

#include <algorithm>
#include <thread>

#include "core/config.hpp"
#include "core/log.hpp"

namespace sharc::nccl {
namespace {

// Closing a comm waits this long for canceled transfers before leaving them to the device.
constexpr auto kCloseDrain = std::chrono::milliseconds(1000);
constexpr auto kNoWait = std::chrono::milliseconds(0);

void checkTag(int tag, const char* call) {
  if (tag < 0 || static_cast<uint64_t>(tag) > wire::kMaxUserTag)
    throw Error(Result::InvalidArgument, std::string(call) + ": tag " + std::to_string(tag) +
                                             " out of range, expected 0.." +
                                             std::to_string(wire::kMaxUserTag));
}

// Cancels the comm's in-flight requests and waits a moment for their completions; what is
// still posted after that is left to the device (the buffers stay NCCL's problem no longer).
// No close ever waits for a message from the peer: only for the local provider to finish
// with the comm's buffers, at most kCloseDrain. A send to a dead or stopped peer cannot be
// canceled: once a send comm's close waited in vain, later send comms towards that peer
// (NCCL's abort closes them all in turn) do not wait again. Receives always get the wait
// (their cancellation is prompt, and a late one would write into freed memory).
void retire(NetDevice& device, RequestPool& pool, uint32_t peer, bool sendComm) {
  std::vector<std::unique_ptr<NetRequest>> inFlight = pool.takeInFlight(device.endpoint());
  const bool skip = sendComm && device.unresponsive(peer);
  const auto deadline = std::chrono::steady_clock::now() + (skip ? kNoWait : kCloseDrain);
  auto drained = [&] {
    return std::all_of(inFlight.begin(), inFlight.end(),
                       [](const std::unique_ptr<NetRequest>& r) { return r->pending == 0; });
  };
  do {
    device.progress();
    std::this_thread::yield();
  } while (!drained() && std::chrono::steady_clock::now() < deadline);
  std::erase_if(inFlight, [](const std::unique_ptr<NetRequest>& r) { return r->pending == 0; });
  if (!inFlight.empty()) {
    if (sendComm) device.markUnresponsive(peer);
    SHARC_INFO("NCCL plugin: " << inFlight.size()
                               << " transfer(s) of a closed comm still in flight; kept until done");
    device.adopt(std::move(inFlight));
  }
}

}  // namespace

// ---- listen -----------------------------------------------------------------------------

ListenComm::ListenComm(NetDevice& d) : CommBase{CommKind::Listen, &d, d.newCommId()} {
  device->openListener(id);
}

ListenComm::~ListenComm() {
  kind = CommKind{};
  device->closeListener(id);  // later connects to this handle are refused
}

void ListenComm::writeHandle(void* handle) const {
  ListenHandle h;
  h.address = device->endpoint().localAddress();
  h.listenId = id;
  h.owner = localIdentity();
  encodeHandle(h, handle);
}

RecvComm* ListenComm::accept() {
  device->progress();
  const auto now = std::chrono::steady_clock::now();
  if (firstAccept_ == std::chrono::steady_clock::time_point{}) firstAccept_ = now;
  std::optional<ConnectRequest> request = device->takeConnect(id);
  if (!request) {
    if (now - firstAccept_ > core::Config::get().timeout)
      throw Error(Result::Timeout, "accept: no peer connected to listen comm " +
                                       std::to_string(id) + " within SHARC_TIMEOUT_MS (" +
                                       std::to_string(core::Config::get().timeout.count()) +
                                       " ms)");
    return nullptr;
  }
  const uint32_t peer = device->peer(request->address, request->sender);
  auto comm = std::make_unique<RecvComm>(*device, peer);
  device->sendControl(peer, wire::controlTag(wire::Control::Accept, request->sendCommId),
                      encodeAcceptReply(comm->id));
  SHARC_TRACE("accept: listen comm " << id << " -> recv comm " << comm->id << " from pid "
                                     << request->sender.pid);
  return comm.release();
}

// ---- send -------------------------------------------------------------------------------

SendComm::SendComm(NetDevice& d, const ListenHandle& handle)
    : CommBase{CommKind::Send, &d, d.newCommId()},
      pool(kRequestsPerComm),
      peer(d.peer(handle.address, handle.owner)),
      listener_(handle),
      deadline_(std::chrono::steady_clock::now() + core::Config::get().timeout) {
  NetRequest* r = pool.acquire(NetRequest::Use::Control, this, peer);
  r->n = 1;
  for (;;) {
    const transport::PostStatus st =
        device->endpoint().postRecv(peer, wire::controlTag(wire::Control::Accept, id), 0,
                                    r->scratch.data(), kAcceptReplyBytes, r->transfers[0]);
    if (st == transport::PostStatus::Posted) break;
    if (st == transport::PostStatus::Failed) {
      pool.release(r);
      throw Error(Result::SystemError,
                  "connect: posting the reply receive failed: " + device->endpoint().lastError());
    }
    device->progress();
  }
  r->pending = 1;
  r->posted[0] = true;
  acceptReceive_ = r;
  ConnectRequest request;
  request.address = device->endpoint().localAddress();
  request.sendCommId = id;
  request.sender = localIdentity();
  // Queued: it leaves once the provider has a connection to the listener (never blocks).
  device->sendControl(peer, connectTag(), encodeConnectRequest(request));
}

SendComm::~SendComm() {
  kind = CommKind{};
  retire(*device, pool, peer, true);
}

bool SendComm::connected() {
  if (remoteId_ != 0) return true;
  device->progress();
  NetRequest* r = acceptReceive_;
  if (r->pending == 0) {
    acceptReceive_ = nullptr;
    const Result error = r->error;
    const std::string message = r->message;
    const uint64_t remote =
        error == Result::Success ? decodeAcceptReply(r->scratch.data(), r->sizes[0]) : 0;
    pool.release(r);
    if (error != Result::Success)
      throw Error(Result::RemoteError, "connect: the listener's reply failed: " + message);
    if (remote == 0)
      throw Error(Result::RemoteError,
                  "connect: listen comm " + std::to_string(listener_.listenId) + " of pid " +
                      std::to_string(listener_.owner.pid) + " is closed (the handle is stale)");
    if (remote > wire::kMaxCommId)
      throw Error(Result::RemoteError, "connect: the listener replied with an invalid comm id");
    remoteId_ = remote;
    return true;
  }
  const std::string failure = device->controlFailure(connectTag());
  if (!failure.empty())
    throw Error(Result::RemoteError, "connect: the request to the listener (pid " +
                                         std::to_string(listener_.owner.pid) +
                                         ") failed: " + failure);
  std::string why;
  if (!device->peerAlive(peer, why))
    throw Error(Result::RemoteError, "connect: listener (pid " +
                                         std::to_string(listener_.owner.pid) + ") is gone: " + why);
  if (std::chrono::steady_clock::now() > deadline_)
    throw Error(Result::Timeout, "connect: listener (pid " + std::to_string(listener_.owner.pid) +
                                     ", listen comm " + std::to_string(listener_.listenId) +
                                     ") did not accept within SHARC_TIMEOUT_MS");
  return false;
}

NetRequest* SendComm::isend(const void* data, size_t size, int tag, const void* mhandle) {
  checkTag(tag, "isend");
  device->checkRegion(mhandle, data, size, "isend");
  std::string why;
  if (!device->peerAlive(peer, why)) throw Error(Result::RemoteError, "isend: " + why);
  NetRequest* r = pool.acquire(NetRequest::Use::Send, this, peer);
  if (r == nullptr) return nullptr;
  r->n = 1;
  uint16_t& seq = sequence_[tag];
  const transport::PostStatus st = device->endpoint().postSend(
      peer, wire::dataTag(remoteId_, static_cast<uint64_t>(tag), seq), data, size, r->transfers[0]);
  switch (st) {
    case transport::PostStatus::Posted:
      r->pending = 1;
      r->posted[0] = true;
      break;
    case transport::PostStatus::Completed: r->sizes[0] = size; break;
    case transport::PostStatus::Retry: pool.release(r); return nullptr;
    case transport::PostStatus::Failed:
      pool.release(r);
      throw Error(Result::SystemError, "isend: " + device->endpoint().lastError());
  }
  r->sizes[0] = size;  // a send reports its own size
  ++seq;
  return r;
}

// ---- receive ----------------------------------------------------------------------------

RecvComm::RecvComm(NetDevice& d, uint32_t p)
    : CommBase{CommKind::Recv, &d, d.newCommId()}, pool(kRequestsPerComm), peer(p) {}

RecvComm::~RecvComm() {
  kind = CommKind{};
  retire(*device, pool, peer, false);
}

NetRequest* RecvComm::irecv(int n, void** data, const size_t* sizes, const int* tags,
                            void** mhandles) {
  if (n < 1 || n > kMaxGroupedRecvs)
    throw Error(Result::InvalidArgument, "irecv: n = " + std::to_string(n) + ", expected 1.." +
                                             std::to_string(kMaxGroupedRecvs));
  for (int i = 0; i < n; ++i) {
    checkTag(tags[i], "irecv");
    device->checkRegion(mhandles != nullptr ? mhandles[i] : nullptr, data[i], sizes[i], "irecv");
  }
  std::string why;
  if (!device->peerAlive(peer, why)) throw Error(Result::RemoteError, "irecv: " + why);
  NetRequest* r = pool.acquire(NetRequest::Use::Recv, this, peer);
  if (r == nullptr) return nullptr;
  r->n = n;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int i = 0; i < n; ++i) {
    const auto idx = static_cast<size_t>(i);
    for (;;) {
      const uint16_t seq = sequence_[tags[i]];
      const transport::PostStatus st =
          device->endpoint().postRecv(peer, wire::dataTag(id, static_cast<uint64_t>(tags[i]), seq),
                                      0, data[i], sizes[i], r->transfers[idx]);
      if (st == transport::PostStatus::Posted) {
        ++sequence_[tags[i]];
        r->posted[idx] = true;
        ++r->pending;
        break;
      }
      if (st == transport::PostStatus::Retry && i == 0) {  // nothing posted yet: NCCL retries
        pool.release(r);
        return nullptr;
      }
      if (st == transport::PostStatus::Failed || std::chrono::steady_clock::now() > deadline) {
        // Part of the group is posted: fail the request once those are canceled.
        r->error = Result::SystemError;
        r->message = "irecv: posting receive " + std::to_string(i) + " of " + std::to_string(n) +
                     " failed: " + device->endpoint().lastError();
        r->cancelPosted(device->endpoint());
        return r;
      }
      device->progress();
    }
  }
  return r;
}

NetRequest* RecvComm::iflush(int n, void** data, const int* sizes, void** mhandles) {
  if (n < 0 || n > kMaxGroupedRecvs || (n > 0 && (data == nullptr || sizes == nullptr)))
    throw Error(Result::InvalidArgument, "iflush: n = " + std::to_string(n) + " (expected 0.." +
                                             std::to_string(kMaxGroupedRecvs) +
                                             ") or a NULL data / sizes array");
  // One read covers the group: it follows every write of the NIC before it. It reads the
  // last buffer that received bytes into memory that needs it.
  const MemoryRegion* target = nullptr;
  uintptr_t addr = 0;
  size_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    void* mh = mhandles != nullptr ? mhandles[i] : nullptr;
    const size_t size = sizes[i] > 0 ? static_cast<size_t>(sizes[i]) : 0;
    device->checkRegion(mh, data[i], size, "iflush");
    if (size > 0 && mh != nullptr && device->flushNeeded(*static_cast<const MemoryRegion*>(mh))) {
      target = static_cast<const MemoryRegion*>(mh);
      addr = reinterpret_cast<uintptr_t>(data[i]);
      bytes = size;
    }
  }
  if (target == nullptr) return nullptr;  // host memory, or a provider that copies
  NetRequest* r = pool.acquire(NetRequest::Use::Flush, this, device->selfPeer());
  if (r == nullptr)  // NCCL holds fewer requests than a comm has; a NULL one would mean "done"
    throw Error(Result::InternalError, "iflush: all " + std::to_string(kRequestsPerComm) +
                                           " requests of the comm are in use");
  r->n = 1;
  try {
    device->postFlushRead(*target, addr, bytes, r->transfers[0]);
  } catch (...) {
    pool.release(r);
    throw;
  }
  r->pending = 1;
  r->posted[0] = true;
  return r;
}

// ---- test -------------------------------------------------------------------------------

bool testRequest(NetRequest* r, int* sizes) {
  auto* comm = static_cast<CommBase*>(r->owner);
  if (comm == nullptr || (comm->kind != CommKind::Send && comm->kind != CommKind::Recv) ||
      (r->use != NetRequest::Use::Send && r->use != NetRequest::Use::Recv &&
       r->use != NetRequest::Use::Flush))
    throw Error(Result::InvalidArgument, "test: not a live request of this plugin");
  const char* what = r->use == NetRequest::Use::Send   ? "send"
                     : r->use == NetRequest::Use::Recv ? "receive"
                                                       : "flush";
  NetDevice& d = *comm->device;
  RequestPool& pool = comm->kind == CommKind::Send ? static_cast<SendComm*>(comm)->pool
                                                   : static_cast<RecvComm*>(comm)->pool;
  const uint32_t peer = r->peer;  // the comm's peer; this process's own for a flush
  if (r->pending > 0) d.progress();
  if (r->pending > 0) {
    // The liveness check reads the clock: every 16th poll of a request is often enough.
    if (r->error == Result::Success && (++r->polls & 15) != 1) return false;
    std::string why;
    if (d.peerAlive(peer, why) && r->error == Result::Success) return false;
    // The peer is gone (or part of a group failed to post): fail now, drain in the background.
    if (r->error == Result::Success) {
      r->error = Result::RemoteError;
      r->message = why;
    }
    const std::string message = std::string(what) + " failed: " + r->message;
    const Result code = r->error;
    r->cancelPosted(d.endpoint());
    // The pool keeps the request until its transfers drain; it is no longer NCCL's.
    r->use = NetRequest::Use::Control;
    throw Error(code, message);
  }
  const Result code = r->error;
  const std::string message = r->message;
  if (code == Result::Success && sizes != nullptr)
    for (int i = 0; i < r->n; ++i) sizes[i] = static_cast<int>(r->sizes[static_cast<size_t>(i)]);
  pool.release(r);
  if (code != Result::Success) throw Error(code, std::string(what) + " failed: " + message);
  return true;
}

}  // namespace sharc::nccl
