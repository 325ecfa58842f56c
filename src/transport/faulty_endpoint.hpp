// An Endpoint decorator that injects the faults of SHARC_FAULT (core::FaultPlan) on one rank:
// delayed sends, a completion reported as failed, a dropped endpoint, and the kill or stop of
// the process after a given number of a collective's transfers. createCommunicator wraps the
// endpoint in it only when SHARC_FAULT names the rank, so a job without faults never sees it.
#pragma once

#include <chrono>
#include <memory>
#include <unordered_map>

#include "core/fault_plan.hpp"
#include "endpoint.hpp"

namespace sharc::transport {

class FaultyEndpoint final : public Endpoint, private TransferOwner {
 public:
  /// `plan` must outlive the endpoint (FaultPlan::active() lives until the process exits).
  FaultyEndpoint(std::unique_ptr<Endpoint> inner, core::FaultPlan& plan, int worldRank);
  ~FaultyEndpoint() override;

  std::string providerName() const override { return inner_->providerName(); }
  std::string localAddress() const override { return inner_->localAddress(); }
  void setPeers(const std::vector<std::string>& addresses) override { inner_->setPeers(addresses); }
  size_t maxMessageSize() const override { return inner_->maxMessageSize(); }
  /// Waits (answers Retry) while a delay rule holds the send back; fails once dropped.
  PostStatus postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                      Transfer& t) override;
  PostStatus postRecv(uint32_t fromPeer, uint64_t tag, uint64_t ignore, void* buf, size_t len,
                      Transfer& t) override;
  void cancel(Transfer& t) override;
  size_t progress() override { return inner_->progress(); }
  std::string lastError() const override { return lastError_; }

  uint32_t addPeer(const std::string& address) override { return inner_->addPeer(address); }
  std::string domainName() const override { return inner_->domainName(); }
  size_t injectSize() const override { return inner_->injectSize(); }
  size_t recvQueueSize() const override { return inner_->recvQueueSize(); }
  bool prepareRegion(const void* buf, size_t len) override {
    return inner_->prepareRegion(buf, len);
  }
  void releaseRegion(const void* buf, size_t len) override { inner_->releaseRegion(buf, len); }
  bool supportsHmem(std::string& why) const override { return inner_->supportsHmem(why); }
  bool hmemTo(uint32_t peer, std::string& why) const override { return inner_->hmemTo(peer, why); }
  bool supportsDmabuf() const override { return inner_->supportsDmabuf(); }
  bool supportsRead() const override { return inner_->supportsRead(); }
  bool registerMemory(const MemoryRegistration& m, uint64_t& key) override;
  void releaseMemory(const void* buf, size_t len) override { inner_->releaseMemory(buf, len); }
  PostStatus postRead(uint32_t peer, void* buf, size_t len, uint64_t remoteAddr,
                      uint64_t remoteBase, uint64_t remoteKey, Transfer& t) override;

 private:
  // The transfer posted to the inner endpoint in place of the user's, so that its completion
  // passes through here first.
  struct Shadow : Transfer {
    Transfer* user = nullptr;
    uint64_t tag = 0;
    bool counted = false;  // a collective's message: counts for `after`, may be failed
  };
  // A send held back by a delay rule, by the user's transfer.
  struct Held {
    uint64_t tag;
    std::chrono::steady_clock::time_point since;
  };
  template <typename Post>
  PostStatus postShadowed(Transfer& t, uint64_t tag, bool counted, Post&& post);
  bool dropped();
  void onTransferDone(Transfer& t, size_t bytes, uint64_t tag) override;
  void onTransferError(Transfer& t, Result code, const std::string& message) override;

  std::unique_ptr<Endpoint> inner_;
  core::FaultPlan& plan_;
  const int rank_;
  std::unordered_map<Transfer*, std::unique_ptr<Shadow>> shadows_;  // by the user's transfer
  std::unordered_map<Transfer*, Held> held_;
  std::string lastError_;
  std::string dropReason_;  // set once a drop rule fired on this rank
};

}  // namespace sharc::transport
