// NCCL-style logging: "host:pid:rank [level] message" on stderr, filtered by SHARC_DEBUG.
#pragma once

#include <sstream>
#include <string>

#include "config.hpp"

namespace sharc::core {

/// True when messages of `level` are printed.
bool logEnabled(LogLevel level) noexcept;
/// Sets the rank shown in the prefix (the world rank of the first communicator created).
void setLogRank(int rank) noexcept;
/// Writes one line; never throws.
void logLine(LogLevel level, const std::string& message) noexcept;

/// Receives every enabled log line instead of stderr (the NCCL plugin hands them to NCCL's
/// logger, which adds its own host:pid:tid prefix). nullptr restores stderr.
using LogSink = void (*)(LogLevel level, const char* message);
void setLogSink(LogSink sink) noexcept;

}  // namespace sharc::core

// Stream-style logging; the message is only formatted when the level is enabled.
#define SHARC_LOG(level, expr)                                                     \
  do {                                                                             \
    if (::sharc::core::logEnabled(::sharc::core::LogLevel::level)) {               \
      std::ostringstream sharc_log_os_;                                            \
      sharc_log_os_ << expr;                                                       \
      ::sharc::core::logLine(::sharc::core::LogLevel::level, sharc_log_os_.str()); \
    }                                                                              \
  } while (0)
#define SHARC_WARN(expr) SHARC_LOG(Warn, expr)
#define SHARC_INFO(expr) SHARC_LOG(Info, expr)
#define SHARC_TRACE(expr) SHARC_LOG(Trace, expr)
