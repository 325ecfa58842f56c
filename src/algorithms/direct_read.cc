// One-host algorithms over cross-memory attach: each rank tells its peers where its buffer is
// (a 16-byte message: address and length), every rank then reads what it needs straight out
// of the peers' buffers, or writes into them (one copy, no bounce buffer, no chain of
// dependent steps), and a last zero-byte message per pair says when that is done, so no call
// returns while another rank still uses its buffers.
#include <cstring>
#include <vector>

#include "algorithms.hpp"
#include "patterns.hpp"
#include "transport/shared_buffers.hpp"

namespace sharc::algo {
namespace {

// A peer's buffer description as the words Schedule::remoteRead/remoteWrite read.
const uint64_t* words(const transport::RemoteBuffer& b) {
  return reinterpret_cast<const uint64_t*>(&b);
}

// Slots of the two handshakes; AllReduce runs a second pair for its gather phase.
constexpr uint32_t kAddressSlot = 0;
constexpr uint32_t kDoneSlot = 1;
constexpr uint32_t kGatherAddressSlot = 2;
constexpr uint32_t kGatherDoneSlot = 3;

// What each rank tells its peers: where its send buffer is and how long it is (readers
// check the length, so a rank called with another count is an error, not a stray read).
struct Addresses {
  // of[peer]: the peer's buffer, its length and, if it lies in memory from allocShared, the
  // allocation (of[n] is this rank's own, the message it sends).
  transport::RemoteBuffer* of;
  std::vector<Schedule::OpId> received;  // received[peer]: the receive that delivers it
  std::vector<Schedule::OpId> sends;     // this rank's announcements
};

// Posts the address exchange: this rank's send buffer address to every peer.
Addresses exchangeAddresses(Schedule& s, const void* send, size_t sendBytes,
                            uint32_t slot = kAddressSlot) {
  const auto& c = s.context();
  const int n = c.size, r = c.rank;
  Addresses a{reinterpret_cast<transport::RemoteBuffer*>(
                  s.hostScratch(sizeof(transport::RemoteBuffer) * static_cast<size_t>(n + 1))),
              std::vector<Schedule::OpId>(n),
              {}};
  a.of[n] = transport::RemoteBuffer{reinterpret_cast<uint64_t>(send), sendBytes};
  transport::describeShared(a.of[n]);
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    a.sends.push_back(s.send(to, slot, &a.of[n], sizeof(transport::RemoteBuffer)));
    a.received[from] = s.recv(from, slot, &a.of[from], sizeof(transport::RemoteBuffer));
  }
  return a;
}

// The owner waits for every reader; each reader says so after its last read from that owner.
void doneHandshake(Schedule& s, const std::vector<std::vector<Schedule::OpId>>& readsFrom,
                   uint32_t slot = kDoneSlot) {
  const auto& c = s.context();
  const int n = c.size, r = c.rank;
  for (int k = 1; k < n; ++k) {
    const int from = mod(r - k, n), to = mod(r + k, n);
    const Schedule::OpId done = s.send(from, slot, nullptr, 0);
    for (auto rd : readsFrom[from]) s.after(done, rd);
    s.recv(to, slot, nullptr, 0);
  }
}

// Reduces `count` elements into `out`: this rank's own (`own`) and every peer's, read from
// byte `at` of the peer's buffer (`length` bytes, announced in `addr`). Chunks small enough to
// stay in cache between the read and the reduction go through a few reused buffers, so the
// peer's data never goes out to memory on this side (docs/topology.md, "Single-copy
// transfers").
// Returns the operation that finishes each chunk; readsFrom[peer] gets the reads of peer.
std::vector<Schedule::OpId> reduceFromPeers(Schedule& s, const Addresses& addr, uint64_t length,
                                            size_t at, size_t count, const std::byte* own,
                                            std::byte* out, size_t chunkBytes,
                                            std::vector<std::vector<Schedule::OpId>>& readsFrom) {
  const auto& c = s.context();
  const int n = c.size, r = c.rank;
  const size_t elem = dataTypeSize(c.type);
  const size_t chunks = chunksFor(count * elem, std::min<size_t>(chunkBytes, 256 * 1024), 1);
  const size_t slotBytes = evenBlock(count, static_cast<int>(chunks), 0).count * elem;
  constexpr size_t kSlots = 4;
  std::byte* slots = s.scratch(slotBytes * kSlots + 1);
  std::vector<Schedule::OpId> finals(chunks), lastOfChunk(chunks);
  for (size_t ch = 0; ch < chunks; ++ch) {
    const Range p = evenBlock(count, static_cast<int>(chunks), static_cast<int>(ch));
    const size_t off = p.offset * elem, bytes = p.count * elem;
    std::byte* slot = slots + (ch % kSlots) * slotBytes;  // chunk 0 is the largest
    Schedule::OpId prev = 0;
    for (int k = 1; k < n; ++k) {
      const int from = mod(r - k, n);
      const Schedule::OpId rd =
          s.remoteRead(from, words(addr.of[from]), length, at + off, slot, bytes);
      s.after(rd, addr.received[from]);
      if (k > 1) s.after(rd, prev);  // the slot is reused: the previous reduction must be done
      if (k == 1 && ch >= kSlots) s.after(rd, lastOfChunk[ch - kSlots]);
      readsFrom[from].push_back(rd);
      // The first reduction starts from this rank's own data (in place: out is that data).
      const Schedule::OpId red = s.reduce(
          out + off, k == 1 ? static_cast<const void*>(own + off) : out + off, slot, p.count);
      s.after(red, rd);
      if (k > 1) s.after(red, prev);
      prev = red;
    }
    lastOfChunk[ch] = prev;
    finals[ch] = s.divide(out + off, p.count);
    s.after(finals[ch], prev);
  }
  return finals;
}

}  // namespace

