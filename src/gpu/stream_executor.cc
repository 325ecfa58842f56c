// StreamExecutor (stream_executor.hpp): the worker that runs stream-ordered collectives.
#include "gpu/stream_executor.hpp"

#include <pthread.h>
#include <unistd.h>

#include <sharc/cuda.hpp>

#include "core/collective.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/cuda_device_queue.hpp"
#include "gpu/ipc_collective.hpp"
#include "gpu/staged_collective.hpp"

namespace sharc::gpu {

namespace {
std::string where(const Communicator& comm, const StreamCall& call) {
  return "rank " + std::to_string(comm.rank()) + ": " + core::collectiveName(call.kind) +
         "(stream)";
}
}  // namespace

StreamExecutor::StreamExecutor(std::shared_ptr<Communicator> comm,
                               std::chrono::milliseconds timeout, DevicePathFn devicePath)
    : comm_(std::move(comm)),
      timeout_(timeout),
      devicePath_(std::move(devicePath)),
      gate_(timeout) {
  worker_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "sharc-queue");  // named for ps, gdb and leak checks
    work();
  });
}

StreamExecutor::~StreamExecutor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
  // Staging pools before their engines (a pool frees through its engine).
  for (auto& [device, s] : staging_) s.pool.reset();
}

void StreamExecutor::enqueue(const StreamCall& call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_ != Result::Success)
      throw Error(error_, where(*comm_, call) +
                              ": an earlier stream-ordered call failed: " + errorMessage_);
  }
  DeviceGuard guard(call.device);
  auto p = std::make_unique<Pending>();
  p->call = call;
  p->ready.record(call.stream);
  {
    // Tickets, gates and the queue advance together, so the gate opens in queue order even
    // when several threads queue at once.
    std::lock_guard<std::mutex> lock(mu_);
    p->ticket = queued_ + 1;
    gate_.hold(call.stream, p->ticket);
    queued_ = p->ticket;
    queue_.push_back(std::move(p));
  }
  changed_.notify_all();
}

Result StreamExecutor::asyncError(std::string* message) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (message) *message = errorMessage_;
  return error_;
}

void StreamExecutor::synchronize(std::chrono::milliseconds timeout) {
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));
  std::unique_lock<std::mutex> lock(mu_);
  const uint32_t target = queued_;
  const bool done = changed_.wait_for(
      lock, timeout, [&] { return static_cast<int32_t>(finished_ - target) >= 0; });
  if (error_ != Result::Success)
    throw Error(error_, "rank " + std::to_string(comm_->rank()) +
                            ": a stream-ordered call failed: " + errorMessage_);
  if (!done)
    throw Error(Result::Timeout, "rank " + std::to_string(comm_->rank()) +
                                     ": stream-ordered calls still running after " +
                                     std::to_string(timeout.count()) + " ms");
}

void StreamExecutor::fail(const std::string& message) {
  SHARC_WARN(message);
  std::lock_guard<std::mutex> lock(mu_);
  if (error_ == Result::Success) {
    error_ = Result::RemoteError;
    errorMessage_ = message;
  }
}

void StreamExecutor::work() {
  for (;;) {
    std::unique_ptr<Pending> p;
    bool failed = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      p = std::move(queue_.front());
      queue_.pop_front();
      failed = error_ != Result::Success;
    }
    // After a failure the worker's communicator is in an unknown state: later calls only
    // release their streams (enqueue refuses new ones).
    if (!failed) {
      try {
        execute(*p);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_ == Result::Success) {
          error_ = e.code();
          errorMessage_ = where(*comm_, p->call) + ": " + e.what();
        }
        SHARC_WARN(errorMessage_);
      } catch (const std::exception& e) {
        fail(where(*comm_, p->call) + ": " + e.what());
      }
    }
    gate_.release(p->ticket);
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = p->ticket;
    }
    changed_.notify_all();
  }
}

