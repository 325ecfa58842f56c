// The shared-memory transport between two endpoints of one process over one segment (the
// same code paths two processes take: the FIFOs only ever see the segment), the segment's
// life cycle, and cancels that come too late (also over two shared-memory rails, striped).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <sharc/error.hpp>
#include <string>
#include <vector>

#include "transport/shm_endpoint.hpp"
#include "transport/shm_segment.hpp"
#include "transport/striped_endpoint.hpp"

namespace sharc::transport {
namespace {

bool shmNameExists(const std::string& name) {
  return access(("/dev/shm/" + name).c_str(), F_OK) == 0;
}

// Records what completed.
struct Recorder : TransferOwner {
  struct Event {
    Transfer* t;
    bool ok;
    size_t bytes;
    uint64_t tag;
    std::string message;
  };
  std::vector<Event> events;
  void onTransferDone(Transfer& t, size_t bytes, uint64_t tag) override {
    events.push_back({&t, true, bytes, tag, {}});
  }
  void onTransferError(Transfer& t, Result, const std::string& message) override {
    events.push_back({&t, false, 0, 0, message});
  }
  const Event* find(const Transfer& t) const {
    for (const Event& e : events)
      if (e.t == &t) return &e;
    return nullptr;
  }
};

// Two endpoints (local ranks 0 and 1, endpoint peer ids 10 and 11) over one segment.
struct Pair {
  ShmGeometry g = ShmGeometry::forRanks(2);
  ShmSegment created = ShmSegment::create(g.segmentBytes());
  ShmEndpoint a{
      ShmSegment::open(created.name(), g.segmentBytes()), g, 0, {10, 11}, {getpid(), getpid()}};
  ShmEndpoint b{
      ShmSegment::open(created.name(), g.segmentBytes()), g, 1, {10, 11}, {getpid(), getpid()}};
  Recorder owner;
  Transfer transfer() { return Transfer{{}, &owner, 0}; }
  // Progresses both sides until `t` has completed (or a bound is hit).
  const Recorder::Event* until(const Transfer& t) {
    for (int i = 0; i < 100000 && !owner.find(t); ++i) {
      a.progress();
      b.progress();
    }
    return owner.find(t);
  }
};

std::vector<std::byte> pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return v;
}

TEST(ShmTransport, MessagesOfEverySizeArriveIntact) {
  Pair p;
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{63}, size_t{65536}, size_t{65537}, size_t{3} << 20}) {
    p.owner.events.clear();  // the transfers below reuse the same addresses
    const auto data = pattern(n, static_cast<int>(n));
    std::vector<std::byte> got(n + 5);
    Transfer s = p.transfer(), r = p.transfer();
    ASSERT_EQ(p.b.postRecv(10, 77, 0, got.data(), got.size(), r), PostStatus::Posted);
    const PostStatus st = p.a.postSend(11, 77, data.data(), n, s);
    ASSERT_TRUE(st == PostStatus::Posted || st == PostStatus::Completed);
    const auto* e = p.until(r);
    ASSERT_NE(e, nullptr) << n;
    EXPECT_TRUE(e->ok);
    EXPECT_EQ(e->bytes, n);  // a receive larger than the message completes with its size
    EXPECT_EQ(e->tag, 77u);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin())) << n;
    if (st == PostStatus::Posted) {
      EXPECT_TRUE(p.until(s) && p.owner.find(s)->ok);
    }
    // Messages beyond the FIFO's capacity cannot complete at once.
    if (n > p.g.slots * size_t{p.g.slotBytes}) {
      EXPECT_EQ(st, PostStatus::Posted);
    }
  }
}

TEST(ShmTransport, UnexpectedMessagesMatchByTagInArrivalOrder) {
  Pair p;
  const auto x = pattern(1000, 1), y = pattern(200000, 2), z = pattern(10, 3);
  Transfer s1 = p.transfer(), s2 = p.transfer(), s3 = p.transfer();
  p.a.postSend(11, 5, x.data(), x.size(), s1);
  p.a.postSend(11, 6, y.data(), y.size(), s2);  // larger than the FIFO: arrives while unmatched
  p.a.postSend(11, 5, z.data(), z.size(), s3);
  for (int i = 0; i < 1000; ++i) p.a.progress(), p.b.progress();
  std::vector<std::byte> g6(y.size()), g5a(1000), g5b(1000);
  Transfer r6 = p.transfer(), r5a = p.transfer(), r5b = p.transfer();
  p.b.postRecv(10, 6, 0, g6.data(), g6.size(), r6);
  p.b.postRecv(10, 5, 0, g5a.data(), g5a.size(), r5a);
  p.b.postRecv(10, 5, 0, g5b.data(), g5b.size(), r5b);
  ASSERT_TRUE(p.until(r6) && p.until(r5a) && p.until(r5b));
  EXPECT_EQ(g6, y);
  EXPECT_TRUE(std::equal(x.begin(), x.end(), g5a.begin()));  // first tag-5 message first
  EXPECT_EQ(p.owner.find(r5b)->bytes, 10u);
  EXPECT_TRUE(std::equal(z.begin(), z.end(), g5b.begin()));
}

