// FNV-1a, the one non-cryptographic hash sharc uses for identities and checksums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sharc::core {

inline constexpr uint64_t kFnv1a64Basis = 14695981039346656037ull;
inline constexpr uint64_t kFnv1a64Prime = 1099511628211ull;
inline constexpr uint32_t kFnv1a32Basis = 2166136261u;
inline constexpr uint32_t kFnv1a32Prime = 16777619u;

/// 64-bit FNV-1a of `n` bytes, continuing from `h` (the offset basis for a fresh hash).
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnv1a64Basis) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnv1a64Prime;
  return h;
}
inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv1a64Basis) noexcept {
  return fnv1a64(s.data(), s.size(), h);
}
/// The 64-bit form over the 8 little-endian bytes of `x`.
inline uint64_t fnv1a64Word(uint64_t x, uint64_t h = kFnv1a64Basis) noexcept {
  for (int i = 0; i < 8; ++i) h = (h ^ ((x >> (8 * i)) & 0xff)) * kFnv1a64Prime;
  return h;
}
/// 32-bit FNV-1a of `n` bytes.
inline uint32_t fnv1a32(const void* data, size_t n) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t h = kFnv1a32Basis;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnv1a32Prime;
  return h;
}

}  // namespace sharc::core
