// RAII ownership of libfabric objects: every fid is closed by fi_close exactly once.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <memory>
#include <string>

namespace sharc::transport {

struct FidCloser {
  void operator()(fid* f) const noexcept;
};
template <typename T>
struct FiCloser {
  void operator()(T* obj) const noexcept { FidCloser{}(obj ? &obj->fid : nullptr); }
};
template <typename T>
using FiPtr = std::unique_ptr<T, FiCloser<T>>;

struct FiInfoDeleter {
  void operator()(fi_info* info) const noexcept { fi_freeinfo(info); }
};
using FiInfoPtr = std::unique_ptr<fi_info, FiInfoDeleter>;

/// "fi_foo failed: <fi_strerror> (-N)" for throwing during setup.
std::string fiErrorMessage(const char* call, int rc);
/// Throws sharc::Error(UnhandledSystemError) when rc < 0.
void checkFi(int rc, const char* call);

}  // namespace sharc::transport
