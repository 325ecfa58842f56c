// NCCL's windowed CollNet AllGather and ReduceScatter over sharc's engine.
//
// Semantics (NCCL src/transport/coll_net.cc): a call moves one window of a virtual buffer of
// nranks * bytesPerRank bytes, [windowOffset, windowOffset + windowBytes). Rank q's block of
// that buffer is [q * bpr, (q + 1) * bpr); its share of the window is the intersection
// I_q = [max(wOff, q * bpr), min(wEnd, (q + 1) * bpr)), possibly empty. The window itself is
// held, in order, by the concatenation of the call's scatter/gather parts (their sizes add up
// to windowBytes); this rank's own piece is a plain pointer to its bytes of I_me (sendData
// for AllGather, recvData for ReduceScatter), i.e. at block offset max(wOff, me*bpr) - me*bpr.
//  * AllGather: every rank's I_q lands at window offset I_q.lo - wOff of the receive parts.
//  * ReduceScatter: recvData[0, |I_me|) = op over all ranks of their window bytes of I_me.
//
// Design. The whole buffer in one part (window [0, nranks*bpr), one SGE) is exactly the
// engine's AllGather (bytes as uint8, count bpr) / ReduceScatter (count bpr / element size),
// which get the tuned algorithms. Anything else runs as one point-to-point group (igroup):
//  * AllGather: this rank sends I_me to every other rank and receives every other I_q; a
//    receive lands directly in its part when I_q fits in one part, otherwise in a staging
//    buffer scattered into the parts on completion. I_me is copied locally at post time.
//  * ReduceScatter: this rank sends each other rank q its window bytes of I_q (staged into a
//    contiguous buffer when they span parts) and receives every other rank's bytes of I_me
//    into one slot per rank; on completion the slots are reduced in rank order with the
//    engine's kernels (core::reduce; Avg is a sum, then core::finishAverage by nranks).
// Ranks with an empty share send (AllGather) or receive (ReduceScatter) nothing; a call
// with nothing to move completes on its first test. Every rank computes every I_q from the
// same arguments, so the sends and receives of each pair match; they are matched in posting
// order per (peer, tag), like every CollNet call.
#include <algorithm>
#include <cstring>
#include <sharc/types.hpp>

#include "collnet_internal.hpp"
#include "core/reduce.hpp"

namespace sharc::nccl::collnet {
namespace {

// Point-to-point tags of the windowed forms (any value below PointToPoint::kMaxTags).
constexpr uint32_t kAllGatherTag = 0x1c01;
constexpr uint32_t kReduceScatterTag = 0x1c02;

struct Range {
  size_t lo = 0, hi = 0;
  size_t size() const { return hi - lo; }
  bool empty() const { return hi <= lo; }
};

// The checked geometry of a windowed call: every rank's share of the window.
struct Window {
  size_t bpr = 0, offset = 0, bytes = 0;
  std::vector<Range> shares;  // I_q, in virtual-buffer coordinates
  bool whole = false;         // the window is the whole virtual buffer

  // Window offset (position in the parts) of rank q's share.
  size_t at(int q) const { return shares[static_cast<size_t>(q)].lo - offset; }
  size_t share(int q) const { return shares[static_cast<size_t>(q)].size(); }
};

// The concatenation of a call's parts, addressed by window offset.
class Parts {
 public:
  Parts(const Sge* parts, int n) : parts_(parts, parts + n) {
    size_t start = 0;
    for (const Sge& p : parts_) {
      starts_.push_back(start);
      start += p.size;
    }
  }
  // The address of [off, off + len) when one part holds all of it, else nullptr.
  std::byte* contiguous(size_t off, size_t len) const {
    const size_t i = partAt(off);
    if (i == parts_.size() || off - starts_[i] + len > parts_[i].size) return nullptr;
    return static_cast<std::byte*>(parts_[i].address) + (off - starts_[i]);
  }
  // parts[off, off + len) = src (memmove semantics per part).
  void write(size_t off, const std::byte* src, size_t len) const {
    walk(off, len, [&](std::byte* p, size_t n, size_t done) { std::memmove(p, src + done, n); });
  }
  // dst = parts[off, off + len).
  void read(size_t off, std::byte* dst, size_t len) const {
    walk(off, len, [&](std::byte* p, size_t n, size_t done) { std::memmove(dst + done, p, n); });
  }

