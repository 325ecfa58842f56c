// IpcCollective (ipc_collective.hpp): direct reads of the other ranks' device buffers.
#include "gpu/ipc_collective.hpp"

#include <unistd.h>

#include <algorithm>

#include "core/log.hpp"
#include "gpu/cuda_check.hpp"

namespace sharc::gpu {

// The stream and event belong to the current device: the executor makes `device` current
// before it creates this object.
IpcCollective::IpcCollective(int device) : device_(device) {}

char* IpcCollective::peerBuffer(const std::vector<CallDescriptor>& all, int r, int self,
                                bool recv) {
  const CallDescriptor& d = all[static_cast<size_t>(r)];
  const uint64_t address = recv ? d.recvAddress : d.sendAddress;
  // Ours, or another rank of this very process: its address is valid here as it is.
  if (r == self || d.pid == static_cast<int32_t>(getpid()))
    return reinterpret_cast<char*>(static_cast<uintptr_t>(address));
  const IpcBufferHandle& h = recv ? d.recv : d.send;
  std::string key(reinterpret_cast<const char*>(&h.pid), sizeof(h.pid));
  key.append(h.handle.data(), h.handle.size());
  auto it = mappings_.find(key);
  if (it == mappings_.end()) {
    it = mappings_.emplace(key, IpcMapping(h)).first;
    SHARC_TRACE("cuda ipc: mapped an allocation of pid " << h.pid << " (" << mappings_.size()
                                                         << " mappings)");
  }
  return static_cast<char*>(it->second.base()) + h.offset;
}

void IpcCollective::reduceInto(void* out, std::vector<const void*> inputs, size_t count,
                               DataType type, RedOp op, uint64_t ranks) {
  // More inputs than one launch takes: fold them into `out` a group at a time (each later
  // group starts from `out`); Avg divides only in the last launch.
  size_t next = 0;
  bool first = true;
  while (next < inputs.size()) {
    std::vector<const void*> group;
    if (!first) group.push_back(out);
    while (group.size() < static_cast<size_t>(kernels::kMaxReduceInputs) && next < inputs.size())
      group.push_back(inputs[next++]);
    const bool last = next == inputs.size();
    const RedOp groupOp = op == RedOp::Avg && !last ? RedOp::Sum : op;
    const cudaError_t status = kernels::reduce(out, group.data(), static_cast<int>(group.size()),
                                               count, type, groupOp, ranks, stream_.get());
    if (status != cudaSuccess) throwCudaError(status, "kernels::reduce", __FILE__, __LINE__);
    first = false;
  }
}

void IpcCollective::copyPieces(const std::vector<kernels::CopyPiece>& pieces) {
  for (size_t at = 0; at < pieces.size(); at += kernels::kMaxCopyPieces) {
    const int n = static_cast<int>(
        std::min(pieces.size() - at, static_cast<size_t>(kernels::kMaxCopyPieces)));
    const cudaError_t status = kernels::copyBatch(pieces.data() + at, n, stream_.get());
    if (status != cudaSuccess) throwCudaError(status, "kernels::copyBatch", __FILE__, __LINE__);
  }
}

void IpcCollective::finishLocal(std::chrono::milliseconds timeout, const char* what) {
  done_.record(stream_.get());
  done_.waitFor(static_cast<long>(timeout.count()), what);
}

void IpcCollective::run(Communicator& comm, const StreamCall& call,
                        const std::vector<CallDescriptor>& all, std::chrono::milliseconds timeout) {
  DeviceGuard guard(device_);
  try {
    runPhases(comm, call, all, timeout);
  } catch (...) {
    // Kernels may still be reading the mappings: closing them now could fault the GPU, so
    // they are given up instead (a failed collective leaves the communicator unusable anyway).
    new std::map<std::string, IpcMapping>(std::move(mappings_));
    mappings_.clear();
    throw;
  }
  mappings_.clear();  // the GPU work of this call is done (runPhases waited for it)
  // Nobody's stream may go on (and overwrite or free its buffers) while another rank still
  // reads them or has them mapped.
  comm.barrier();
}

void IpcCollective::runPhases(Communicator& comm, const StreamCall& call,
                              const std::vector<CallDescriptor>& all,
                              std::chrono::milliseconds timeout) {
  const int n = comm.size(), self = comm.rank();
  const size_t elem = dataTypeSize(call.type);
  const size_t bytes = call.count * elem;
  if (bytes == 0) return;  // every rank agreed on the count: nobody reads anything
  char* recv = static_cast<char*>(call.recv);
  const uint64_t ranks = static_cast<uint64_t>(n);

  switch (call.kind) {
    case CollectiveKind::AllGather: {
      std::vector<kernels::CopyPiece> pieces;
      for (int r = 0; r < n; ++r) {
        char* dst = recv + static_cast<size_t>(r) * bytes;
        const char* src = peerBuffer(all, r, self, false);
        if (dst != src) pieces.push_back({dst, src, bytes});  // in place: already there
      }
      copyPieces(pieces);
      finishLocal(timeout, "allGather (cuda ipc)");
      break;
    }
    case CollectiveKind::ReduceScatter: {
      std::vector<const void*> inputs;
      for (int r = 0; r < n; ++r)
        inputs.push_back(peerBuffer(all, r, self, false) + static_cast<size_t>(self) * bytes);
      reduceInto(recv, inputs, call.count, call.type, call.op, ranks);
      finishLocal(timeout, "reduceScatter (cuda ipc)");
      break;
    }
    case CollectiveKind::AllReduce: {
      // Each rank reduces one slice into its own receive buffer, then gathers the others'
      // slices from theirs. Slices are whole elements, as even as the count allows.
      auto sliceBegin = [&](int r) { return call.count * static_cast<size_t>(r) / ranks; };
      const size_t begin = sliceBegin(self), end = sliceBegin(self + 1);
      if (end > begin) {
        std::vector<const void*> inputs;
        for (int r = 0; r < n; ++r)
          inputs.push_back(peerBuffer(all, r, self, false) + begin * elem);
        reduceInto(recv + begin * elem, inputs, end - begin, call.type, call.op, ranks);
      }
      finishLocal(timeout, "allReduce reduce phase (cuda ipc)");
      comm.barrier();  // every slice is reduced
      std::vector<kernels::CopyPiece> pieces;
      for (int r = 0; r < n; ++r) {
        const size_t b = sliceBegin(r), e = sliceBegin(r + 1);
        if (r == self || e == b) continue;
        pieces.push_back(
            {recv + b * elem, peerBuffer(all, r, self, true) + b * elem, (e - b) * elem});
      }
      copyPieces(pieces);
      finishLocal(timeout, "allReduce gather phase (cuda ipc)");
      break;
    }
    case CollectiveKind::Broadcast: {
      const char* src = peerBuffer(all, call.root, self, false);
      if (src != recv) copyPieces({{recv, src, bytes}});
      finishLocal(timeout, "broadcast (cuda ipc)");
      break;
    }
    default: break;
  }
}

}  // namespace sharc::gpu