TEST(ShmTransport, IgnoredTagBitsAndReceivesFromAnyPeer) {
  Pair p;
  uint32_t v = 42, got = 0;
  Transfer s = p.transfer(), r = p.transfer();
  ASSERT_EQ(p.b.postRecv(kAnyPeer, 0x100, 0xff, &got, sizeof(got), r), PostStatus::Posted);
  p.a.postSend(11, 0x1ab, &v, sizeof(v), s);
  const auto* e = p.until(r);
  ASSERT_TRUE(e && e->ok);
  EXPECT_EQ(e->tag, 0x1abu);
  EXPECT_EQ(got, 42u);
}

TEST(ShmTransport, TruncationIsAnErrorAndTheStreamStaysInStep) {
  Pair p;
  const auto big = pattern(300000, 4), next = pattern(16, 5);
  std::vector<std::byte> small(100), after(16);
  Transfer s1 = p.transfer(), s2 = p.transfer(), r1 = p.transfer(), r2 = p.transfer();
  p.b.postRecv(10, 1, 0, small.data(), small.size(), r1);
  p.b.postRecv(10, 2, 0, after.data(), after.size(), r2);
  p.a.postSend(11, 1, big.data(), big.size(), s1);
  p.a.postSend(11, 2, next.data(), next.size(), s2);
  const auto* e = p.until(r1);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->ok);
  EXPECT_NE(e->message.find("larger than the posted buffer"), std::string::npos) << e->message;
  ASSERT_TRUE(p.until(r2) && p.owner.find(r2)->ok);
  EXPECT_EQ(after, next);
}

TEST(ShmTransport, CancelingAHalfWrittenSendResynchronisesTheReader) {
  Pair p;
  const auto big = pattern(size_t{4} << 20, 6), next = pattern(32, 7);
  std::vector<std::byte> gotBig(big.size()), gotNext(32);
  Transfer s1 = p.transfer(), s2 = p.transfer(), r1 = p.transfer(), r2 = p.transfer();
  ASSERT_EQ(p.a.postSend(11, 1, big.data(), big.size(), s1), PostStatus::Posted);
  p.b.postRecv(10, 1, 0, gotBig.data(), gotBig.size(), r1);
  p.b.progress();  // part of it is read
  p.a.cancel(s1);
  p.a.progress();
  ASSERT_TRUE(p.owner.find(s1));
  EXPECT_EQ(p.owner.find(s1)->message, "canceled");
  p.a.postSend(11, 2, next.data(), next.size(), s2);
  p.b.postRecv(10, 2, 0, gotNext.data(), gotNext.size(), r2);
  const auto* e = p.until(r1);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->ok);
  ASSERT_TRUE(p.until(r2) && p.owner.find(r2)->ok);
  EXPECT_EQ(gotNext, next);
}

// Unexpected messages over kUnexpectedFirst (1 MiB) are buffered in a buffer that grows as
// their fragments arrive.
TEST(ShmTransport, AnUnexpectedMessageLargerThanItsFirstBufferArrivesIntact) {
  Pair p;
  const auto big = pattern((size_t{3} << 20) + 5, 8);
  Transfer s = p.transfer(), r = p.transfer();
  ASSERT_EQ(p.a.postSend(11, 4, big.data(), big.size(), s), PostStatus::Posted);
  ASSERT_TRUE(p.until(s) && p.owner.find(s)->ok);  // all of it read before any receive
  std::vector<std::byte> got(big.size());
  p.b.postRecv(10, 4, 0, got.data(), got.size(), r);
  ASSERT_TRUE(p.until(r) && p.owner.find(r)->ok);
  EXPECT_EQ(got, big);
}

