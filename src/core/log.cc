#include "log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace sharc::core {
namespace {
std::atomic<int> gRank{-1};
std::atomic<LogSink> gSink{nullptr};

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Trace: return "TRACE";
    case LogLevel::None: break;
  }
  return "";
}
}  // namespace

bool logEnabled(LogLevel level) noexcept {
  try {
    return static_cast<int>(level) <= static_cast<int>(Config::get().logLevel);
  } catch (...) {
    return level == LogLevel::Warn;  // a malformed SHARC_DEBUG still lets warnings through
  }
}

void setLogRank(int rank) noexcept {
  int expected = -1;
  gRank.compare_exchange_strong(expected, rank);
}

void setLogSink(LogSink sink) noexcept {
  gSink.store(sink);
}

void logLine(LogLevel level, const std::string& message) noexcept {
  if (LogSink sink = gSink.load()) {
    sink(level, message.c_str());
    return;
  }
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  // One fprintf per line so lines from several threads do not interleave.
  std::fprintf(stderr, "%s:%d:%d [sharc %s] %s\n", host, static_cast<int>(getpid()), gRank.load(),
               levelName(level), message.c_str());
}

}  // namespace sharc::core
