// Host memory that the ranks of one node can map into each other (the counterpart of NCCL's
// ncclMemAlloc). Collectives whose buffers lie in it, on ranks that share a host, copy
// between the ranks' buffers in user space with streaming stores instead of through the
// kernel (cross-memory attach), which moves each byte through memory fewer times. Any
// buffer works with every collective; this one is only faster.
#pragma once

#include <cstddef>

namespace sharc {

/// Allocates `bytes` of zero-filled host memory (a memfd mapping) the node's other ranks can
/// map. Throws sharc::Error(SystemError) when the system refuses.
void* allocShared(size_t bytes);

/// Frees memory from allocShared (nullptr: nothing). Throws sharc::Error(InvalidArgument) for
/// a pointer allocShared did not return.
void freeShared(void* p);

}  // namespace sharc
