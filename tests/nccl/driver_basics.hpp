// The basics every NCCL plugin test driver shares: result names, the failure helpers,
// NCCL's logger (which keeps what the plugin logged, for tests to check) and deadlines.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "nccl_abi.h"

namespace sharc::testing::nccl {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline const char* resultName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
  }
  return "ncclResult_t(?)";
}

[[noreturn]] inline void fail(const std::string& what) {
  throw std::runtime_error(what);
}

// Throws (failing the rank) when a plugin call does not return ncclSuccess.
#define NET_CHECK(call)                                                                  \
  do {                                                                                   \
    const ncclResult_t netCheckResult_ = (call);                                         \
    if (netCheckResult_ != ncclSuccess)                                                  \
      ::sharc::testing::nccl::fail(std::string(#call) + " returned " +                   \
                                   ::sharc::testing::nccl::resultName(netCheckResult_) + \
                                   " (" __FILE__ ":" + std::to_string(__LINE__) + ")");  \
  } while (0)

/// What the plugin logged in this process since the last takeLog(), one line per message
/// (tests that check what a refusal says).
inline std::mutex& logMutex() {
  static std::mutex m;
  return m;
}
inline std::string& logText() {
  static std::string text;
  return text;
}
inline std::string takeLog() {
  std::lock_guard<std::mutex> lock(logMutex());
  return std::exchange(logText(), std::string());
}

/// NCCL's logger as the plugin sees it: printf-style, to stderr (and to logText()).
inline void netLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                      const char* fmt, ...) {
  char text[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  std::fprintf(stderr, "[pid %d] NCCL(level %d, flags 0x%lx) %s:%d %s\n",
               static_cast<int>(getpid()), static_cast<int>(level), flags, file ? file : "?", line,
               text);
  std::lock_guard<std::mutex> lock(logMutex());
  logText() += std::string(text) + "\n";
}

class Deadline {
 public:
  explicit Deadline(milliseconds d) : start_(Clock::now()), end_(start_ + d) {}
  bool expired() const { return Clock::now() > end_; }
  double elapsedS() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  Clock::time_point start_, end_;
};

}  // namespace sharc::testing::nccl
