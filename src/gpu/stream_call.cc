// Helpers of stream_call.hpp.
#include "gpu/stream_call.hpp"

#include <unistd.h>

#include <fstream>

namespace sharc::gpu {

uint64_t localHostId() {
  static const uint64_t id = [] {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::string bootId;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
    const std::string text = std::string(host) + "/" + bootId;
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
    return h;
  }();
  return id;
}

size_t sendBytes(const StreamCall& call, int nranks) {
  const size_t bytes = call.count * dataTypeSize(call.type);
  return call.kind == CollectiveKind::ReduceScatter ? bytes * static_cast<size_t>(nranks) : bytes;
}

size_t recvBytes(const StreamCall& call, int nranks) {
  const size_t bytes = call.count * dataTypeSize(call.type);
  return call.kind == CollectiveKind::AllGather ? bytes * static_cast<size_t>(nranks) : bytes;
}

}  // namespace sharc::gpu
