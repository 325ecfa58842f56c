#include <sharc/error.hpp>

namespace sharc {

const char* resultString(Result r) noexcept {
  switch (r) {
    case Result::Success: return "no error";
    case Result::UnhandledSystemError: return "unhandled system error";
    case Result::SystemError: return "system error";
    case Result::InternalError: return "internal error";
    case Result::InvalidArgument: return "invalid argument";
    case Result::InvalidUsage: return "invalid usage";
    case Result::RemoteError: return "remote error";
    case Result::InProgress: return "in progress";
    case Result::Timeout: return "timeout";
  }
  return "unknown result";
}

}  // namespace sharc
