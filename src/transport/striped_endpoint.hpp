// Multi-rail: one fabric endpoint per NIC of a rank ("rail"), seen by the schedules as one
// endpoint. A message of at least kStripeMin bytes is cut into near-equal pieces of at least
// kStripePiece, one per rail up to the rail count (stripe_rule.hpp), sent and received in
// parallel; smaller ones, and receives from any peer, use rail 0.
// Both sides cut by length, so a receive posted for another length than was sent ends short
// or truncated, and the schedule reports the mismatched count as it does on one rail.
#pragma once

#include <deque>
#include <list>
#include <memory>
#include <vector>

#include "endpoint.hpp"
#include "stripe_rule.hpp"

namespace sharc::transport {

class StripedEndpoint final : public Endpoint, private TransferOwner {
 public:
  /// `rails` (at least one) are the endpoints of this rank's NICs, in the same order on
  /// every rank (SHARC_NICS or the host topology decides it).
  explicit StripedEndpoint(std::vector<std::unique_ptr<Endpoint>> rails);
  ~StripedEndpoint() override;

  std::string providerName() const override { return rails_[0]->providerName(); }
  /// Every rail's address, each prefixed by its length.
  std::string localAddress() const override;
  /// Throws sharc::Error when a peer has another number of rails.
  void setPeers(const std::vector<std::string>& addresses) override;
  size_t maxMessageSize() const override;
  /// The smallest rail's: a striped receive posts its pieces on every rail.
  size_t recvQueueSize() const override;
  PostStatus postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                      Transfer& t) override;
  PostStatus postRecv(uint32_t fromPeer, uint64_t tag, uint64_t ignore, void* buf, size_t len,
                      Transfer& t) override;
  void cancel(Transfer& t) override;
  size_t progress() override;
  std::string lastError() const override { return lastError_; }
  size_t rails() const { return rails_.size(); }
  /// Device memory: every rail must carry it; a registration is made on every rail.
  bool supportsHmem(std::string& why) const override;
  bool registerMemory(const MemoryRegistration& m, uint64_t& key) override;
  void releaseMemory(const void* buf, size_t len) override;

 private:
  // One striped message: a piece per rail, reported to the user once all have finished.
  struct Striped;
  // The transfer comes first: a completion's Transfer& is its Piece (see finishPiece).
  struct Piece {
    Transfer transfer;
    Striped* record = nullptr;
    size_t offset = 0, len = 0;
    bool posted = false, done = false;
    bool arrived = false;      // finished with its bytes
    bool cancelAsked = false;  // canceled at its rail, which has not answered yet
  };
  struct Striped {
    Transfer* user = nullptr;
    bool send = false;
    uint32_t peer = 0;
    uint64_t tag = 0, ignore = 0;
    std::byte* buf = nullptr;
    std::vector<Piece> pieces{};
    size_t open = 0;      // pieces not finished
    size_t received = 0;  // bytes, receives
    uint64_t matchedTag = 0;
    bool failed = false, canceled = false, reported = false;
    // The user canceled this receive; withdrawn once one of its pieces arrived anyway.
    bool userCanceled = false, withdrawn = false;
    Result code = Result::Success;
    std::string message{};
  };

  void onTransferDone(Transfer& t, size_t bytes, uint64_t tag) override;
  void onTransferError(Transfer& t, Result code, const std::string& message) override;
  PostStatus start(Striped& s, size_t len);
  // The rail-0 path of a message too small to stripe: keeps the rail's error message.
  PostStatus unstriped(PostStatus st);
  // Posts the pieces not posted yet; false if one must wait (Retry).
  bool postPieces(Striped& s);
  void finishPiece(Transfer& t, bool ok, size_t bytes, uint64_t tag, Result code,
                   const std::string& message);
  void cancelPieces(Striped& s);
  // A piece of a canceled receive arrived: the sender sent the whole message, so the cancel
  // is withdrawn and the pieces it stopped are posted again.
  void withdrawCancel(Striped& s);
  // Posts what the rails take now, queueing the rest for progress().
  void postOrQueue(Striped& s);
  // Tells the user once every piece has finished.
  void reportIfFinished(Striped& s);

  std::vector<std::unique_ptr<Endpoint>> rails_;
  std::list<Striped> striped_;        // stable addresses: pieces' transfers point into them
  std::deque<Striped*> waitingPost_;  // pieces a rail refused for now (Retry)
  std::string lastError_;
  size_t reportedRecords_ = 0;  // reported records not yet forgotten
};

}  // namespace sharc::transport
