// What every entry point of the NCCL plugin shares: NCCL's logger, the mapping from sharc
// errors to ncclResult_t, and the guard that keeps exceptions from crossing the C ABI.
#pragma once

#include <sharc/error.hpp>
#include <string>

#include "nccl_abi.h"

namespace sharc::nccl {

/// Routes sharc's log lines (the engine's included) to NCCL's logger; SHARC_DEBUG still
/// chooses what sharc logs, NCCL_DEBUG what NCCL prints of it. nullptr: back to stderr.
void installNcclLogger(ncclDebugLogger_t logger) noexcept;

/// Logs a warning through NCCL's logger (or stderr before init).
void warn(const std::string& message) noexcept;

/// The ncclResult_t NCCL expects for a sharc result code.
ncclResult_t toNcclResult(Result code) noexcept;

/// Runs `body` (returning ncclResult_t); a sharc::Error or any other exception becomes a
/// warning naming `call` and the matching ncclResult_t. Nothing escapes to NCCL.
template <typename Body>
ncclResult_t guarded(const char* call, Body&& body) noexcept {
  try {
    return body();
  } catch (const Error& e) {
    warn(std::string("NET/sharc ") + call + ": " + e.what());
    return toNcclResult(e.code());
  } catch (const std::exception& e) {
    warn(std::string("NET/sharc ") + call + ": " + e.what());
    return ncclInternalError;
  } catch (...) {
    warn(std::string("NET/sharc ") + call + ": unknown exception");
    return ncclInternalError;
  }
}

}  // namespace sharc::nccl
