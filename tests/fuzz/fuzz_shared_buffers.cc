// transport::mapPeerShared (transport/shared_buffers.cc) with the buffer description a peer
// sends in an address message (six words: address, length, region base, size, fd + 1, id).
// The harness owns one real shared allocation and describes a buffer in it as a peer would;
// the input then changes the words (replace, or add a small offset). Property: when
// mapPeerShared returns an address, every one of the `length` bytes the schedules then read
// or write (schedule.cc checks offsets against `length`) lies in memory that is mapped.
#include <unistd.h>

#include <cstring>
#include <sharc/error.hpp>

#include "fuzz_common.hpp"
#include "transport/shared_buffers.hpp"

namespace {

using namespace sharc::transport;
using sharc::fuzz::broken;

constexpr size_t kAllocation = 3 * 4096 + 100;  // not a whole number of pages

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* shared = static_cast<std::byte*>(allocShared(kAllocation));
  RemoteBuffer b{reinterpret_cast<uint64_t>(shared + 64), 1000};
  describeShared(b);
  if (b.regionFd == 0) broken("describeShared did not find the allocation");
  uint64_t* words = reinterpret_cast<uint64_t*>(&b);
  size_t pos = 0;
  for (int w = 0; w < 6 && pos < size; ++w) {
    const uint8_t how = data[pos++];
    uint64_t v = 0;
    for (size_t i = 0; i < 8 && pos < size; ++i) v |= uint64_t{data[pos++]} << (8 * i);
    if (how % 3 == 1) words[w] = v;  // a value of its own
    if (how % 3 == 2) words[w] += static_cast<int64_t>(static_cast<int16_t>(v));  // near by
  }
  std::byte* mapped = mapPeerShared(getpid(), b);
  if (mapped == nullptr) return 0;
  if (b.length > kAllocation) broken("a mapping longer than the allocation was accepted");
  // Touch every byte: outside the mapping (or past the end of the memfd) this faults.
  volatile unsigned sum = 0;
  for (uint64_t i = 0; i < b.length; ++i) sum = sum + static_cast<unsigned>(mapped[i]);
  if (b.length > 0) mapped[b.length - 1] = mapped[b.length - 1];
  return 0;
}
