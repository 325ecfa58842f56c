#include "plugin_support.hpp"

#include <atomic>

#include "core/log.hpp"

namespace sharc::nccl {
namespace {

std::atomic<ncclDebugLogger_t> gLogger{nullptr};

void toNccl(core::LogLevel level, const char* message) {
  ncclDebugLogger_t logger = gLogger.load();
  if (logger == nullptr) return;
  const ncclDebugLogLevel nlevel = level == core::LogLevel::Warn   ? NCCL_LOG_WARN
                                   : level == core::LogLevel::Info ? NCCL_LOG_INFO
                                                                   : NCCL_LOG_TRACE;
  logger(nlevel, NCCL_NET | NCCL_INIT, "sharc", 0, "NET/sharc %s", message);
}

}  // namespace

void installNcclLogger(ncclDebugLogger_t logger) noexcept {
  gLogger.store(logger);
  core::setLogSink(logger != nullptr ? &toNccl : nullptr);
}

void warn(const std::string& message) noexcept {
  ncclDebugLogger_t logger = gLogger.load();
  if (logger != nullptr)
    logger(NCCL_LOG_WARN, NCCL_NET, "sharc", 0, "%s", message.c_str());
  else
    core::logLine(core::LogLevel::Warn, message);
}

ncclResult_t toNcclResult(Result code) noexcept {
  switch (code) {
    case Result::Success: return ncclSuccess;
    case Result::UnhandledSystemError:
    case Result::SystemError:
    case Result::Timeout: return ncclSystemError;
    case Result::InternalError: return ncclInternalError;
    case Result::InvalidArgument: return ncclInvalidArgument;
    case Result::InvalidUsage: return ncclInvalidUsage;
    case Result::RemoteError: return ncclRemoteError;
    case Result::InProgress: return ncclInProgress;
  }
  return ncclInternalError;
}

}  // namespace sharc::nccl
