// sharc::allocShared / freeShared: the public face of transport/shared_buffers.
#include <sharc/error.hpp>
#include <sharc/memory.hpp>
#include <sstream>

#include "transport/shared_buffers.hpp"

namespace sharc {

void* allocShared(size_t bytes) {
  return transport::allocShared(bytes);
}

void freeShared(void* p) {
  if (!transport::freeShared(p)) {
    std::ostringstream what;
    what << "freeShared: " << p << " was not returned by allocShared";
    throw Error(Result::InvalidArgument, what.str());
  }
}

}  // namespace sharc
