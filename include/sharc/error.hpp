/// \file
/// Result codes and the exception type of sharc's C++ API.
#pragma once

#include <stdexcept>
#include <string>

namespace sharc {

/// Result codes; numeric values equal the C API's sharcResult_t.
enum class Result : int {
  Success = 0,
  UnhandledSystemError = 1,  ///< a library below sharc (libfabric, the OS) failed unexpectedly
  SystemError = 2,           ///< a system call or network operation failed (peer gone, refused)
  InternalError = 3,         ///< a bug in sharc
  InvalidArgument = 4,       ///< an argument is wrong (null buffer, unknown type, overflow)
  InvalidUsage = 5,          ///< a call is wrong in context (destroyed communicator, mismatch)
  RemoteError = 6,           ///< another rank failed or aborted the collective
  InProgress = 7,            ///< a non-blocking operation has not completed yet
  Timeout = 8,               ///< a bounded wait expired (SHARC_TIMEOUT_MS)
};

/// Short description of a result code ("invalid argument", ...).
const char* resultString(Result r) noexcept;

/// The exception every C++ entry point throws on failure; what() names the rank, the call
/// and what was expected.
class Error : public std::runtime_error {
 public:
  Error(Result code, const std::string& message) : std::runtime_error(message), code_(code) {}
  /// The result code the C API returns for this error.
  Result code() const noexcept { return code_; }

 private:
  Result code_;
};

}  // namespace sharc
