// One stream-ordered collective as the executor sees it, and the small per-call record every
// rank sends the others before running it (where its buffers are, their IPC handles, and
// what it was asked to do, so that mismatched calls fail with a clear message).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <sharc/types.hpp>
#include <string>

#include "gpu/cuda_resources.hpp"

namespace sharc::gpu {

/// A stream-ordered collective: buffers and arguments as the host collectives take them.
struct StreamCall {
  CollectiveKind kind = CollectiveKind::AllGather;  ///< AllGather to Broadcast
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  ///< per rank for AllGather/ReduceScatter, in total otherwise
  DataType type = DataType::Float32;
  RedOp op = RedOp::Sum;
  int root = 0;
  cudaStream_t stream = nullptr;
  int device = 0;  ///< the device whose stream this is (current device at the call)
};

/// What each rank tells the others about one call (plain bytes, sent with allGather).
struct CallDescriptor {
  uint64_t hostId = 0;  ///< equal for ranks on one host (hostname and boot id)
  int32_t pid = 0;
  int32_t device = -1;
  uint64_t count = 0;
  int32_t root = 0;
  uint8_t kind = 0, type = 0, op = 0;
  uint8_t ipcReady = 0;      ///< both buffers are device memory with IPC handles below
  uint64_t sendAddress = 0;  ///< the buffers in the sender's address space (a rank of the
  uint64_t recvAddress = 0;  ///< same process uses them as they are)
  IpcBufferHandle send;      ///< valid when ipcReady
  IpcBufferHandle recv;      ///< valid when ipcReady
};

/// This host's identity (FNV-1a of the hostname, the kernel's boot id and SHARC_NODE_ID).
uint64_t localHostId();

/// Bytes of one rank's send buffer for `call` (count × element size, × ranks for
/// ReduceScatter) and of its receive buffer (× ranks for AllGather).
size_t sendBytes(const StreamCall& call, int nranks);
size_t recvBytes(const StreamCall& call, int nranks);

}  // namespace sharc::gpu
