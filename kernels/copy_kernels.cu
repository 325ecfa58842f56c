// Batched device copies (kernels.hpp): up to 64 pieces in one launch.
//
// The host gives every non-empty piece a contiguous range of blocks, in proportion to its size
// (at least one), with at most one resident wave in all. A block finds its piece by a binary
// search over the ranges' first blocks and grid-strides over that piece with the piece's other
// blocks. A piece is copied in the widest word W in {16, 8, 4, 2, 1} bytes for which dst and
// src agree modulo W: the bytes before dst's first W-aligned address and after the last whole
// word are copied one by one, the rest as W-byte words (uint4 when W is 16), several loads in
// flight per thread before the stores.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.hpp"
#include "kernels/launch_config.hpp"

namespace sharc::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll16 = 4;  // uint4 words a thread loads per step on the 16-byte path

// Kernel arguments, passed by value (constant parameter memory): 1.8 KB.
struct CopyParams {
  char* dst[kMaxCopyPieces];
  const char* src[kMaxCopyPieces];
  size_t bytes[kMaxCopyPieces];
  // Piece p owns blocks [firstBlock[p], firstBlock[p + 1]); firstBlock[n] is the grid size.
  uint32_t firstBlock[kMaxCopyPieces + 1];
  int n;
};

// Copies words [0, words) of one piece, as block `rank` of `blocks`.
template <typename W>
__device__ __forceinline__ void copyWords(W* dst, const W* src, size_t words, size_t rank,
                                          size_t blocks) {
  // At least 16 bytes a thread in flight per step, 64 on the 16-byte path.
  constexpr int kUnroll = sizeof(W) == 16 ? kUnroll16 : static_cast<int>(16 / sizeof(W));
  const size_t stride = blocks * kThreads * kUnroll;
  for (size_t base = rank * kThreads * kUnroll + threadIdx.x; base < words; base += stride) {
    W v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t i = base + static_cast<size_t>(u) * kThreads;
      if (i < words) v[u] = src[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t i = base + static_cast<size_t>(u) * kThreads;
      if (i < words) dst[i] = v[u];
    }
  }
}

__global__ void __launch_bounds__(kThreads) copyKernel(const __grid_constant__ CopyParams p) {
  // The piece whose block range holds this block: firstBlock[lo] <= block < firstBlock[hi].
  const uint32_t block = blockIdx.x;
  int lo = 0;
  int hi = p.n;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (p.firstBlock[mid] <= block) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  char* dst = p.dst[lo];
  const char* src = p.src[lo];
  const size_t bytes = p.bytes[lo];
  const size_t rank = block - p.firstBlock[lo];
  const size_t blocks = p.firstBlock[lo + 1] - p.firstBlock[lo];

  // Widest word in which dst and src are aligned alike (the lowest set bit of their distance).
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  const unsigned diff = static_cast<unsigned>((d - s) & 15u);
  const unsigned width = diff == 0 ? 16u : (diff & (0u - diff));
  size_t head = (width - static_cast<unsigned>(d & (width - 1))) & (width - 1);
  if (head > bytes) head = bytes;
  const size_t words = (bytes - head) / width;
  const size_t bodyEnd = head + words * width;
  const size_t tail = bytes - bodyEnd;  // < width

  // The unaligned ends, byte by byte, by the piece's first block (threads 0-15: head; 16-31:
  // tail; each is at most 15 bytes).
  if (rank == 0) {
    const unsigned t = threadIdx.x;
    if (t < head) {
      dst[t] = src[t];
    } else if (t >= 16 && t - 16 < tail) {
      dst[bodyEnd + (t - 16)] = src[bodyEnd + (t - 16)];
    }
  }

  switch (width) {
    case 16:
      copyWords(reinterpret_cast<uint4*>(dst + head), reinterpret_cast<const uint4*>(src + head),
                words, rank, blocks);
      break;
    case 8:
      copyWords(reinterpret_cast<uint2*>(dst + head), reinterpret_cast<const uint2*>(src + head),
                words, rank, blocks);
      break;
    case 4:
      copyWords(reinterpret_cast<uint32_t*>(dst + head),
                reinterpret_cast<const uint32_t*>(src + head), words, rank, blocks);
      break;
    case 2:
      copyWords(reinterpret_cast<uint16_t*>(dst + head),
                reinterpret_cast<const uint16_t*>(src + head), words, rank, blocks);
      break;
    default:
      copyWords(reinterpret_cast<uint8_t*>(dst + head),
                reinterpret_cast<const uint8_t*>(src + head), words, rank, blocks);
      break;
  }
}

// Bytes one block moves in one step on the 16-byte path: the unit of block demand.
constexpr size_t kBytesPerBlockStep = static_cast<size_t>(kThreads) * 16 * kUnroll16;

}  // namespace

cudaError_t copyBatch(const CopyPiece* pieces, int n, cudaStream_t stream) noexcept {
  if (n < 0 || n > kMaxCopyPieces) return cudaErrorInvalidValue;
  if (n > 0 && pieces == nullptr) return cudaErrorInvalidValue;

  // Blocks each piece would use for one step of every thread; empty pieces are dropped.
  size_t demand[kMaxCopyPieces];
  size_t totalDemand = 0;
  for (int i = 0; i < n; ++i) {
    const CopyPiece& piece = pieces[i];
    if (piece.bytes == 0) {
      demand[i] = 0;
      continue;
    }
    if (piece.dst == nullptr || piece.src == nullptr) return cudaErrorInvalidValue;
    demand[i] = piece.bytes / kBytesPerBlockStep + (piece.bytes % kBytesPerBlockStep != 0);
    totalDemand += demand[i];  // <= 64 * 2^64 / 16 KiB: no overflow
  }
  if (totalDemand == 0) return cudaSuccess;

  static detail::OccupancyCache cache;
  int limit = 0;
  const cudaError_t status = detail::residentBlocks(copyKernel, kThreads, cache, &limit);
  if (status != cudaSuccess) return status;

  // Within one resident wave (plus at most one block per piece for the rounding up), blocks
  // in proportion to size, so that all blocks have about the same number of bytes to move.
  CopyParams p{};
  uint32_t next = 0;
  for (int i = 0; i < n; ++i) {
    if (demand[i] == 0) continue;
    size_t blocks = demand[i];
    if (totalDemand > static_cast<size_t>(limit)) {
      blocks = static_cast<size_t>(static_cast<double>(demand[i]) * limit /
                                   static_cast<double>(totalDemand));
      if (blocks < 1) blocks = 1;
      if (blocks > static_cast<size_t>(limit)) blocks = static_cast<size_t>(limit);
    }
    p.dst[p.n] = static_cast<char*>(pieces[i].dst);
    p.src[p.n] = static_cast<const char*>(pieces[i].src);
    p.bytes[p.n] = pieces[i].bytes;
    p.firstBlock[p.n] = next;
    next += static_cast<uint32_t>(blocks);
    ++p.n;
  }
  p.firstBlock[p.n] = next;
  copyKernel<<<next, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) noexcept {
  const CopyPiece piece{dst, src, bytes};
  return copyBatch(&piece, 1, stream);
}

}  // namespace sharc::kernels
