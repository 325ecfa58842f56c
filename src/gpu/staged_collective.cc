// Collectives staged through host memory (staged_collective.hpp).
//
// Each staging slot holds one chunk of every rank's data and the host collective runs on it
// in place: AllGather stages this rank's piece at its offset in the slot, ReduceScatter stages
// the n pieces one after another, AllReduce and Broadcast one piece. Chunk k uses slot
// k % slots. The engine runs copies one after another in the order enqueued, so the copies in
// of chunk k (enqueued after the copies out of chunk k - slots) never overtake them.
#include "gpu/staged_collective.hpp"

#include <sched.h>
#include <time.h>

#include <cstdint>
#include <limits>
#include <string>

#include "core/collective.hpp"
#include "core/log.hpp"

namespace sharc::gpu {
namespace {

using Clock = std::chrono::steady_clock;

size_t ceilDiv(size_t a, size_t b) {
  return a / b + (a % b != 0);
}

// The call's shape on this rank.
struct Shape {
  const StagedCall& call;
  int n, rank;
  size_t elem;
  bool inPlace;
  bool perRank;  // AllGather or ReduceScatter: one piece per rank in each slot

  const std::byte* send(size_t elems) const {
    return static_cast<const std::byte*>(call.send) + elems * elem;
  }
  std::byte* recv(size_t elems) const { return static_cast<std::byte*>(call.recv) + elems * elem; }
};

std::string describe(const Shape& s) {
  return "rank " + std::to_string(s.rank) + ": staged " + core::collectiveName(s.call.kind) + "(" +
         dataTypeName(s.call.type) + ", count " + std::to_string(s.call.count) + ")";
}

[[noreturn]] void invalid(const Shape& s, const std::string& what) {
  throw Error(Result::InvalidArgument, describe(s) + ": " + what);
}

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

// The host collective's own checks, on the caller's buffers (the host sees only staging).
void validate(const Shape& s, size_t chunkBytes) {
  const StagedCall& c = s.call;
  if (c.kind != CollectiveKind::AllGather && c.kind != CollectiveKind::ReduceScatter &&
      c.kind != CollectiveKind::AllReduce && c.kind != CollectiveKind::Broadcast)
    invalid(s, "unknown collective " + std::to_string(static_cast<int>(c.kind)));
  if (!isValid(c.type)) invalid(s, "unknown data type " + std::to_string(int(c.type)));
  if ((c.kind == CollectiveKind::ReduceScatter || c.kind == CollectiveKind::AllReduce) &&
      !isValid(c.op))
    invalid(s, "unknown reduction op " + std::to_string(int(c.op)));
  if (c.kind == CollectiveKind::Broadcast && (c.root < 0 || c.root >= s.n))
    invalid(s, "root " + std::to_string(c.root) + " out of range (expected 0.." +
                   std::to_string(s.n - 1) + ")");
  if (chunkBytes == 0) invalid(s, "chunk of 0 bytes");
  if (c.count > std::numeric_limits<size_t>::max() / s.elem / static_cast<size_t>(s.n))
    invalid(s, "count overflows");
  if (c.count == 0) return;
  const bool needSend = c.kind != CollectiveKind::Broadcast || s.rank == c.root;
  if (needSend && c.send == nullptr) invalid(s, "sendbuff is null");
  if (c.recv == nullptr) invalid(s, "recvbuff is null");
  const size_t bytes = c.count * s.elem;
  const size_t sendBytes = c.kind == CollectiveKind::ReduceScatter ? bytes * s.n : bytes;
  const size_t recvBytes = c.kind == CollectiveKind::AllGather ? bytes * s.n : bytes;
  if (needSend && !s.inPlace && overlaps(c.send, sendBytes, c.recv, recvBytes))
    invalid(s, "sendbuff and recvbuff overlap but are not the in-place form");
}

// Enqueues the copies that fill `slot` with chunk [first, first + len).
void stageIn(DeviceQueue& e, const Shape& s, std::byte* slot, size_t first, size_t len) {
  const size_t bytes = len * s.elem;
  switch (s.call.kind) {
    case CollectiveKind::AllGather: e.copy(slot + s.rank * bytes, s.send(first), bytes); break;
    case CollectiveKind::ReduceScatter:
      for (int r = 0; r < s.n; ++r)
        e.copy(slot + r * bytes, s.send(r * s.call.count + first), bytes);
      break;
    case CollectiveKind::AllReduce: e.copy(slot, s.send(first), bytes); break;
    case CollectiveKind::Broadcast:
      if (s.rank == s.call.root) e.copy(slot, s.send(first), bytes);
      break;
    default: break;
  }
}

// Starts the host collective of one chunk of `len` elements on `slot`, in place.
Request post(Communicator& comm, const Shape& s, std::byte* slot, size_t len) {
  const StagedCall& c = s.call;
  const size_t bytes = len * s.elem;
  switch (c.kind) {
    case CollectiveKind::AllGather:
      return comm.iallGather(slot + s.rank * bytes, slot, len, c.type);
    case CollectiveKind::ReduceScatter:
      return comm.ireduceScatter(slot, slot + s.rank * bytes, len, c.type, c.op);
    case CollectiveKind::AllReduce: return comm.iallReduce(slot, slot, len, c.type, c.op);
    case CollectiveKind::Broadcast: break;
    default: break;
  }
  return comm.ibroadcast(slot, slot, len, c.type, c.root);
}

// Enqueues the copies of chunk [first, first + len)'s result from `slot` to the caller.
void stageOut(DeviceQueue& e, const Shape& s, const std::byte* slot, size_t first, size_t len) {
  const size_t bytes = len * s.elem;
  switch (s.call.kind) {
    case CollectiveKind::AllGather:
      for (int r = 0; r < s.n; ++r)
        if (!s.inPlace || r != s.rank)
          e.copy(s.recv(r * s.call.count + first), slot + r * bytes, bytes);
      break;
    case CollectiveKind::ReduceScatter: e.copy(s.recv(first), slot + s.rank * bytes, bytes); break;
    case CollectiveKind::AllReduce: e.copy(s.recv(first), slot, bytes); break;
    case CollectiveKind::Broadcast:
      if (!s.inPlace || s.rank != s.call.root) e.copy(s.recv(first), slot, bytes);
      break;
    default: break;
  }
}

// The stages of the pipeline; chunks [retired, collected) are copying out, [collected,
// posted) in their collective, [posted, staged) copying in.
struct Progress {
  size_t staged = 0, posted = 0, collected = 0, retired = 0;
};

// After a failure: lets the enqueued copies finish, and abandons the slots of collectives that
// may still write them.
void cleanUp(StagingPool& pool, const std::vector<Request>& requests, const Progress& p,
             std::chrono::milliseconds grace, const Shape& s) noexcept {
  const size_t slots = requests.size();
  try {
    DeviceQueue& e = pool.engine();
    e.wait(e.fence(), grace);
  } catch (const std::exception& ex) {
    SHARC_WARN(describe(s) << ": copies did not finish after a failure (" << ex.what()
                           << "); abandoning " << slots << " staging slots");
    for (size_t i = 0; i < slots; ++i) pool.abandon(i);
    return;
  }
  for (size_t k = p.collected; k < p.posted; ++k) {
    Request r = requests[k % slots];
    try {
      r.test();
    } catch (...) {
    }
    if (!r.isCompleted()) {
      SHARC_WARN(describe(s) << ": chunk " << k << "'s collective still pending after a failure; "
                             << "abandoning its staging slot");
      pool.abandon(k % slots);
    }
  }
}

}  // namespace

ChunkPlan planChunks(size_t count, DataType type, size_t chunkBytes) {
  const size_t elem = dataTypeSize(type);
  if (elem == 0) throw Error(Result::InvalidArgument, "planChunks: unknown data type");
  if (chunkBytes == 0) throw Error(Result::InvalidArgument, "planChunks: chunk of 0 bytes");
  ChunkPlan plan;
  plan.count = count;
  if (count == 0) return plan;
  const size_t most = std::max<size_t>(1, chunkBytes / elem);
  size_t len = ceilDiv(count, ceilDiv(count, most));  // near-equal chunks, <= most
  const size_t align = std::max<size_t>(1, 256 / elem);
  if (ceilDiv(len, align) * align <= most) len = ceilDiv(len, align) * align;
  plan.chunkElems = len;
  plan.chunks = ceilDiv(count, len);
  return plan;
}

StagingPool::StagingPool(DeviceQueue& copies, size_t slots) : copies_(copies) {
  if (slots == 0) throw Error(Result::InvalidArgument, "StagingPool: 0 slots");
  slots_.resize(slots);
}

void* StagingPool::slot(size_t i, size_t bytes) {
  QueueMemory& s = slots_.at(i);
  if (!s || s.bytes() < bytes) {
    s = QueueMemory();  // free first: the old and the new need not both fit
    s = copies_.allocateStaging(bytes);
  }
  return s.data();
}

size_t StagingPool::bytesHeld() const noexcept {
  size_t total = 0;
  for (const QueueMemory& s : slots_) total += s.bytes();
  return total;
}

void StagingPool::release() noexcept {
  for (QueueMemory& s : slots_) s = QueueMemory();
}

void StagingPool::abandon(size_t i) noexcept {
  if (i < slots_.size()) slots_[i].leak();
}

void runStaged(Communicator& comm, StagingPool& pool, const StagedCall& call, size_t chunkBytes,
               std::chrono::milliseconds timeout) {
  const int n = comm.size(), rank = comm.rank();
  const size_t elem = std::max<size_t>(dataTypeSize(call.type), 1);
  bool inPlace = false;
  if (call.count > 0) {
    const auto* recvBytes = static_cast<const std::byte*>(call.recv);
    const size_t block = call.count * elem;
    switch (call.kind) {
      case CollectiveKind::AllGather: inPlace = call.send == recvBytes + rank * block; break;
      case CollectiveKind::ReduceScatter:
        inPlace = recvBytes == static_cast<const std::byte*>(call.send) + rank * block;
        break;
      default: inPlace = call.send == call.recv; break;
    }
  }
  const Shape s{
      call,
      n,
      rank,
      elem,
      inPlace,
      call.kind == CollectiveKind::AllGather || call.kind == CollectiveKind::ReduceScatter};
  validate(s, chunkBytes);

  const bool bounded = timeout < std::chrono::hours(24 * 365 * 100);
  const auto start = Clock::now();
  if (call.count == 0) {
    // Nothing to stage, but the host call keeps every rank's sequence of collectives alike.
    const StagedCall none{call.kind, nullptr, nullptr, 0, call.type, call.op, call.root};
    post(comm, Shape{none, n, rank, elem, false, s.perRank}, nullptr, 0).wait(timeout);
    return;
  }

  const ChunkPlan plan = planChunks(call.count, call.type, chunkBytes);
  const size_t slots = std::min(pool.slots(), plan.chunks);
  const size_t slotBytes = plan.chunkElems * elem * (s.perRank ? static_cast<size_t>(n) : 1);
  std::vector<std::byte*> slot(slots);
  for (size_t i = 0; i < slots; ++i) slot[i] = static_cast<std::byte*>(pool.slot(i, slotBytes));
  DeviceQueue& e = pool.engine();
  std::vector<Request> requests(slots);
  std::vector<DeviceQueue::Ticket> copiedIn(slots), copiedOut(slots);
  Progress p;
  const size_t chunks = plan.chunks;

  try {
    for (unsigned idle = 0, rounds = 0; p.retired < chunks;) {
      if (bounded && (++rounds & 255) == 0 && Clock::now() - start > timeout) {
        const char* stage = p.retired < p.collected  ? "copies out"
                            : p.collected < p.posted ? "collective"
                                                     : "copies in";
        throw Error(Result::Timeout, describe(s) + ": chunk " + std::to_string(p.retired) + " of " +
                                         std::to_string(chunks) + " not finished after " +
                                         std::to_string(timeout.count()) + " ms (waiting for its " +
                                         stage + ")");
      }
      bool moved = false;
      // Oldest first, so that a slot freed here is reused below in the same round.
      if (p.retired < p.collected && e.done(copiedOut[p.retired % slots])) {
        ++p.retired;
        moved = true;
      }
      if (p.collected < p.posted && requests[p.collected % slots].test()) {
        const size_t k = p.collected++, i = k % slots;
        requests[i] = Request();
        stageOut(e, s, slot[i], plan.first(k), plan.length(k));
        copiedOut[i] = e.fence();
        moved = true;
      }
      if (p.posted < p.staged && e.done(copiedIn[p.posted % slots])) {
        const size_t k = p.posted++, i = k % slots;
        requests[i] = post(comm, s, slot[i], plan.length(k));
        moved = true;
      }
      // A slot is free to fill once its last chunk's copies out are enqueued: the copies in
      // run after them.
      if (p.staged < chunks && p.staged < p.collected + slots) {
        const size_t k = p.staged++, i = k % slots;
        stageIn(e, s, slot[i], plan.first(k), plan.length(k));
        copiedIn[i] = e.fence();
        moved = true;
      }
      if (moved) {
        idle = 0;
        continue;
      }
      // Spin briefly, then yield (the device queue and the peers need the cores), then sleep.
      ++idle;
      if (idle > 20000) {
        const timespec ts{0, 20000};
        nanosleep(&ts, nullptr);
      } else if (idle > 16) {
        sched_yield();
      }
    }
  } catch (...) {
    cleanUp(pool, requests, p, std::max(timeout, std::chrono::milliseconds(1000)), s);
    throw;
  }
}

void runStaged(Communicator& comm, DeviceQueue& copies, const StagedCall& call, size_t chunkBytes,
               std::chrono::milliseconds timeout) {
  StagingPool pool(copies);
  runStaged(comm, pool, call, chunkBytes, timeout);
}

}  // namespace sharc::gpu