 private:
  size_t partAt(size_t off) const {  // first non-empty part that holds byte `off`
    for (size_t i = 0; i < parts_.size(); ++i)
      if (off >= starts_[i] && off - starts_[i] < parts_[i].size) return i;
    return parts_.size();
  }
  template <typename Fn>
  void walk(size_t off, size_t len, Fn&& fn) const {
    size_t done = 0;
    for (size_t i = partAt(off); done < len && i < parts_.size(); ++i) {
      const size_t skip = off + done - starts_[i];
      const size_t n = std::min(len - done, parts_[i].size - skip);
      if (n > 0) fn(static_cast<std::byte*>(parts_[i].address) + skip, n, done);
      done += n;
    }
  }
  std::vector<Sge> parts_;
  std::vector<size_t> starts_;
};

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

// Validates the window arguments shared by both calls and computes every rank's share.
Window makeWindow(CollComm& c, const char* call, const char* partsName, int nParts,
                  const Sge* parts, size_t bpr, size_t offset, size_t bytes) {
  const int n = c.nranks;
  if (nParts < 0 || (nParts > 0 && parts == nullptr))
    c.fail(Result::InvalidArgument, call,
           std::string(partsName) + ": " + std::to_string(nParts) + " parts at " +
               (parts == nullptr ? "null" : "a pointer") + " (expected >= 0 parts, non-null)");
  size_t total = 0;
  for (int i = 0; i < nParts; ++i) {
    if (parts[i].size > 0 && parts[i].address == nullptr)
      c.fail(Result::InvalidArgument, call,
             std::string(partsName) + "[" + std::to_string(i) + "] is null with size " +
                 std::to_string(parts[i].size));
    if (parts[i].size > SIZE_MAX - total)
      c.fail(Result::InvalidArgument, call, std::string(partsName) + " sizes overflow");
    total += parts[i].size;
  }
  if (total != bytes)
    c.fail(Result::InvalidArgument, call,
           std::string(partsName) + " hold " + std::to_string(total) +
               " bytes in all (expected windowBytes = " + std::to_string(bytes) + ")");
  if (bpr > SIZE_MAX / static_cast<size_t>(n))
    c.fail(Result::InvalidArgument, call,
           "bytesPerRank " + std::to_string(bpr) + " x " + std::to_string(n) + " ranks overflows");
  const size_t all = bpr * static_cast<size_t>(n);
  if (offset > all || bytes > all - offset)
    c.fail(Result::InvalidArgument, call,
           "window [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
               ") exceeds the buffer of nranks x bytesPerRank = " + std::to_string(all) + " bytes");
  Window w;
  w.bpr = bpr;
  w.offset = offset;
  w.bytes = bytes;
  w.whole = offset == 0 && bytes == all;
  for (int q = 0; q < n; ++q) {
    Range r{std::max(offset, static_cast<size_t>(q) * bpr),
            std::min(offset + bytes, static_cast<size_t>(q + 1) * bpr)};
    if (r.empty()) r = Range{};
    w.shares.push_back(r);
  }
  return w;
}

// Checks each part against its registration.
void checkParts(CollComm& c, const char* call, const char* partsName, int nParts,
                const Sge* parts) {
  for (int i = 0; i < nParts; ++i) {
    const std::string what = std::string(partsName) + "[" + std::to_string(i) + "]";
    c.checkRegion(parts[i].mhandle, parts[i].address, parts[i].size, call, what.c_str());
  }
}

std::unique_ptr<CollRequest> launch(CollComm& c, std::unique_ptr<CollRequest> req,
                                    const std::vector<PointToPoint>& ops) {
  if (!ops.empty()) req->engine = c.comm->igroup(ops);
  return req;
}

}  // namespace

std::unique_ptr<CollRequest> postAllGather(CollComm& c, void* sendData, int nRecvParts,
                                           const Sge* recvParts, size_t bytesPerRank,
                                           size_t windowOffset, size_t windowBytes,
                                           void* sendMhandle) {
  const char* call = "iallgather";
  const Window w = makeWindow(c, call, "recvParts", nRecvParts, recvParts, bytesPerRank,
                              windowOffset, windowBytes);
  const int me = c.rank, n = c.nranks;
  const size_t mine = w.share(me);
  if (mine > 0 && sendData == nullptr)
    c.fail(Result::InvalidArgument, call,
           "sendData is null but this rank's share of the window is " + std::to_string(mine) +
               " bytes");
  c.checkRegion(sendMhandle, sendData, mine, call, "sendData");
  checkParts(c, call, "recvParts", nRecvParts, recvParts);

  auto req = std::make_unique<CollRequest>();
  req->bytes = windowBytes;
  if (windowBytes == 0) return req;
  if (w.whole && nRecvParts == 1) {
    req->engine = c.comm->iallGather(sendData, recvParts[0].address, bytesPerRank, DataType::Uint8);
    return req;
  }

  const Parts parts(recvParts, nRecvParts);
  // This rank's own share: a local copy (nothing to do when it already sits in place).
  if (mine > 0 && parts.contiguous(w.at(me), mine) != sendData)
    parts.write(w.at(me), static_cast<const std::byte*>(sendData), mine);

  // Receives straight into one part, or staged: (staging offset, window offset, bytes).
  struct Staged {
    size_t scratch, window, bytes;
  };
  std::vector<Staged> staged;
  std::vector<PointToPoint> ops;
  std::vector<size_t> stagedOp;  // ops index of each staged receive
  size_t scratchBytes = 0;
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    if (mine > 0) ops.push_back({PointToPoint::Kind::Send, q, sendData, mine, kAllGatherTag});
    const size_t len = w.share(q);
    if (len == 0) continue;
    std::byte* direct = parts.contiguous(w.at(q), len);
    ops.push_back({PointToPoint::Kind::Recv, q, direct, len, kAllGatherTag});
    if (direct == nullptr) {
      staged.push_back({scratchBytes, w.at(q), len});
      stagedOp.push_back(ops.size() - 1);
      scratchBytes += len;
    }
  }
  req->scratch.resize(scratchBytes);
  for (size_t i = 0; i < staged.size(); ++i)
    ops[stagedOp[i]].buf = req->scratch.data() + staged[i].scratch;
  if (!staged.empty()) {
    CollRequest* r = req.get();
    req->finish = [r, parts, staged] {
      for (const Staged& s : staged) parts.write(s.window, r->scratch.data() + s.scratch, s.bytes);
    };
  }
  return launch(c, std::move(req), ops);
}

