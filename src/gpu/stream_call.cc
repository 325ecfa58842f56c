// Helpers of stream_call.hpp.
#include "gpu/stream_call.hpp"

#include <unistd.h>

#include <fstream>

#include "core/config.hpp"
#include "core/hash.hpp"

namespace sharc::gpu {

uint64_t localHostId() {
  static const uint64_t id = [] {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::string bootId;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
    // An emulated node (SHARC_NODE_ID) counts as a host of its own, as it does for the engine.
    const std::string text = std::string(host) + "/" + bootId + "/" + core::Config::get().nodeId;
    return core::fnv1a64(text);
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
