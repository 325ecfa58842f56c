// What another process of the node writes and this rank reads (FIFO slots and counters in the
// shared-memory segment, the shared-buffer descriptions of address messages) is checked
// before it steers a copy. Each case is an input the fuzzers found (tests/fuzz: fuzz_shm_fifo,
// fuzz_shared_buffers) or a neighbour of one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <sharc/error.hpp>
#include <string>
#include <vector>

#include "transport/shared_buffers.hpp"
#include "transport/shm_endpoint.hpp"
#include "transport/shm_segment.hpp"

namespace sharc::transport {
namespace {

struct Recorder : TransferOwner {
  std::vector<std::string> errors;
  int done = 0;
  void onTransferDone(Transfer&, size_t, uint64_t) override { ++done; }
  void onTransferError(Transfer&, Result, const std::string& message) override {
    errors.push_back(message);
  }
};

// Local rank 0's endpoint (peer ids 10, 11), and the FIFO local rank 1 writes into it, laid
// out as shm_endpoint.cc does: a 4096-byte segment header, FIFOs of a 128-byte header (tail,
// then head at 64) and slots of a 64-byte header {tag, total, bytes, flags} and the payload.
struct RawPeer {
  ShmGeometry g = ShmGeometry::forRanks(2);
  ShmSegment created = ShmSegment::create(g.segmentBytes());
  ShmEndpoint a{
      ShmSegment::open(created.name(), g.segmentBytes()), g, 0, {10, 11}, {getpid(), getpid()}};
  std::byte* fifo = static_cast<std::byte*>(created.data()) + 4096 + 2 * g.fifoBytes();
  uint64_t tail = 0;
  Recorder owner;

  void publish(uint64_t t) { reinterpret_cast<std::atomic<uint64_t>*>(fifo)->store(t); }
  void slot(uint64_t tag, uint64_t total, uint32_t bytes, uint32_t flags) {
    std::byte* s = fifo + 128 + (tail % g.slots) * (64 + g.slotBytes);
    std::memcpy(s, &tag, 8);
    std::memcpy(s + 8, &total, 8);
    std::memcpy(s + 16, &bytes, 4);
    std::memcpy(s + 20, &flags, 4);
    publish(++tail);
  }
};
constexpr uint32_t kFirst = 1;

struct Case {
  const char* what;
  void (*write)(RawPeer&);
};

TEST(ShmPeerInput, MalformedSlotsFailThePeerInsteadOfSteeringCopies) {
  const Case cases[] = {
      // fuzz_shm_fifo's first crash: a fragment with no message begun wrote through null.
      {"a fragment outside any message", [](RawPeer& p) { p.slot(7, 0, 1, 0); }},
      {"a fragment larger than a slot",
       [](RawPeer& p) { p.slot(7, uint64_t{1} << 30, p.g.slotBytes + 1, kFirst); }},
      {"a fragment larger than its message", [](RawPeer& p) { p.slot(7, 10, 64, kFirst); }},
      {"a fragment beyond the end of its message",
       [](RawPeer& p) {
         p.slot(7, 100, 64, kFirst);
         p.slot(7, 100, 64, 0);
       }},
      {"a new message before the last one ended",
       [](RawPeer& p) {
         p.slot(7, 100, 64, kFirst);
         p.slot(7, 100, 64, kFirst);
       }},
      {"slots published in a ring of", [](RawPeer& p) { p.publish(p.g.slots + 1); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    RawPeer p;
    std::vector<std::byte> buf(256);
    Transfer r{{}, &p.owner, 0};
    ASSERT_EQ(p.a.postRecv(11, 7, 0, buf.data(), buf.size(), r), PostStatus::Posted);
    c.write(p);
    p.a.progress();
    ASSERT_EQ(p.owner.errors.size(), 1u);
    EXPECT_NE(p.owner.errors[0].find("peer 11 wrote a malformed"), std::string::npos)
        << p.owner.errors[0];
    EXPECT_NE(p.owner.errors[0].find(c.what), std::string::npos) << p.owner.errors[0];
    // The peer is not read from again, and later posts to it fail saying why.
    Transfer s{{}, &p.owner, 1};
    EXPECT_EQ(p.a.postSend(11, 7, buf.data(), 1, s), PostStatus::Failed);
    EXPECT_NE(p.a.lastError().find("peer 11 wrote a malformed"), std::string::npos)
        << p.a.lastError();
  }
}

TEST(ShmPeerInput, AnAnnouncedSizeAloneAllocatesNothing) {
  // A first fragment claiming 2^62 bytes used to be allocated at once: bad_alloc escaped
  // progress(). Now the buffer grows with what arrives.
  RawPeer p;
  p.slot(7, uint64_t{1} << 62, 8, kFirst);
  EXPECT_NO_THROW(p.a.progress());
  EXPECT_TRUE(p.owner.errors.empty());
  std::vector<std::byte> buf(16);
  Transfer r{{}, &p.owner, 0};
  p.a.postRecv(11, 7, 0, buf.data(), buf.size(), r);  // claims the message, still arriving
  p.slot(0, 0, 0, 2);                                 // the sender abandons it
  p.a.progress();
  ASSERT_EQ(p.owner.errors.size(), 1u);
  EXPECT_NE(p.owner.errors[0].find("canceled the message"), std::string::npos);
}

// A buffer at offset 64 of a shared allocation, described as its owner would.
struct SharedBuffer {
  static constexpr size_t kBytes = 3 * 4096 + 100;
  std::byte* base = static_cast<std::byte*>(allocShared(kBytes));
  RemoteBuffer desc{reinterpret_cast<uint64_t>(base + 64), 1000};
  SharedBuffer() {
    for (size_t i = 0; i < kBytes; ++i) base[i] = static_cast<std::byte>(i * 7);
    describeShared(desc);
  }
  ~SharedBuffer() { freeShared(base); }
};

TEST(SharedBufferInput, AnIntactDescriptionMapsTheBuffer) {
  SharedBuffer b;
  ASSERT_NE(b.desc.regionFd, 0u);
  std::byte* mapped = mapPeerShared(getpid(), b.desc);
  ASSERT_NE(mapped, nullptr);
  EXPECT_EQ(std::memcmp(mapped, b.base + 64, b.desc.length), 0);
}

TEST(SharedBufferInput, ADescriptionOutsideItsRegionIsNotMapped) {
  const struct {
    const char* what;
    void (*change)(RemoteBuffer&);
  } cases[] = {
      // fuzz_shared_buffers' first crash: address 0 made the offset wrap around.
      {"address 0", [](RemoteBuffer& d) { d.address = 0; }},
      {"address below the region", [](RemoteBuffer& d) { d.address = d.regionBase - 1; }},
      {"length past the region", [](RemoteBuffer& d) { d.length = d.regionSize; }},
      {"region larger than its memfd", [](RemoteBuffer& d) { d.regionSize += 8192; }},
      {"descriptor out of range", [](RemoteBuffer& d) { d.regionFd = uint64_t{1} << 40; }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    SharedBuffer b;
    c.change(b.desc);
    EXPECT_EQ(mapPeerShared(getpid(), b.desc), nullptr);
  }
}

}  // namespace
}  // namespace sharc::transport