// A receive posted while its message was still arriving unexpected used to be dropped
// silently when the sender canceled the message (it then waited until the timeout).
TEST(ShmTransport, AReceiveThatClaimedACanceledMessageFails) {
  Pair p;
  const auto big = pattern(size_t{20} << 16, 9);  // more than the 16 slots of the FIFO
  std::vector<std::byte> got(big.size());
  Transfer s = p.transfer(), r = p.transfer();
  ASSERT_EQ(p.a.postSend(11, 3, big.data(), big.size(), s), PostStatus::Posted);
  p.b.progress();  // reads what fits: an unexpected message, partly here
  ASSERT_EQ(p.b.postRecv(10, 3, 0, got.data(), got.size(), r), PostStatus::Posted);  // claims it
  p.a.cancel(s);
  const auto* e = p.until(r);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->ok);
  EXPECT_NE(e->message.find("canceled the message"), std::string::npos) << e->message;
}

TEST(ShmTransport, CanceledReceiveReportsCanceled) {
  Pair p;
  char buf[8];
  Transfer r = p.transfer();
  p.b.postRecv(10, 9, 0, buf, sizeof(buf), r);
  p.b.cancel(r);
  p.b.progress();
  ASSERT_TRUE(p.owner.find(r));
  EXPECT_EQ(p.owner.find(r)->message, "canceled");
}

// A receive whose message is being read is past canceling: it completes whole. (A receive
// from any source cancels its losing receives; their messages must not be lost.)
TEST(ShmTransport, CancelingAReceiveWhoseMessageIsBeingReadCompletesIt) {
  Pair p;
  const auto big = pattern(size_t{4} << 20, 10);
  std::vector<std::byte> got(big.size());
  Transfer s = p.transfer(), r = p.transfer();
  ASSERT_EQ(p.b.postRecv(10, 5, 0, got.data(), got.size(), r), PostStatus::Posted);
  ASSERT_EQ(p.a.postSend(11, 5, big.data(), big.size(), s), PostStatus::Posted);
  p.b.progress();  // part of it is read into `got`
  p.b.cancel(r);
  const auto* e = p.until(r);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->ok) << e->message;
  EXPECT_EQ(got, big);
}

// Over two rails a receive is two pieces. Canceled while rail 0's piece is being read and rail
// 1's has not arrived, the cancel stops piece 1 only: once piece 0 arrives the cancel is
// withdrawn and piece 1 posted again, so the message completes whole rather than half of it
// staying behind for a later receive of the same tag.
TEST(StripedTransport, ACancelThatCameTooLateForOnePieceIsWithdrawn) {
  const ShmGeometry g = ShmGeometry::forRanks(2);
  ShmSegment segment0 = ShmSegment::create(g.segmentBytes()),
             segment1 = ShmSegment::create(g.segmentBytes());
  auto rail = [&](const ShmSegment& seg, uint32_t local) {
    return std::make_unique<ShmEndpoint>(ShmSegment::open(seg.name(), g.segmentBytes()), g, local,
                                         std::vector<uint32_t>{10, 11},
                                         std::vector<pid_t>{getpid(), getpid()});
  };
  std::vector<std::unique_ptr<Endpoint>> sendRails, recvRails;
  sendRails.push_back(rail(segment0, 0));
  sendRails.push_back(rail(segment1, 0));
  recvRails.push_back(rail(segment0, 1));
  recvRails.push_back(rail(segment1, 1));
  Endpoint& recvRail0 = *recvRails[0];
  StripedEndpoint a(std::move(sendRails)), b(std::move(recvRails));
  const auto big = pattern(size_t{8} << 20, 11);  // two pieces of 4 MiB
  std::vector<std::byte> got(big.size());
  Recorder owner;
  Transfer s{{}, &owner, 0}, r{{}, &owner, 1};
  ASSERT_EQ(b.postRecv(10, 6, 0, got.data(), got.size(), r), PostStatus::Posted);
  ASSERT_EQ(a.postSend(11, 6, big.data(), big.size(), s), PostStatus::Posted);
  recvRail0.progress();  // part of piece 0 is read; piece 1 waits in rail 1's FIFO
  b.cancel(r);
  for (int i = 0; i < 100000 && !(owner.find(r) && owner.find(s)); ++i) {
    a.progress();
    b.progress();
  }
  ASSERT_TRUE(owner.find(r) && owner.find(s));
  EXPECT_TRUE(owner.find(s)->ok) << owner.find(s)->message;
  EXPECT_TRUE(owner.find(r)->ok) << owner.find(r)->message;
  EXPECT_EQ(owner.find(r)->bytes, big.size());
  EXPECT_EQ(got, big);
}

