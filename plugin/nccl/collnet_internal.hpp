// What collnet.cc (the entry points) and collnet_window.cc (NCCL's windowed AllGather and
// ReduceScatter) share: the communicator, registration and request records.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <sharc/communicator.hpp>
#include <sharc/error.hpp>
#include <string>
#include <unordered_set>
#include <vector>

#include "collnet_api.hpp"

namespace sharc::nccl::collnet {

struct CollComm;

/// A host-memory registration: only its range is kept, to check the buffers of later calls
/// (the engine registers memory with the provider itself, through its own cache).
struct MemRegion {
  static constexpr uint64_t kMagic = 0x6d722d7368617263ull;  // "crahs-rm"
  uint64_t magic = kMagic;
  CollComm* owner = nullptr;
  uintptr_t base = 0;
  size_t size = 0;
};

/// What collConnect returns: one engine communicator over the CollNet ranks.
struct CollComm {
  static constexpr uint64_t kMagic = 0x63632d7368617263ull;  // "crahs-cc"
  uint64_t magic = kMagic;
  std::shared_ptr<Communicator> comm;
  int rank = 0;
  int nranks = 0;
  std::mutex mu;                           ///< guards regions
  std::unordered_set<MemRegion*> regions;  ///< live registrations of this communicator
  /// Requests handed to NCCL and not yet reported by test: NCCL closes a communicator with
  /// some in flight only when it aborts (shared: a request may outlive its communicator).
  std::shared_ptr<std::atomic<int>> inFlight = std::make_shared<std::atomic<int>>(0);

  /// "rank R of N: <call>: " for error messages.
  std::string where(const char* call) const;
  /// Throws sharc::Error(code) naming this rank and `call`.
  [[noreturn]] void fail(Result code, const char* call, const std::string& what) const;
  /// When `mhandle` is given, checks that it is a live registration of this communicator and
  /// that [p, p + bytes) lies inside it; `what` names the buffer ("sendData", ...).
  void checkRegion(void* mhandle, const void* p, size_t bytes, const char* call, const char* what);
};

/// One posted operation: an engine request (empty when nothing needs the network) and what
/// to do once it completes (copy staged bytes out, reduce the gathered pieces).
struct CollRequest {
  static constexpr uint64_t kMagic = 0x72712d7368617263ull;  // "crahs-qr"
  uint64_t magic = kMagic;
  Request engine;
  size_t bytes = 0;                ///< what test reports in *size
  std::vector<std::byte> scratch;  ///< staging space; lives until the request is freed
  std::function<void()> finish;    ///< runs once, after the engine request completed
  /// Its communicator's count of requests in flight (CollComm::inFlight).
  std::shared_ptr<std::atomic<int>> inFlight;
};

/// The element size of a CollNet data type, or 0 when sharc has no such type.
size_t elementSize(int dataType) noexcept;

/// NCCL's windowed AllGather (see collnet_window.cc for the semantics and the design).
std::unique_ptr<CollRequest> postAllGather(CollComm& c, void* sendData, int nRecvParts,
                                           const Sge* recvParts, size_t bytesPerRank,
                                           size_t windowOffset, size_t windowBytes,
                                           void* sendMhandle);
/// NCCL's windowed ReduceScatter (see collnet_window.cc).
std::unique_ptr<CollRequest> postReduceScatter(CollComm& c, int nSendParts, const Sge* sendParts,
                                               void* recvData, size_t bytesPerRank,
                                               size_t windowOffset, size_t windowBytes,
                                               int dataType, int redOp, void* recvMhandle);

}  // namespace sharc::nccl::collnet
