// The shared-memory transport (transport/shm_endpoint.cc) reading what a peer process writes
// into the segment: slot headers and payloads of the FIFO into this rank, that FIFO's tail
// and the head of the FIFO out of it. One real ShmEndpoint (local rank 0 of 2) on a real
// segment; the fuzzer plays local rank 1 and drives this rank's posts, cancels and progress.
// Input: a sequence of operations (first byte of each: which one), see LLVMFuzzerTestOneInput.
// Properties: no memory error (receive buffers are exactly the posted size), no transfer
// completes twice or after it was reported complete at post, no receive reports more bytes
// than it posted, and progress always returns (a peer's garbage fails that peer).
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <sharc/error.hpp>
#include <vector>

#include "fuzz_common.hpp"
#include "transport/shm_endpoint.hpp"
#include "transport/shm_segment.hpp"

namespace {

using namespace sharc::transport;
using sharc::fuzz::broken;

// The segment layout, as shm_endpoint.cc writes it (checked against ShmGeometry below).
constexpr size_t kSegmentHeader = 4096;
constexpr size_t kFifoHeader = 128;
struct Slot {
  uint64_t tag;
  uint64_t total;
  uint32_t bytes;
  uint32_t flags;
  unsigned char pad[40];
};
static_assert(sizeof(Slot) == 64);
constexpr uint32_t kFirst = 1;
constexpr uint64_t kTags[] = {0x11, 0x12, 0x1000000000000013ull, 0};

const ShmGeometry kGeometry{2, sharc::fuzz::kShmSlots, sharc::fuzz::kShmSlotBytes};

struct Owner : TransferOwner {
  std::map<const Transfer*, int> completions;
  std::map<const Transfer*, size_t> posted;  // receives: posted length
  void onTransferDone(Transfer& t, size_t bytes, uint64_t) override {
    if (++completions[&t] > 1) broken("a transfer completed twice");
    const auto it = posted.find(&t);
    if (it != posted.end() && bytes > it->second) broken("a receive reports more than it posted");
  }
  void onTransferError(Transfer& t, sharc::Result, const std::string& message) override {
    if (++completions[&t] > 1) broken("a transfer completed twice");
    if (message.empty()) broken("an error without a message");
  }
};

// Reads the input front to back; zeros once it is used up.
struct Input {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint64_t take(size_t bytes) {
    uint64_t v = 0;
    for (size_t i = 0; i < bytes && n > 0; ++i, ++p, --n) v |= uint64_t{*p} << (8 * i);
    return v;
  }
};

std::atomic<uint64_t>& counter(std::byte* fifo, size_t offset) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(fifo + offset);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("SHARC_DEBUG", "NONE", 1);  // a failed peer is logged: not once per execution
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ShmSegment created = ShmSegment::create(kGeometry.segmentBytes());
  if (kGeometry.fifoBytes() != kFifoHeader + kGeometry.slots * (sizeof(Slot) + kGeometry.slotBytes))
    broken("the FIFO layout changed: update fuzz_shm_fifo.cc");
  auto* seg = static_cast<std::byte*>(created.data());
  std::memset(seg, 0, created.size());
  std::byte* in = seg + kSegmentHeader + 2 * kGeometry.fifoBytes();   // 1 -> 0
  std::byte* out = seg + kSegmentHeader + 1 * kGeometry.fifoBytes();  // 0 -> 1
  auto slot = [&](uint64_t seq) {
    return reinterpret_cast<Slot*>(in + kFifoHeader +
                                   (seq % kGeometry.slots) * (sizeof(Slot) + kGeometry.slotBytes));
  };

  // Declared before the endpoint: transfers and buffers outlive it.
  Owner owner;
  std::deque<Transfer> transfers;
  std::vector<std::unique_ptr<std::byte[]>> buffers;
  std::vector<Transfer*> completedAtPost;
  static std::byte sendData[1024];
  uint64_t peerTail = 0;
  std::deque<Slot> queued;  // well-formed fragments the peer writes when there is room
  std::vector<std::vector<std::byte>> queuedPayload;

