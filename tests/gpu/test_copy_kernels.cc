// Tests for the CUDA copy kernels of kernels/ (kernels::copyBatch, copy) on device 0; every
// test skips without a CUDA device (kernel_test_support.hpp).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <vector>

#include "kernel_test_support.hpp"
#include "kernels/kernels.hpp"

namespace sharc::kernels {
namespace {

using namespace sharc::kernels::testing;

// ---- argument checking ---------------------------------------------------------------------

using KernelArgs = DeviceTest<::testing::Test>;

TEST_F(KernelArgs, CopyRejectsBadArguments) {
  char* a = deviceAlloc(1024);
  char* b = deviceAlloc(1024);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<CopyPiece> pieces(kMaxCopyPieces + 1, CopyPiece{b, a, 8});
  EXPECT_EQ(copyBatch(pieces.data(), -1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(copyBatch(pieces.data(), kMaxCopyPieces + 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(copyBatch(nullptr, 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(copyBatch(nullptr, 0, stream_), cudaSuccess);
  const CopyPiece nullDst{nullptr, a, 8};
  EXPECT_EQ(copyBatch(&nullDst, 1, stream_), cudaErrorInvalidValue);
  const CopyPiece nullSrc{b, nullptr, 8};
  EXPECT_EQ(copyBatch(&nullSrc, 1, stream_), cudaErrorInvalidValue);
  // Empty pieces need no pointers.
  const CopyPiece empty{nullptr, nullptr, 0};
  EXPECT_EQ(copyBatch(&empty, 1, stream_), cudaSuccess);
  EXPECT_EQ(copy(nullptr, nullptr, 0, stream_), cudaSuccess);
  EXPECT_EQ(copy(b, nullptr, 1, stream_), cudaErrorInvalidValue);
  CUDA_ASSERT(cudaStreamSynchronize(stream_));
}
// ---- batched copies ------------------------------------------------------------------------

class CopyKernels : public DeviceTest<::testing::Test> {
 protected:
  // Copies `pieces` (offsets into a source and a destination buffer) with copyBatch, or
  // copy() when `single`, and checks the whole destination byte by byte: pieces copied,
  // everything else unchanged.
  struct Piece {
    size_t dstOffset;
    size_t srcOffset;
    size_t bytes;
  };

  void runPieces(const std::vector<Piece>& pieces, bool single = false) {
    size_t srcSize = 1, dstSize = 1;
    for (const Piece& p : pieces) {
      srcSize = std::max(srcSize, p.srcOffset + p.bytes);
      dstSize = std::max(dstSize, p.dstOffset + p.bytes);
    }
    Rng rng{0xC0B1ull + pieces.size()};
    std::vector<unsigned char> src(srcSize), dst(dstSize);
    rng.fill(src);
    rng.fill(dst);
    char* dSrc = deviceAlloc(srcSize);
    char* dDst = deviceAlloc(dstSize);
    ASSERT_NE(dSrc, nullptr);
    ASSERT_NE(dDst, nullptr);
    CUDA_ASSERT(cudaMemcpy(dSrc, src.data(), srcSize, cudaMemcpyHostToDevice));
    CUDA_ASSERT(cudaMemcpy(dDst, dst.data(), dstSize, cudaMemcpyHostToDevice));
    std::vector<CopyPiece> batch;
    for (const Piece& p : pieces) {
      batch.push_back(CopyPiece{dDst + p.dstOffset, dSrc + p.srcOffset, p.bytes});
      std::memcpy(dst.data() + p.dstOffset, src.data() + p.srcOffset, p.bytes);
    }
    if (single) {
      ASSERT_EQ(pieces.size(), 1u);
      ASSERT_EQ(copy(batch[0].dst, batch[0].src, batch[0].bytes, stream_), cudaSuccess);
    } else {
      ASSERT_EQ(copyBatch(batch.data(), static_cast<int>(batch.size()), stream_), cudaSuccess);
    }
    CUDA_ASSERT(cudaStreamSynchronize(stream_));
    std::vector<unsigned char> got(dstSize);
    CUDA_ASSERT(cudaMemcpy(got.data(), dDst, dstSize, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < dstSize; ++i) {
      if (got[i] != dst[i] && ++wrong <= 4) {
        ADD_FAILURE() << "destination byte " << i << ": got " << +got[i] << ", expected "
                      << +dst[i];
      }
    }
    ASSERT_EQ(wrong, 0u) << "wrong bytes";
  }

  // n pieces of the given sizes, sources at random offsets in a shared buffer, destinations
  // one after another with random gaps and alignments.
  std::vector<Piece> layout(const std::vector<size_t>& sizes, uint64_t seed) {
    Rng rng{seed};
    size_t maxBytes = 0;
    for (size_t s : sizes) maxBytes = std::max(maxBytes, s);
    const size_t srcSpan = maxBytes + 4096;
    std::vector<Piece> pieces;
    size_t next = rng.next() % 32;
    for (size_t s : sizes) {
      const size_t srcOffset = rng.next() % (srcSpan - s + 1);
      pieces.push_back(Piece{next, srcOffset, s});
      next += s + rng.next() % 40;
    }
    return pieces;
  }
};

TEST_F(CopyKernels, ManyPiecesOfOddSizesAndAlignments) {
  const size_t kSizes[] = {
      1,  2,   3,   5,    15,   16,   17,    31,    33,     63,     64,
      65, 255, 257, 1000, 4095, 4097, 65535, 65537, 100003, 262147, (size_t{1} << 20) + 7};
  for (int n : {1, 2, 17, 63, kMaxCopyPieces}) {
    SCOPED_TRACE(::testing::Message() << n << " pieces");
    Rng rng{static_cast<uint64_t>(n) * 1000003};
    std::vector<size_t> sizes;
    for (int i = 0; i < n; ++i) sizes.push_back(kSizes[rng.next() % std::size(kSizes)]);
    if (n > 2) sizes[1] = 0;  // an empty piece among the others
    runPieces(layout(sizes, 0xBA7Cull + n));
  }
}

TEST_F(CopyKernels, EveryRelativeAlignment) {
  // dst - src modulo 16 takes every value (16-, 8-, 4-, 2- and 1-byte paths), with the
  // destination itself at every offset modulo 16.
  std::vector<Piece> pieces;
  size_t next = 0;
  for (size_t rel = 0; rel < 16; ++rel) {
    for (size_t d = 0; d < 4; ++d) {
      const size_t dstOffset = next + (d * 5 + rel) % 16;
      const size_t bytes = 20000 + rel * 37 + d;
      pieces.push_back(Piece{dstOffset, (dstOffset + 16 - rel) % 16 + d * 32, bytes});
      next = (dstOffset + bytes + 64) & ~size_t{15};
    }
  }
  ASSERT_EQ(pieces.size(), static_cast<size_t>(kMaxCopyPieces));
  runPieces(pieces);
}

TEST_F(CopyKernels, ZeroPieces) {
  runPieces({});
}

TEST_F(CopyKernels, SixtyFourPiecesOneLarge) {
  // One piece dominates: the blocks must still cover every small one.
  std::vector<size_t> sizes(kMaxCopyPieces, 3);
  sizes[37] = (size_t{64} << 20) + 9;
  sizes[5] = 0;
  runPieces(layout(sizes, 0x1A26Eull));
}

TEST_F(CopyKernels, SingleCopySizesAndOffsets) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4099},
                       (size_t{8} << 20) + 5}) {
    for (size_t dstOffset : {size_t{0}, size_t{1}, size_t{8}}) {
      for (size_t srcOffset : {size_t{0}, size_t{3}, size_t{8}}) {
        SCOPED_TRACE(::testing::Message() << bytes << " bytes, dst offset " << dstOffset
                                          << ", src offset " << srcOffset);
        runPieces({Piece{dstOffset, srcOffset, bytes}}, /*single=*/true);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

}  // namespace
}  // namespace sharc::kernels