std::vector<CallDescriptor> StreamExecutor::exchange(const StreamCall& call, CallDescriptor mine) {
  const int n = comm_->size();
  std::vector<CallDescriptor> all(static_cast<size_t>(n));
  comm_->iallGather(&mine, all.data(), sizeof(CallDescriptor), DataType::Uint8).wait(timeout_);
  // Every rank must have made the same call: say which rank did not, and what it did.
  for (int r = 0; r < n; ++r) {
    const CallDescriptor& d = all[static_cast<size_t>(r)];
    if (d.kind != mine.kind || d.type != mine.type || d.count != mine.count ||
        (call.kind != CollectiveKind::AllGather && call.kind != CollectiveKind::Broadcast &&
         d.op != mine.op) ||
        (call.kind == CollectiveKind::Broadcast && d.root != mine.root))
      throw Error(Result::InvalidUsage,
                  "mismatched stream-ordered calls: this rank called " +
                      std::string(core::collectiveName(call.kind)) + " of " +
                      std::to_string(mine.count) + " " + dataTypeName(call.type) + ", rank " +
                      std::to_string(r) + " called " +
                      core::collectiveName(static_cast<CollectiveKind>(d.kind)) + " of " +
                      std::to_string(d.count) + " " + dataTypeName(static_cast<DataType>(d.type)) +
                      " (op " + redOpName(static_cast<RedOp>(d.op)) + ", root " +
                      std::to_string(d.root) + ")");
  }
  return all;
}

void StreamExecutor::execute(Pending& p) {
  const StreamCall& call = p.call;
  DeviceGuard guard(call.device);
  p.ready.waitFor(static_cast<long>(timeout_.count()), "the work queued before the call");

  CallDescriptor mine;
  mine.hostId = localHostId();
  mine.pid = static_cast<int32_t>(getpid());
  mine.device = call.device;
  mine.count = call.count;
  mine.root = call.root;
  mine.kind = static_cast<uint8_t>(call.kind);
  mine.type = static_cast<uint8_t>(call.type);
  mine.op = static_cast<uint8_t>(call.op);
  mine.sendAddress = reinterpret_cast<uintptr_t>(call.send);
  mine.recvAddress = reinterpret_cast<uintptr_t>(call.recv);
  const bool readsSend = call.kind != CollectiveKind::Broadcast || call.root == comm_->rank();
  if (core::Config::get().cudaIpc && memoryKind(call.recv) == MemoryKind::Device &&
      (!readsSend || memoryKind(call.send) == MemoryKind::Device)) {
    try {
      if (readsSend) mine.send = exportIpcBuffer(call.send);
      mine.recv = exportIpcBuffer(call.recv);
      mine.ipcReady = 1;
    } catch (const Error& e) {  // e.g. memory from cudaMallocAsync pools: no legacy IPC
      SHARC_INFO(where(*comm_, call) << ": no CUDA IPC handle, staging instead: " << e.what());
    }
  }
  const std::vector<CallDescriptor> all = exchange(call, mine);

  bool ipc = true;
  for (const CallDescriptor& d : all) ipc = ipc && d.ipcReady && d.hostId == mine.hostId;
  const bool onDevice = memoryKind(call.recv) == MemoryKind::Device &&
                        (!readsSend || memoryKind(call.send) == MemoryKind::Device);
  const bool direct =
      !ipc && devicePath_ && onDevice && core::Config::get().devicePath == core::DevicePath::Direct;
  SHARC_TRACE(where(*comm_, call) << ": " << call.count << " " << dataTypeName(call.type) << " via "
                                  << (ipc      ? "cuda ipc"
                                      : direct ? "the device path"
                                               : "host staging"));
  if (ipc) {
    auto& path = ipc_[call.device];
    if (!path) path = std::make_unique<IpcCollective>(call.device);
    path->run(*comm_, call, all, timeout_);
  } else if (direct) {
    devicePath_(call);
  } else {
    runStagedPath(call);
  }
}

void StreamExecutor::runStagedPath(const StreamCall& call) {
  Staging& s = staging_[call.device];
  if (!s.copies) {
    s.copies = std::make_unique<CudaDeviceQueue>(call.device);
    s.pool = std::make_unique<StagingPool>(*s.copies);
  }
  StagedCall staged{call.kind, call.send, call.recv, call.count, call.type, call.op, call.root};
  runStaged(*comm_, *s.pool, staged, core::Config::get().gpuStagingChunkBytes, timeout_);
}

}  // namespace sharc::gpu
