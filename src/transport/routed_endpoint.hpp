// One endpoint over two transports: the ranks of this node through shared memory, the rest
// through the fabric. Schedules see a single Endpoint and never know which carries a message.
#pragma once

#include <list>
#include <memory>

#include "endpoint.hpp"
#include "shm_endpoint.hpp"

namespace sharc::transport {

class RoutedEndpoint final : public Endpoint, private TransferOwner {
 public:
  /// `peers`: how many peers the (already resolved) fabric endpoint has. When every one of
  /// them is on this node, the fabric carries nothing but cancellations and is polled only
  /// now and then (a poll of tcp is a system call).
  RoutedEndpoint(std::unique_ptr<Endpoint> fabric, std::unique_ptr<ShmEndpoint> local,
                 size_t peers);
  ~RoutedEndpoint() override;

  /// The fabric provider's name (the shared-memory transport is reported separately).
  std::string providerName() const override { return fabric_->providerName(); }
  std::string localAddress() const override { return fabric_->localAddress(); }
  void setPeers(const std::vector<std::string>& addresses) override {
    fabric_->setPeers(addresses);
  }
  size_t maxMessageSize() const override { return fabric_->maxMessageSize(); }
  // Receives from this host's peers wait in the shared-memory transport, which holds any
  // number; the rest are the fabric's.
  size_t recvQueueSize() const override { return fabric_->recvQueueSize(); }
  PostStatus postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                      Transfer& t) override;
  /// Device memory goes over the fabric only (the shared-memory transport copies with the
  /// CPU): registrations are the fabric's, and this node's peers are reached without FI_HMEM.
  bool supportsHmem(std::string& why) const override { return fabric_->supportsHmem(why); }
  bool hmemTo(uint32_t peer, std::string& why) const override {
    if (!local_->reaches(peer)) return fabric_->hmemTo(peer, why);
    why = "sharc's shared-memory transport copies with the CPU";
    return false;
  }
  bool registerMemory(const MemoryRegistration& m, uint64_t& key) override {
    const bool ok = fabric_->registerMemory(m, key);
    if (!ok) lastError_ = fabric_->lastError();
    return ok;
  }
  void releaseMemory(const void* buf, size_t len) override { fabric_->releaseMemory(buf, len); }
  /// A receive from any peer is posted on both transports; the first match completes it and
  /// cancels the other.
  PostStatus postRecv(uint32_t fromPeer, uint64_t tag, uint64_t ignore, void* buf, size_t len,
                      Transfer& t) override;
  void cancel(Transfer& t) override;
  size_t progress() override;
  std::string lastError() const override;

 private:
  // A receive from any peer: one half on each transport, both owned here; the first to
  // complete is reported to the user's transfer, the other is canceled.
  struct Wildcard {
    Transfer fabricHalf, localHalf;
    Transfer* user = nullptr;
    bool reported = false;
    bool fabricOpen = true, localOpen = true;
  };
  void onTransferDone(Transfer& t, size_t bytes, uint64_t tag) override;
  void onTransferError(Transfer& t, Result code, const std::string& message) override;
  void finishHalf(Transfer& half, bool ok, size_t bytes, uint64_t tag, Result code,
                  const std::string& message);

  std::unique_ptr<Endpoint> fabric_;
  std::unique_ptr<ShmEndpoint> local_;
  std::list<Wildcard> wildcards_;
  bool allLocal_ = false;
  uint32_t sinceFabricPoll_ = 0;
  std::string lastError_;
};

}  // namespace sharc::transport
