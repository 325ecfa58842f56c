// The registration cache against a real libfabric domain (tcp on loopback registers memory
// even though it does not require it).
#include <gtest/gtest.h>
#include <rdma/fi_domain.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "transport/mr_cache.hpp"
#include "transport/provider.hpp"

namespace sharc::transport {
namespace {

// Page-aligned buffers, so that distinct buffers never share a page (and a cache entry).
struct PageBuffer {
  explicit PageBuffer(size_t bytes) : data(static_cast<char*>(std::aligned_alloc(4096, bytes))) {}
  ~PageBuffer() { std::free(data); }
  char* data;
};

bool has(MrCache& cache, const void* buf, size_t len) {
  void* desc = nullptr;
  std::string error;
  const bool ok = cache.descriptor(buf, len, desc, error);
  EXPECT_TRUE(ok) << error;
  return ok;
}

class MrCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    info_ = queryProvider("tcp;ofi_rxm", true, why);
    if (!info_) GTEST_SKIP() << "tcp;ofi_rxm unavailable: " << why;
    fid_fabric* fabric = nullptr;
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric, nullptr), 0);
    fabric_.reset(fabric);
    fid_domain* domain = nullptr;
    ASSERT_EQ(fi_domain(fabric_.get(), info_.get(), &domain, nullptr), 0);
    domain_.reset(domain);
  }
  FiInfoPtr info_;
  FiPtr<fid_fabric> fabric_;
  FiPtr<fid_domain> domain_;
};

TEST_F(MrCacheTest, HitsInsideARegisteredRangeAndMissesOutside) {
  MrCache cache(domain_.get(), 4);
  PageBuffer a(1 << 16), b(1 << 16);
  ASSERT_TRUE(has(cache, a.data, 1 << 16));
  EXPECT_EQ(cache.misses(), 1u);
  ASSERT_TRUE(has(cache, a.data + 100, 1000));  // inside: a hit
  EXPECT_EQ(cache.hits(), 1u);
  ASSERT_TRUE(has(cache, b.data, 1 << 16));
  EXPECT_EQ(cache.misses(), 2u);
  EXPECT_EQ(cache.entries(), 2u);
  cache.invalidate(a.data, 1 << 16);
  EXPECT_EQ(cache.entries(), 1u);
  ASSERT_TRUE(has(cache, a.data, 10));
  EXPECT_EQ(cache.misses(), 3u);
}

TEST_F(MrCacheTest, EvictsTheLeastRecentlyUsedBeyondCapacity) {
  MrCache cache(domain_.get(), 2);
  std::vector<std::unique_ptr<PageBuffer>> bufs;
  for (int i = 0; i < 3; ++i) bufs.push_back(std::make_unique<PageBuffer>(1 << 20));
  for (auto& b : bufs) ASSERT_TRUE(has(cache, b->data, 1 << 20));
  EXPECT_EQ(cache.entries(), 2u);
  const auto misses = cache.misses();
  has(cache, bufs[2]->data, 10);  // most recent: still cached
  EXPECT_EQ(cache.misses(), misses);
  has(cache, bufs[0]->data, 10);  // evicted first
  EXPECT_EQ(cache.misses(), misses + 1);
}

TEST_F(MrCacheTest, ARangeGrowingPastAnEntryReplacesIt) {
  MrCache cache(domain_.get(), 8);
  PageBuffer big(1 << 20);
  ASSERT_TRUE(has(cache, big.data, 4096));
  ASSERT_TRUE(has(cache, big.data, 1 << 20));  // covers the first
  EXPECT_EQ(cache.entries(), 1u);
  ASSERT_TRUE(has(cache, big.data + 5000, 100));
  EXPECT_EQ(cache.hits(), 1u);
}

}  // namespace
}  // namespace sharc::transport