std::unique_ptr<CollRequest> postReduceScatter(CollComm& c, int nSendParts, const Sge* sendParts,
                                               void* recvData, size_t bytesPerRank,
                                               size_t windowOffset, size_t windowBytes,
                                               int dataType, int redOp, void* recvMhandle) {
  const char* call = "ireducescatter";
  const size_t elem = elementSize(dataType);
  if (elem == 0 || redOp < 0 || redOp >= kNumRedOps)
    c.fail(Result::InvalidArgument, call,
           "data type " + std::to_string(dataType) + " with op " + std::to_string(redOp) +
               " is not supported (reduceSupport says 0; expected types 0.." +
               std::to_string(kNumDataTypes - 1) + ", ops 0.." + std::to_string(kNumRedOps - 1) +
               ")");
  const auto type = static_cast<DataType>(dataType);
  const auto op = static_cast<RedOp>(redOp);
  if (bytesPerRank % elem != 0 || windowOffset % elem != 0 || windowBytes % elem != 0)
    c.fail(Result::InvalidArgument, call,
           "bytesPerRank " + std::to_string(bytesPerRank) + ", windowOffset " +
               std::to_string(windowOffset) + " and windowBytes " + std::to_string(windowBytes) +
               " must be multiples of the " + dataTypeName(type) + " element size " +
               std::to_string(elem));
  const Window w = makeWindow(c, call, "sendParts", nSendParts, sendParts, bytesPerRank,
                              windowOffset, windowBytes);
  const int me = c.rank, n = c.nranks;
  const size_t mine = w.share(me);
  if (mine > 0 && recvData == nullptr)
    c.fail(Result::InvalidArgument, call,
           "recvData is null but this rank's share of the window is " + std::to_string(mine) +
               " bytes");
  c.checkRegion(recvMhandle, recvData, mine, call, "recvData");
  checkParts(c, call, "sendParts", nSendParts, sendParts);

  auto req = std::make_unique<CollRequest>();
  req->bytes = mine;
  if (windowBytes == 0) return req;
  if (w.whole && nSendParts == 1) {
    req->engine =
        c.comm->ireduceScatter(sendParts[0].address, recvData, bytesPerRank / elem, type, op);
    return req;
  }

  const Parts parts(sendParts, nSendParts);
  // Scratch layout: [send staging of the peers' shares that span parts][one slot per rank
  // for my share: the peers' pieces, and mine when it must be copied].
  struct Out {
    int peer;
    std::byte* direct;  // nullptr: staged at `scratch`
    size_t scratch;
  };
  std::vector<Out> outs;
  size_t scratchBytes = 0;
  for (int q = 0; q < n; ++q) {
    const size_t len = w.share(q);
    if (q == me || len == 0) continue;
    std::byte* direct = parts.contiguous(w.at(q), len);
    outs.push_back({q, direct, scratchBytes});
    if (direct == nullptr) scratchBytes += len;
  }
  const size_t slotBase = scratchBytes;
  std::byte* own = nullptr;  // my own piece in place, when it can be read there
  if (mine > 0) {
    own = parts.contiguous(w.at(me), mine);
    if (own != nullptr && overlaps(own, mine, recvData, mine)) own = nullptr;
    scratchBytes += mine * static_cast<size_t>(n);
  }
  req->scratch.resize(scratchBytes);
  std::byte* const scratch = req->scratch.data();

  std::vector<PointToPoint> ops;
  for (const Out& o : outs) {
    const size_t len = w.share(o.peer);
    std::byte* buf = o.direct;
    if (buf == nullptr) {
      buf = scratch + o.scratch;
      parts.read(w.at(o.peer), buf, len);
    }
    ops.push_back({PointToPoint::Kind::Send, o.peer, buf, len, kReduceScatterTag});
  }
  if (mine > 0) {
    std::vector<const std::byte*> pieces(static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) {
      std::byte* slot = scratch + slotBase + mine * static_cast<size_t>(q);
      if (q == me) {
        if (own == nullptr) parts.read(w.at(me), slot, mine);
        pieces[static_cast<size_t>(q)] = own != nullptr ? own : slot;
      } else {
        ops.push_back({PointToPoint::Kind::Recv, q, slot, mine, kReduceScatterTag});
        pieces[static_cast<size_t>(q)] = slot;
      }
    }
    // The pieces never overlap recvData partially (mine was staged if it did; the others
    // are scratch), so the kernels may write recvData while reading them.
    const size_t count = mine / elem;
    req->finish = [recvData, pieces, count, mine, type, op, n] {
      if (n == 1) {
        std::memmove(recvData, pieces[0], mine);
      } else {
        core::reduce(recvData, pieces[0], pieces[1], count, type, op);
        for (int q = 2; q < n; ++q)
          core::reduce(recvData, recvData, pieces[static_cast<size_t>(q)], count, type, op);
      }
      if (op == RedOp::Avg) core::finishAverage(recvData, count, type, static_cast<uint64_t>(n));
    };
  }
  return launch(c, std::move(req), ops);
}

}  // namespace sharc::nccl::collnet
