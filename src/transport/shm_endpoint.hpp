// The intra-node transport: tagged messages between the ranks of one node through a shared
// segment, one single-producer/single-consumer FIFO of fixed slots per ordered pair of ranks.
// A sender copies a message into the slots in fragments, the receiver copies them out; with
// FIFOs small enough to stay in cache, the data crosses memory once on each side (the
// pattern of NCCL's and Open MPI's shared-memory transports). Small messages are a few
// hundred nanoseconds from post to match: no system call, no provider stack.
//
// A GPU variant keeps this interface and replaces the slot copies (CUDA IPC buffers and copy
// kernels); the single-copy CPU path is the CMA operations of the schedules.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "endpoint.hpp"
#include "shm_segment.hpp"

namespace sharc::transport {

/// Sizes of the FIFOs of one node's segment.
struct ShmGeometry {
  uint32_t ranks = 0;      ///< ranks of the node
  uint32_t slots = 0;      ///< slots per FIFO
  uint32_t slotBytes = 0;  ///< payload bytes per slot (multiple of 64)

  /// 16 slots of 64 KiB per FIFO (1 MiB: stays in a core's L2), fewer and smaller (down to
  /// 4 of 1 KiB) when the node has so many ranks that the segment would exceed 512 MiB.
  static ShmGeometry forRanks(int ranks);
  size_t fifoBytes() const;
  size_t segmentBytes() const;
  /// Reserves the parts of `segment` local rank `me` reads (the FIFOs into it; the header
  /// too for rank 0), so that their pages sit on its NUMA node.
  void reserveInbound(ShmSegment& segment, int me) const;
};

class ShmEndpoint final : public Endpoint {
 public:
  /// `peerOfLocal[i]` is the endpoint peer id of the node's i-th rank, `pidOfLocal[i]` its
  /// process (watched: a peer that exits fails the transfers that involve it), `me` this
  /// rank's index. The segment must have been laid out for `geometry` (zero-filled).
  ShmEndpoint(ShmSegment segment, ShmGeometry geometry, int me, std::vector<uint32_t> peerOfLocal,
              std::vector<pid_t> pidOfLocal);
  ~ShmEndpoint() override;

  /// True if `peer` (an endpoint peer id) is on this node and reached through this endpoint.
  bool reaches(uint32_t peer) const {
    return peer < localOfPeer_.size() && localOfPeer_[peer] >= 0;
  }

  std::string providerName() const override { return "sharc-shm"; }
  std::string localAddress() const override { return {}; }
  void setPeers(const std::vector<std::string>&) override {}
  size_t maxMessageSize() const override { return SIZE_MAX; }
  PostStatus postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                      Transfer& t) override;
  PostStatus postRecv(uint32_t fromPeer, uint64_t tag, uint64_t ignore, void* buf, size_t len,
                      Transfer& t) override;
  void cancel(Transfer& t) override;
  size_t progress() override;
  std::string lastError() const override { return lastError_; }

 private:
  struct Fifo;  // shared layout, in the .cc
  struct Send {
    Transfer* t;
    uint64_t tag;
    const std::byte* buf;
    size_t len;
    size_t offset = 0;
  };
  struct Recv {
    Transfer* t;
    uint64_t tag, ignore;
    std::byte* buf;
    size_t len;
  };
  // A message that arrived before its receive was posted, held until one is.
  struct Unexpected {
    uint64_t tag;
    std::unique_ptr<std::byte[]> data;  // not zero-filled: every byte is written before use
    size_t size = 0;
    size_t received = 0;
    size_t capacity = 0;              // of `data`: grows with what arrives, up to `size`
    std::unique_ptr<Recv> claimedBy;  // a receive posted while the message was still arriving
  };
  // The message being read from one peer's FIFO.
  struct Incoming {
    bool active = false;
    uint64_t tag = 0;
    size_t total = 0, received = 0;
    std::byte* dst = nullptr;  // where the payload goes
    Transfer* recv = nullptr;  // the matched receive, or null
    Unexpected* unexpected = nullptr;
    bool discard = false;  // truncated or canceled: read and drop the rest
  };
  struct Peer {
    Fifo* out = nullptr;  // me -> peer
    Fifo* in = nullptr;   // peer -> me
    uint64_t tail = 0;    // next slot to write in `out`
    uint64_t head = 0;    // next slot to read in `in`
    std::deque<Send> sends;
    bool abandon = false;  // a half-written message was canceled: tell the reader
    std::list<Recv> recvs;
    std::list<Unexpected> unexpected;
    Incoming incoming;
    pid_t pid = 0;
    bool dead = false;
    std::string malformed;  // why the peer was dropped for what it wrote ("": it exited)
  };
  struct Completion {
    Transfer* t;
    bool ok;
    size_t bytes;
    uint64_t tag;
    Result code;
    std::string message;
  };

  bool writeSends(Peer& p, Transfer* inlineSend);
  size_t readFragments(int local);
  bool matches(const Recv& r, uint64_t tag) const { return ((r.tag ^ tag) & ~r.ignore) == 0; }
  void startIncoming(int local, uint64_t tag, size_t total);
  void deliverUnexpected(Unexpected& u, const Recv& r);
  void done(Transfer* t, size_t bytes, uint64_t tag);
  void failed(Transfer* t, Result code, std::string message);
  bool reserveUnexpected(Peer& p, size_t bytes);
  void checkPeers();
  void failPeer(int local, const std::string& why);
  void dropPeer(int local, const std::string& why);

  ShmSegment segment_;
  ShmGeometry geometry_;
  int me_;
  std::vector<int> localOfPeer_;  // endpoint peer id -> local index, -1 if not on this node
  std::vector<uint32_t> peerOfLocal_;
  std::vector<Peer> peers_;
  std::list<Recv> anyRecvs_;  // receives from any peer
  std::vector<Completion> completions_;
  std::chrono::steady_clock::time_point nextPeerCheck_;
  std::string lastError_;
  uint64_t messages_ = 0, unexpectedCount_ = 0;  // for the INFO line at destruction
  uint32_t polls_ = 0;
};

}  // namespace sharc::transport