TEST(ShmTransport, APeerThatExitsFailsWhatWaitsOnIt) {
  ShmGeometry g = ShmGeometry::forRanks(2);
  ShmSegment seg = ShmSegment::create(g.segmentBytes());
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  ShmEndpoint a{ShmSegment::open(seg.name(), g.segmentBytes()), g, 0, {0, 1}, {getpid(), child}};
  Recorder owner;
  char buf[8];
  Transfer r{{}, &owner, 0};
  ASSERT_EQ(a.postRecv(1, 3, 0, buf, sizeof(buf), r), PostStatus::Posted);
  for (int i = 0; i < 2000 && owner.events.empty(); ++i) {
    a.progress();
    usleep(1000);
  }
  ASSERT_EQ(owner.events.size(), 1u);
  EXPECT_FALSE(owner.events[0].ok);
  EXPECT_NE(owner.events[0].message.find("has exited"), std::string::npos);
  Transfer s{{}, &owner, 1};
  EXPECT_EQ(a.postSend(1, 3, buf, 1, s), PostStatus::Failed);
}

TEST(ShmSegment, NameIsGoneAfterUnlinkAndAfterDestruction) {
  const ShmGeometry g = ShmGeometry::forRanks(3);
  std::string name;
  {
    ShmSegment s = ShmSegment::create(g.segmentBytes());
    name = s.name();
    EXPECT_TRUE(shmNameExists(name));
    ShmSegment peer = ShmSegment::open(name, g.segmentBytes());
    s.unlink();
    EXPECT_FALSE(shmNameExists(name));
    // Both mappings still see one memory.
    static_cast<char*>(s.data())[100] = 'x';
    EXPECT_EQ(static_cast<char*>(peer.data())[100], 'x');
  }
  {
    ShmSegment s = ShmSegment::create(4096);
    name = s.name();
  }
  EXPECT_FALSE(shmNameExists(name));
  EXPECT_THROW(ShmSegment::open(name, 4096), Error);
}

TEST(ShmSegment, SegmentsOfExitedCreatorsAreSwept) {
  // A child creates a segment and dies without unlinking it (as under SIGKILL).
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    ShmSegment s = ShmSegment::create(4096);
    const std::string name = s.name();
    (void)!write(fds[1], name.data(), name.size());
    _exit(0);  // no destructors: the name stays
  }
  char name[128] = {};
  ASSERT_GT(read(fds[0], name, sizeof(name) - 1), 0);
  waitpid(child, nullptr, 0);
  close(fds[0]);
  close(fds[1]);
  ASSERT_TRUE(shmNameExists(name));
  EXPECT_GE(ShmSegment::sweepStale(), 1);
  EXPECT_FALSE(shmNameExists(name));
}

// Each rank reserves what it reads (so the pages come from its NUMA node): together the
// ranks allocate the header and every FIFO between two different ranks, nothing else.
TEST(ShmGeometry, InboundReservationsCoverEveryFifoOnce) {
  const ShmGeometry g = ShmGeometry::forRanks(3);
  ShmSegment s = ShmSegment::create(g.segmentBytes());
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm/" + s.name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_blocks, 0);  // sized, not allocated
  for (int me = 0; me < 3; ++me) g.reserveInbound(s, me);
  ASSERT_EQ(stat(("/dev/shm/" + s.name()).c_str(), &st), 0);
  const size_t allocated = static_cast<size_t>(st.st_blocks) * 512;
  const size_t fifos = 3 * 2 * g.fifoBytes();
  EXPECT_GE(allocated, fifos);
  EXPECT_LT(allocated, g.segmentBytes() - 2 * g.fifoBytes());  // the rank-to-itself FIFOs
}

TEST(ShmGeometry, LargeNodesStayWithinTheSegmentBudget) {
  EXPECT_EQ(ShmGeometry::forRanks(8).slots, 16u);
  EXPECT_EQ(ShmGeometry::forRanks(8).slotBytes, 65536u);
  for (int n : {64, 128, 256}) {
    const ShmGeometry g = ShmGeometry::forRanks(n);
    EXPECT_LE(g.segmentBytes(), (size_t{520} << 20)) << n;
    EXPECT_GE(g.slots, 4u);
    EXPECT_EQ(g.slotBytes % 64, 0u);
  }
}

}  // namespace
}  // namespace sharc::transport
