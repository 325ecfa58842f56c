// Runs a communicator's stream-ordered collectives. The caller's thread only queues: an
// event marks where the call's inputs are ready on its stream, and a gate (stream_gate.hpp)
// holds back the stream's later work. A worker thread takes the calls in order, waits for
// each one's event, runs it (CUDA IPC when every rank is on this host with device buffers,
// staging through pinned host memory otherwise) over a communicator of its own, and opens
// the gate. Every rank agrees on the path from the descriptors all ranks exchange first.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sharc/communicator.hpp>
#include <string>
#include <thread>

#include "gpu/cuda_resources.hpp"
#include "gpu/stream_call.hpp"
#include "gpu/stream_gate.hpp"

namespace sharc::core {
class DeviceQueue;
}

namespace sharc::gpu {

using core::DeviceQueue;
class IpcCollective;
class StagingPool;

class StreamExecutor {
 public:
  /// Runs a call between hosts on the engine's device path (SHARC_DEVICE_PATH=direct) and
  /// returns once it has finished; throws sharc::Error when it failed.
  using DevicePathFn = std::function<void(const StreamCall&)>;
  /// `comm` is used by the worker alone (a duplicate of the caller's communicator, so its
  /// calls never interleave with the caller's own). `timeout` bounds each call. Calls that
  /// CUDA IPC cannot carry take `devicePath` where set and their buffers are device memory,
  /// else the staging pipeline.
  StreamExecutor(std::shared_ptr<Communicator> comm, std::chrono::milliseconds timeout,
                 DevicePathFn devicePath = {});
  /// Lets queued calls finish (each bounded by the timeout), then stops the worker.
  ~StreamExecutor();
  StreamExecutor(const StreamExecutor&) = delete;
  StreamExecutor& operator=(const StreamExecutor&) = delete;

  /// Queues `call` on its stream (see the file comment). Throws the first asynchronous
  /// failure if one happened, or sharc::Error for a CUDA failure while queuing.
  void enqueue(const StreamCall& call);
  /// Success, or the first failure of a call after enqueue returned.
  Result asyncError(std::string* message) const;
  /// Waits until every call queued so far has finished on the host side.
  void synchronize(std::chrono::milliseconds timeout);

 private:
  struct Pending {
    StreamCall call;
    Event ready;
    uint32_t ticket = 0;
  };
  void work();
  void execute(Pending& p);
  std::vector<CallDescriptor> exchange(const StreamCall& call, CallDescriptor mine);
  void runStagedPath(const StreamCall& call);
  void fail(const std::string& message);

  std::shared_ptr<Communicator> comm_;
  const std::chrono::milliseconds timeout_;
  DevicePathFn devicePath_;
  StreamGate gate_;
  // Per device, used by the worker alone: the IPC path, and the staging path's device queue
  // with its pinned staging (allocated once, grown when a call needs more).
  struct Staging {
    std::unique_ptr<DeviceQueue> copies;
    std::unique_ptr<StagingPool> pool;
  };
  std::map<int, std::unique_ptr<IpcCollective>> ipc_;
  std::map<int, Staging> staging_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Pending>> queue_;
  uint32_t queued_ = 0;    // tickets handed out
  uint32_t finished_ = 0;  // tickets whose gate is open
  bool stopping_ = false;
  Result error_ = Result::Success;
  std::string errorMessage_;
  std::thread worker_;
};

}  // namespace sharc::gpu