void buildDirectWriteAllGather(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  // Each rank announces its receive buffer; every rank then writes its own block into all the
  // others' buffers and copies it into its own, chunk by chunk, so that each chunk of the send
  // buffer is read from memory once and then from cache. Measured with two processes on this
  // project's machines, writing then copying each 1 MiB chunk beat reading the peer's block
  // and copying one's own (receiver-driven) by 5-15 % from 512 KiB to 32 MiB blocks.
  const Addresses addr = exchangeAddresses(s, a.recv, block * n);
  const size_t chunks = chunksFor(block, a.chunkBytes, 1);
  const bool copyOwn = send != recv + r * block;
  std::vector<std::vector<Schedule::OpId>> writesTo(n);
  std::vector<Schedule::OpId> previous;  // the last operations of the previous chunk
  for (size_t ch = 0; ch < chunks; ++ch) {
    const Range p = evenBlock(block, static_cast<int>(chunks), static_cast<int>(ch));
    std::vector<Schedule::OpId> current;
    for (int k = 1; k < n; ++k) {
      const int to = mod(r + k, n);
      const Schedule::OpId wr = s.remoteWrite(to, words(addr.of[to]), block * n,
                                              r * block + p.offset, send + p.offset, p.count);
      s.after(wr, addr.received[to]);
      for (auto prev : previous) s.after(wr, prev);  // keep the chunk order: cache locality
      writesTo[to].push_back(wr);
      current.push_back(wr);
    }
    if (copyOwn) {
      const Schedule::OpId own = s.copy(recv + r * block + p.offset, send + p.offset, p.count);
      for (auto wr : current) s.after(own, wr);
      current = {own};
    }
    previous = std::move(current);
  }
  // "Written" notices: a rank's call completes once every peer has filled its block.
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    const Schedule::OpId written = s.send(to, kDoneSlot, nullptr, 0);
    for (auto wr : writesTo[to]) s.after(written, wr);
    s.recv(from, kDoneSlot, nullptr, 0);
  }
}

void buildDirectReadReduceScatter(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  const Addresses addr = exchangeAddresses(s, a.send, block * n);
  std::vector<std::vector<Schedule::OpId>> readsFrom(n);
  reduceFromPeers(s, addr, block * n, r * block, a.count, send + r * block, recv, a.chunkBytes,
                  readsFrom);
  doneHandshake(s, readsFrom);
}

void buildDirectReadAllReduce(Schedule& s, const CollArgs& a) {
  const auto [n, r, elem, block, send, recv] = Frame(s, a);
  const Range mine = evenBlock(a.count, n, r);

  // Phase 1, reduce-scatter: this rank reduces its block from every peer's send buffer.
  const Addresses sendAddr = exchangeAddresses(s, a.send, a.count * elem);
  std::vector<std::vector<Schedule::OpId>> readsFrom(n);
  const size_t at = mine.offset * elem;
  const std::vector<Schedule::OpId> finals = reduceFromPeers(
      s, sendAddr, a.count * elem, at, mine.count, send + at, recv + at, a.chunkBytes, readsFrom);
  doneHandshake(s, readsFrom);

  // Phase 2, all-gather: once its block is final, each rank announces its receive buffer and
  // the others read the block from there. A peer's announcement also means it has finished
  // reading this rank's send buffer, so in place the reads below cannot clobber its input.
  const Addresses recvAddr = exchangeAddresses(s, a.recv, a.count * elem, kGatherAddressSlot);
  for (auto announce : recvAddr.sends)
    for (auto f : finals) s.after(announce, f);
  std::vector<std::vector<Schedule::OpId>> gathersFrom(n);
  for (int k = 1; k < n; ++k) {
    const int from = mod(r - k, n);
    const Range theirs = evenBlock(a.count, n, from);
    const size_t gchunks = chunksFor(theirs.count * elem, a.chunkBytes, 1);
    for (size_t ch = 0; ch < gchunks; ++ch) {
      const Range p =
          evenBlock(theirs.count * elem, static_cast<int>(gchunks), static_cast<int>(ch));
      const size_t off = theirs.offset * elem + p.offset;
      const Schedule::OpId rd =
          s.remoteRead(from, words(recvAddr.of[from]), a.count * elem, off, recv + off, p.count);
      s.after(rd, recvAddr.received[from]);
      gathersFrom[from].push_back(rd);
    }
  }
  doneHandshake(s, gathersFrom, kGatherDoneSlot);
}

}  // namespace sharc::algo
