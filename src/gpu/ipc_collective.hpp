// The within-a-host path of the stream-ordered collectives: every rank maps the others'
// device buffers through CUDA IPC handles and reads them directly with sharc's copy and
// reduce kernels (several ranks may share one GPU). Host barriers order the phases: no rank
// writes what another still reads, and no rank returns while others read its buffers.
#pragma once

#include <chrono>
#include <map>
#include <sharc/communicator.hpp>
#include <string>
#include <vector>

#include "gpu/cuda_resources.hpp"
#include "gpu/stream_call.hpp"
#include "kernels/kernels.hpp"

namespace sharc::gpu {

class IpcCollective {
 public:
  /// Works on `device` (the caller's buffers' device, which must be current), with a stream
  /// of its own there.
  explicit IpcCollective(int device);

  /// Runs `call` on this rank: `all[r]` is rank r's descriptor (every one ipcReady, one
  /// host). `comm` carries the barriers. Blocking; throws sharc::Error on failure or after
  /// `timeout` (each GPU wait and each barrier is bounded by it).
  void run(Communicator& comm, const StreamCall& call, const std::vector<CallDescriptor>& all,
           std::chrono::milliseconds timeout);

 private:
  // Rank `r`'s send (or receive) buffer as this process addresses it.
  char* peerBuffer(const std::vector<CallDescriptor>& all, int r, int self, bool recv);
  void reduceInto(void* out, std::vector<const void*> inputs, size_t count, DataType type, RedOp op,
                  uint64_t ranks);
  void copyPieces(const std::vector<kernels::CopyPiece>& pieces);
  void finishLocal(std::chrono::milliseconds timeout, const char* what);

  int device_;
  Stream stream_;
  Event done_;
  void runPhases(Communicator& comm, const StreamCall& call, const std::vector<CallDescriptor>& all,
                 std::chrono::milliseconds timeout);
  /// Other processes' allocations mapped for the current call, by (pid, IPC handle bytes).
  /// They are closed before the call's last barrier: CUDA leaves it undefined what happens
  /// when an exporter frees memory another process still has open, and once the barrier is
  /// passed the exporter's stream goes on and may free it.
  std::map<std::string, IpcMapping> mappings_;
};

}  // namespace sharc::gpu
