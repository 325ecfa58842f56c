// What the fuzz targets (fuzz_*.cc) and the seed writer (make_seeds.cc) agree on: the fixed
// values a harness plugs into the code under test, so that a seed can carry them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace sharc::fuzz {

/// The job token of the root server fuzz_root_server starts (a hello must present it).
inline constexpr uint64_t kRootToken = 0x5a5a46435241485bull;

/// The FIFO geometry of fuzz_shm_fifo: 2 ranks, 4 slots of 64 bytes (tiny, so that the
/// fuzzer wraps around the ring and fragments messages after a few operations).
inline constexpr uint32_t kShmSlots = 4;
inline constexpr uint32_t kShmSlotBytes = 64;

/// A property of the code under test does not hold: report it as a crash (libFuzzer keeps
/// the input) with a line saying which.
[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "fuzz: property violated: %s\n", what);
  std::abort();
}

}  // namespace sharc::fuzz
