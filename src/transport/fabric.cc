#include "fabric.hpp"

#include <rdma/fi_errno.h>

#include <sharc/error.hpp>

#include "core/log.hpp"

namespace sharc::transport {

void FidCloser::operator()(fid* f) const noexcept {
  if (f == nullptr) return;
  const int rc = fi_close(f);
  if (rc != 0) SHARC_WARN("fi_close failed: " << fi_strerror(-rc));
}

std::string fiErrorMessage(const char* call, int rc) {
  return std::string(call) + " failed: " + fi_strerror(rc < 0 ? -rc : rc) + " (" +
         std::to_string(rc) + ")";
}

void checkFi(int rc, const char* call) {
  if (rc < 0) throw Error(Result::UnhandledSystemError, fiErrorMessage(call, rc));
}

}  // namespace sharc::transport
