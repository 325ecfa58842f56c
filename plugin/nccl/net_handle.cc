#include "net_handle.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sharc/error.hpp>

#include "core/hash.hpp"

namespace sharc::nccl {
namespace {

constexpr uint32_t kHandleMagic = 0x4e524853;   // "SHRN"
constexpr uint32_t kConnectMagic = 0x43524853;  // "SHRC"
constexpr uint32_t kAcceptMagic = 0x41524853;   // "SHRA"
constexpr uint16_t kWireVersion = 1;

// Fixed little-endian layouts (every platform NCCL runs on is little-endian).
struct WireHandle {
  uint32_t magic;
  uint16_t version;
  uint16_t addressBytes;
  uint64_t listenId;
  uint64_t host;
  uint32_t pid;
  uint32_t checksum;  // FNV-1a of the whole handle with this field zero
  char address[kMaxHandleAddress];
};
static_assert(sizeof(WireHandle) == kHandleBytes);

struct WireConnect {
  uint32_t magic;
  uint16_t version;
  uint16_t addressBytes;
  uint64_t sendCommId;
  uint64_t host;
  uint32_t pid;
  uint32_t reserved;
  char address[kConnectRequestBytes - 32];
};
static_assert(sizeof(WireConnect) == kConnectRequestBytes);

struct WireAccept {
  uint32_t magic;
  uint32_t reserved;
  uint64_t recvCommId;
};
static_assert(sizeof(WireAccept) == kAcceptReplyBytes);

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string pidNamespace() {
  char buf[128] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

uint64_t localHostId() {
  static const uint64_t host = core::fnv1a64(
      pidNamespace(), core::fnv1a64(readFirstLine("/proc/sys/kernel/random/boot_id")));
  return host;
}

ProcessIdentity localIdentity() {
  return {localHostId(), static_cast<uint32_t>(getpid())};
}

bool peerProcessAlive(const ProcessIdentity& peer) {
  if (peer.host != localHostId() || peer.pid == 0) return true;  // cannot tell
  return kill(static_cast<pid_t>(peer.pid), 0) == 0 || errno != ESRCH;
}

void encodeHandle(const ListenHandle& handle, void* out) {
  if (handle.address.size() > kMaxHandleAddress)
    throw Error(Result::InvalidArgument, "endpoint address of " +
                                             std::to_string(handle.address.size()) +
                                             " bytes does not fit a handle (at most " +
                                             std::to_string(kMaxHandleAddress) + ")");
  WireHandle w{};
  w.magic = kHandleMagic;
  w.version = kWireVersion;
  w.addressBytes = static_cast<uint16_t>(handle.address.size());
  w.listenId = handle.listenId;
  w.host = handle.owner.host;
  w.pid = handle.owner.pid;
  std::memcpy(w.address, handle.address.data(), handle.address.size());
  w.checksum = core::fnv1a32(&w, sizeof(w));
  std::memcpy(out, &w, sizeof(w));
}

ListenHandle decodeHandle(const void* in) {
  if (in == nullptr) throw Error(Result::InvalidArgument, "handle is NULL");
  WireHandle w;
  std::memcpy(&w, in, sizeof(w));
  if (w.magic != kHandleMagic)
    throw Error(Result::InvalidArgument, "not a sharc listen handle (magic mismatch)");
  if (w.version != kWireVersion)
    throw Error(Result::InvalidArgument, "listen handle version " + std::to_string(w.version) +
                                             ", expected " + std::to_string(kWireVersion));
  if (w.addressBytes == 0 || w.addressBytes > kMaxHandleAddress)
    throw Error(Result::InvalidArgument, "listen handle address length " +
                                             std::to_string(w.addressBytes) + ", expected 1.." +
                                             std::to_string(kMaxHandleAddress));
  const uint32_t sum = w.checksum;
  w.checksum = 0;
  if (core::fnv1a32(&w, sizeof(w)) != sum)
    throw Error(Result::InvalidArgument, "listen handle checksum mismatch (corrupted handle)");
  ListenHandle h;
  h.address.assign(w.address, w.addressBytes);
  h.listenId = w.listenId;
  h.owner = {w.host, w.pid};
  return h;
}

std::string encodeConnectRequest(const ConnectRequest& request) {
  WireConnect w{};
  if (request.address.size() > sizeof(w.address))
    throw Error(Result::InvalidArgument, "endpoint address too long for a connect request");
  w.magic = kConnectMagic;
  w.version = kWireVersion;
  w.addressBytes = static_cast<uint16_t>(request.address.size());
  w.sendCommId = request.sendCommId;
  w.host = request.sender.host;
  w.pid = request.sender.pid;
  std::memcpy(w.address, request.address.data(), request.address.size());
  return std::string(reinterpret_cast<const char*>(&w), sizeof(w));
}

ConnectRequest decodeConnectRequest(const void* data, size_t bytes) {
  WireConnect w;
  if (bytes != sizeof(w))
    throw Error(Result::InvalidArgument, "connect request of " + std::to_string(bytes) +
                                             " bytes, expected " + std::to_string(sizeof(w)));
  std::memcpy(&w, data, sizeof(w));
  if (w.magic != kConnectMagic || w.version != kWireVersion || w.addressBytes == 0 ||
      w.addressBytes > sizeof(w.address))
    throw Error(Result::InvalidArgument, "malformed connect request");
  ConnectRequest r;
  r.address.assign(w.address, w.addressBytes);
  r.sendCommId = w.sendCommId;
  r.sender = {w.host, w.pid};
  return r;
}

std::string encodeAcceptReply(uint64_t recvCommId) {
  WireAccept w{kAcceptMagic, 0, recvCommId};
  return std::string(reinterpret_cast<const char*>(&w), sizeof(w));
}

uint64_t decodeAcceptReply(const void* data, size_t bytes) {
  WireAccept w;
  if (bytes != sizeof(w)) throw Error(Result::InvalidArgument, "malformed accept reply (size)");
  std::memcpy(&w, data, sizeof(w));
  if (w.magic != kAcceptMagic) throw Error(Result::InvalidArgument, "malformed accept reply");
  return w.recvCommId;
}

}  // namespace sharc::nccl
