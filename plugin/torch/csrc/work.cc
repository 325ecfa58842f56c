#include "work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>
#include <sched.h>
#include <time.h>

#include <condition_variable>
#include <thread>

namespace sharc::torch_backend {
namespace {

// Completes works whose future someone holds: torch (DDP's reducer, comm hooks) waits on the
// future alone, and sharc progresses only when asked. One thread per process, started on first
// use and never joined (it owns nothing that must outlive the interpreter).
class ProgressThread {
 public:
  static ProgressThread& get() {
    static auto* instance = new ProgressThread();  // leaked: no destructor races at exit
    return *instance;
  }

  void add(c10::intrusive_ptr<SharcWork> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(std::move(work));
      if (!started_) {
        started_ = true;
        std::thread([this] { run(); }).detach();
      }
    }
    cv_.notify_one();
  }

 private:
  void run() {
    std::vector<c10::intrusive_ptr<SharcWork>> batch;
    int idle = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !pending_.empty(); });
        batch.swap(pending_);
      }
      // Advance outside the lock: finishing runs the future's callbacks, which may start
      // more operations and ask for their futures.
      bool finishedAny = false;
      std::vector<c10::intrusive_ptr<SharcWork>> still;
      for (auto& w : batch) {
        if (w->advance(false))
          finishedAny = true;
        else
          still.push_back(std::move(w));
      }
      batch.clear();
      if (!still.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& w : still) pending_.push_back(std::move(w));
      }
      // Back off while nothing finishes: the ranks' own threads need the cores.
      idle = finishedAny ? 0 : idle + 1;
      if (idle > 16) {
        const timespec ts{0, idle > 1000 ? 200000 : 20000};
        nanosleep(&ts, nullptr);
      } else if (idle > 0) {
        sched_yield();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<c10::intrusive_ptr<SharcWork>> pending_;
  bool started_ = false;
};

std::exception_ptr backendError(const std::string& call, const std::string& what) {
  return std::make_exception_ptr(c10::DistBackendError(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, "sharc " + call + ": " + what));
}

}  // namespace

SharcWork::SharcWork(int rank, c10d::OpType type, std::string call,
                     std::vector<sharc::Request> requests, std::vector<at::Tensor> outputs,
                     std::vector<at::Tensor> keepAlive, std::function<void()> onSuccess)
    : c10d::Work(rank, type),
      call_(std::move(call)),
      requests_(std::move(requests)),
      done_(requests_.size(), false),
      outputs_(std::move(outputs)),
      keepAlive_(std::move(keepAlive)),
      onSuccess_(std::move(onSuccess)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

// A work dropped before it finished (an exception between isend and wait, a discarded
// irecv) leaves operations that still read or write its tensors, here and on the peers: its
// requests and tensors go to the progress thread, which keeps them until the requests end.
SharcWork::~SharcWork() {
  std::vector<sharc::Request> pending;
  for (size_t i = 0; i < requests_.size(); ++i)
    if (!done_[i]) pending.push_back(requests_[i]);
  if (concluded_ || pending.empty()) return;
  try {
    ProgressThread::get().add(c10::make_intrusive<SharcWork>(
        rank_, opType_, call_ + " (dropped before it finished)", std::move(pending),
        std::move(outputs_), std::move(keepAlive_)));
  } catch (...) {  // a destructor must not throw; the tensors are then freed as before
  }
}

bool SharcWork::advance(bool block, std::chrono::milliseconds timeout) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(advanceMu_);
    if (concluded_) return true;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (size_t i = 0; i < requests_.size() && !error; ++i) {
      if (done_[i]) continue;
      try {
        if (!block) {
          if (!requests_[i].test()) return false;
        } else if (timeout.count() > 0) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
              deadline - std::chrono::steady_clock::now());
          requests_[i].wait(std::max(left, std::chrono::milliseconds(1)));
        } else {
          requests_[i].wait();
        }
        done_[i] = true;
      } catch (const sharc::Error& e) {
        if (block && timeout.count() > 0 && e.code() == sharc::Result::Timeout &&
            std::string(e.what()).find("still pending") != std::string::npos)
          throw c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                      "sharc " + call_ + ": wait timed out after " +
                                          std::to_string(timeout.count()) +
                                          " ms (the operation is still pending)");
        error = backendError(call_, e.what());
      }
    }
    if (!error && onSuccess_) {
      try {
        onSuccess_();
      } catch (const std::exception& e) {
        error = backendError(call_, e.what());
      }
    }
    concluded_ = true;
    error_ = error;
    requests_.clear();
    keepAlive_.clear();
  }
  // Outside the lock: the future's callbacks may take the GIL, which a thread asking
  // isCompleted() of this work may hold.
  finish(error);
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
  return true;
}

bool SharcWork::isCompleted() {
  return advance(false);
}

bool SharcWork::wait(std::chrono::milliseconds timeout) {
  advance(true, timeout);
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(advanceMu_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> SharcWork::getFuture() {
  bool registered = false;
  {
    std::lock_guard<std::mutex> lock(advanceMu_);
    registered = concluded_;
  }
  if (!registered) ProgressThread::get().add(c10::intrusive_ptr<SharcWork>::reclaim_copy(this));
  return future_;
}

c10::intrusive_ptr<SharcWork> finishedWork(int rank, c10d::OpType type, std::string call,
                                           std::vector<at::Tensor> outputs) {
  auto work = c10::make_intrusive<SharcWork>(rank, type, std::move(call),
                                             std::vector<sharc::Request>{}, std::move(outputs));
  work->advance(false);
  return work;
}

}  // namespace sharc::torch_backend
