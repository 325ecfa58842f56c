// Host memory the ranks of a node can map into each other (sharc::allocShared, like NCCL's
// ncclMemAlloc): a memfd per allocation, mapped by a peer through /proc/<pid>/fd. The
// single-copy algorithms copy straight into or out of such a buffer with user-space streaming
// stores instead of cross-memory attach (whose kernel copy first reads every destination line).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace sharc::transport {

/// What a rank tells its peers about one of its buffers (six words in an address message).
struct RemoteBuffer {
  uint64_t address = 0;     ///< the buffer in the owner's address space
  uint64_t length = 0;      ///< its bytes
  uint64_t regionBase = 0;  ///< the shared allocation holding it (0: not shared)
  uint64_t regionSize = 0;
  uint64_t regionFd = 0;  ///< the allocation's memfd in the owner, plus one (0: not shared)
  uint64_t regionId = 0;  ///< unique per allocation (checked against the memfd's name)
};
static_assert(sizeof(RemoteBuffer) == 6 * sizeof(uint64_t));

/// A new shared allocation of `bytes` (zero-filled); throws sharc::Error on failure.
void* allocShared(size_t bytes);
/// Frees an allocation of allocShared (nullptr: nothing); false if `p` is not one.
bool freeShared(void* p) noexcept;

/// Fills the region fields of `b` when [address, address + length) lies in one allocation.
void describeShared(RemoteBuffer& b) noexcept;

/// The address in this process of `b` (owned by process `pid`), mapping its allocation on
/// first use; nullptr when `b` is not shared or cannot be mapped (the caller falls back to
/// cross-memory attach). Thread-safe.
std::byte* mapPeerShared(pid_t pid, const RemoteBuffer& b) noexcept;

}  // namespace sharc::transport