  ShmEndpoint ep(ShmSegment::open(created.name(), created.size()), kGeometry, 0, {0, 1},
                 {getpid(), getpid()});
  auto pump = [&] {
    const uint64_t head = counter(in, 64).load();
    while (!queued.empty() && peerTail - head < kGeometry.slots) {
      Slot* s = slot(peerTail);
      *s = queued.front();
      if (!queuedPayload.front().empty())
        std::memcpy(s + 1, queuedPayload.front().data(), queuedPayload.front().size());
      queued.pop_front();
      queuedPayload.erase(queuedPayload.begin());
      counter(in, 0).store(++peerTail);
    }
    counter(out, 64).store(counter(out, 0).load());  // the peer reads what we sent at once
  };

  Input input{data, size};
  for (int ops = 0; !input.empty() && ops < 64; ++ops) {
    switch (input.take(1) % 8) {
      case 0: {  // the peer writes one raw slot and publishes it
        Slot s{};
        const uint8_t sel = static_cast<uint8_t>(input.take(1));
        s.tag = sel & 0x80 ? input.take(8) : kTags[sel & 3];
        s.total = sel & 0x40 ? input.take(8) : input.take(2);
        s.bytes = sel & 0x20 ? static_cast<uint32_t>(input.take(4))
                             : static_cast<uint32_t>(input.take(1));
        s.flags = static_cast<uint32_t>(input.take(1));
        Slot* dst = slot(peerTail);
        *dst = s;
        std::memset(dst + 1, 0x5a, kGeometry.slotBytes);
        counter(in, 0).store(++peerTail);
        break;
      }
      case 1: {  // the peer queues a well-formed message
        const uint8_t sel = static_cast<uint8_t>(input.take(1));
        const size_t len = input.take(1) + (sel & 0x80 ? 256 : 0);
        size_t off = 0;
        do {
          const size_t part = std::min<size_t>(len - off, kGeometry.slotBytes);
          queued.push_back(
              Slot{kTags[sel & 3], len, static_cast<uint32_t>(part), off == 0 ? kFirst : 0u, {}});
          queuedPayload.emplace_back(part, static_cast<std::byte>(off));
          off += part;
        } while (off < len);
        break;
      }
      case 2: {  // the peer writes a tail of its own choosing
        const uint8_t sel = static_cast<uint8_t>(input.take(1));
        peerTail = sel & 0x80 ? input.take(8) : peerTail + (sel & 7);
        counter(in, 0).store(peerTail);
        break;
      }
      case 3:  // the peer writes the head of the FIFO it reads
        counter(out, 64).store(input.take(1) & 1 ? input.take(8) : counter(out, 0).load() + 1);
        break;
      case 4: {  // this rank posts a receive
        const uint8_t sel = static_cast<uint8_t>(input.take(1));
        const size_t len = input.take(1) + (sel & 0x80 ? 256 : 0);
        buffers.push_back(std::make_unique<std::byte[]>(len));
        Transfer& t = transfers.emplace_back(Transfer{{}, &owner, 0});
        owner.posted[&t] = len;
        const uint32_t from = sel & 0x40 ? kAnyPeer : 1;
        ep.postRecv(from, kTags[sel & 3], sel & 0x20 ? 0xff : 0, buffers.back().get(), len, t);
        break;
      }
      case 5: {  // this rank posts a send
        const uint8_t sel = static_cast<uint8_t>(input.take(1));
        const size_t len = std::min<size_t>(input.take(2), sizeof sendData);
        Transfer& t = transfers.emplace_back(Transfer{{}, &owner, 0});
        const uint32_t to = sel & 0x40 ? sel & 3 : 1;  // sometimes a peer that is not there
        if (ep.postSend(to, kTags[sel & 3], sendData, len, t) == PostStatus::Completed)
          completedAtPost.push_back(&t);
        break;
      }
      case 6:
        pump();
        ep.progress();
        break;
      case 7:
        if (!transfers.empty()) ep.cancel(transfers[input.take(1) % transfers.size()]);
        break;
    }
  }
  for (int i = 0; i < 4; ++i) {
    pump();
    ep.progress();
  }
  for (Transfer* t : completedAtPost)
    if (owner.completions.count(t) != 0) broken("a send reported complete at post completed again");
  return 0;
}
