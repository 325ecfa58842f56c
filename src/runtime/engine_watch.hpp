// The watch thread of an engine: every 100 ms it makes progress when no call does (so an
// idle rank still answers stall probes and abort notices), sends the stall probes, writes the
// flight record on SIGUSR1 (SHARC_TRACE_SIGNAL=1) and serves it on a Unix socket
// (SHARC_TRACE_SOCKET). It exists only when one of those is on (the stall probe is, by
// default) and never touches the engine while a call holds its lock.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace sharc::detail {

class Engine;

class EngineWatch {
 public:
  /// Whether any feature needs the thread (from the configuration).
  static bool wanted();
  /// Starts the thread; the engine's world information must be set.
  explicit EngineWatch(Engine& engine);
  ~EngineWatch();
  EngineWatch(const EngineWatch&) = delete;
  EngineWatch& operator=(const EngineWatch&) = delete;

 private:
  void run();
  void tick();
  void openSocket();

  Engine& engine_;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  pid_t owner_;
  int busyTicks_ = 0;
  uint64_t signalsSeen_ = 0;
  int listenFd_ = -1;
  std::string socketPath_;
  std::thread thread_;  // last: starts after everything above is initialised
};

}  // namespace sharc::detail
