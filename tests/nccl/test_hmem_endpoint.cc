// The transport calls the NCCL plugin's device memory rests on, against real libfabric
// endpoints opened as the plugin opens them (EndpointOptions::hmem): registration through
// fi_mr_regattr whose descriptor transfers carry, and the fi_read of the endpoint's own
// registered memory that iflush posts. Where a provider has FI_HMEM (libfabric's shm does,
// even built without CUDA) they run with FI_HMEM_SYSTEM memory; without it, the refusals.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "transport/endpoint.hpp"

namespace sharc::transport {
namespace {

struct Owner final : TransferOwner {
  int done = 0;
  size_t bytes = 0;
  std::string error;
  void onTransferDone(Transfer&, size_t n, uint64_t) override {
    ++done;
    bytes = n;
  }
  void onTransferError(Transfer&, Result, const std::string& message) override {
    ++done;
    error = message;
  }
};

struct PageBuffer {
  explicit PageBuffer(size_t n) : size(n), data(static_cast<char*>(std::aligned_alloc(4096, n))) {}
  ~PageBuffer() { std::free(data); }
  size_t size;
  char* data;
};

std::unique_ptr<Endpoint> open(const std::string& provider) {
  EndpointOptions options;
  options.provider = provider;
  options.allLocal = true;
  options.hmem = true;
  return openFabricEndpoint(options);
}

MemoryRegistration host(const PageBuffer& b) {
  MemoryRegistration m;
  m.buf = b.data;
  m.len = b.size;
  return m;
}

// Polls the endpoints until `owner` saw `n` completions (10 s at most).
void await(Owner& owner, int n, Endpoint& a, Endpoint* b = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (owner.done < n && std::chrono::steady_clock::now() < deadline) {
    a.progress();
    if (b) b->progress();
  }
  ASSERT_EQ(owner.done, n) << "completions missing after 10 s";
  ASSERT_EQ(owner.error, "");
}

// Posts until the provider takes it (10 s at most), progressing both sides meanwhile.
template <typename Post>
PostStatus postRetrying(Post post, Endpoint& a, Endpoint* b = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const PostStatus st = post();
    if (st != PostStatus::Retry || std::chrono::steady_clock::now() > deadline) return st;
    a.progress();
    if (b) b->progress();
  }
}

TEST(NetPluginHmemEndpoint, ShmRegistrationsCarryTransfers) {
  auto a = open("shm"), b = open("shm");
  std::string why;
  if (!a->supportsHmem(why)) GTEST_SKIP() << why;
  PageBuffer src(1 << 20), dst(1 << 20);
  for (size_t i = 0; i < src.size; ++i) src.data[i] = static_cast<char>(i * 7 + 3);
  std::memset(dst.data, 0, dst.size);
  uint64_t srcKey = 0, dstKey = 0;
  ASSERT_TRUE(a->registerMemory(host(src), srcKey)) << a->lastError();
  ASSERT_TRUE(b->registerMemory(host(dst), dstKey)) << b->lastError();
  uint64_t ignored = 0;
  EXPECT_FALSE(a->registerMemory(host(src), ignored)) << "the same range twice";
  EXPECT_NE(a->lastError().find("already registered"), std::string::npos) << a->lastError();
  const uint32_t toB = a->addPeer(b->localAddress());
  b->addPeer(a->localAddress());
  // A large message (descriptors on both sides) and a small one (injected from host memory).
  for (size_t len : {size_t{600000}, size_t{16}}) {
    Owner sent, received;
    Transfer ts, tr;
    ts.owner = &sent;
    tr.owner = &received;
    ASSERT_EQ(b->postRecv(kAnyPeer, 42, 0, dst.data + 100, len, tr), PostStatus::Posted)
        << b->lastError();
    const PostStatus st =
        postRetrying([&] { return a->postSend(toB, 42, src.data + 4096, len, ts); }, *a, b.get());
    ASSERT_TRUE(st == PostStatus::Posted || st == PostStatus::Completed)
        << static_cast<int>(st) << ": " << a->lastError();
    await(received, 1, *b, a.get());
    if (st == PostStatus::Posted) await(sent, 1, *a, b.get());
    EXPECT_EQ(received.bytes, len);
    EXPECT_EQ(std::memcmp(dst.data + 100, src.data + 4096, len), 0) << len << " bytes";
  }
  // A DMA-BUF: refused without libfabric 1.20's FI_MR_DMABUF; a memfd is no DMA-BUF anyway.
  const int fd = memfd_create("sharc-not-a-dmabuf", 0);
  ASSERT_GE(fd, 0);
  PageBuffer other(4096);
  MemoryRegistration m = host(other);
  m.dmabufFd = fd;
  EXPECT_FALSE(a->registerMemory(m, ignored));
  EXPECT_NE(a->lastError().find("shm"), std::string::npos) << a->lastError();
  if (!a->supportsDmabuf()) {
    EXPECT_NE(a->lastError().find("DMA-BUF"), std::string::npos) << a->lastError();
  }
  close(fd);
  a->releaseMemory(src.data, src.size);
  EXPECT_TRUE(a->registerMemory(host(src), srcKey)) << "again after release: " << a->lastError();
}

// iflush's read: the endpoint reads its own registered memory into a registered host
// buffer (fi_read to its own address, the region's key, its virtual address or offset).
TEST(NetPluginHmemEndpoint, ShmReadsItsOwnRegistrationAsIflushDoes) {
  auto e = open("shm");
  std::string why;
  if (!e->supportsHmem(why)) GTEST_SKIP() << why;
  if (!e->supportsRead()) GTEST_SKIP() << "shm was opened without FI_RMA reads";
  PageBuffer region(64 * 1024), target(4096);
  for (size_t i = 0; i < region.size; ++i) region.data[i] = static_cast<char>(i * 13 + 1);
  std::memset(target.data, 0, target.size);
  uint64_t key = 0, unused = 0;
  ASSERT_TRUE(e->registerMemory(host(region), key)) << e->lastError();
  ASSERT_TRUE(e->registerMemory(host(target), unused)) << e->lastError();
  const uint32_t self = e->addPeer(e->localAddress());
  const auto base = reinterpret_cast<uint64_t>(region.data);
  for (size_t offset : {size_t{0}, size_t{100}, size_t{40000}}) {
    Owner owner;
    Transfer t;
    t.owner = &owner;
    const PostStatus st = postRetrying(
        [&] { return e->postRead(self, target.data, 8, base + offset, base, key, t); }, *e);
    ASSERT_EQ(st, PostStatus::Posted) << e->lastError();
    await(owner, 1, *e);
    EXPECT_EQ(std::memcmp(target.data, region.data + offset, 8), 0) << "offset " << offset;
  }
}

// Without FI_HMEM (tcp in libfabric 1.17): registerMemory and postRead refuse, naming the
// provider; the endpoint is a plain one otherwise.
TEST(NetPluginHmemEndpoint, ProviderWithoutHmemRefuses) {
  auto e = open("tcp;ofi_rxm");
  std::string why;
  if (e->supportsHmem(why)) GTEST_SKIP() << "this libfabric's tcp has FI_HMEM";
  EXPECT_EQ(why, "provider tcp;ofi_rxm has no FI_HMEM support");
  EXPECT_FALSE(e->supportsRead());
  EXPECT_FALSE(e->supportsDmabuf());
  PageBuffer b(4096);
  uint64_t key = 0;
  EXPECT_FALSE(e->registerMemory(host(b), key));
  EXPECT_EQ(e->lastError(), why);
  Owner owner;
  Transfer t;
  t.owner = &owner;
  const uint32_t self = e->addPeer(e->localAddress());
  EXPECT_EQ(e->postRead(self, b.data, 8, 0, 0, 0, t), PostStatus::Failed);
  EXPECT_NE(e->lastError().find("tcp;ofi_rxm"), std::string::npos) << e->lastError();
}

}  // namespace
}  // namespace sharc::transport
