// What the NCCL plugin's peers exchange to connect: the 128-byte listen handle NCCL carries
// between ranks, and the connect / accept control messages sent over the fabric. Every
// received byte is validated before use: a malformed handle or message is an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sharc::nccl {

/// Which process on which host: lets a peer on the same host tell that we exited.
struct ProcessIdentity {
  uint64_t host = 0;  ///< hash of the boot id and the pid namespace
  uint32_t pid = 0;
};
/// This host (boot id and pid namespace); cheap after the first call.
uint64_t localHostId();
/// This process (a getpid() system call: not for the hot path).
ProcessIdentity localIdentity();
/// False only when `peer` runs on this host (same boot and pid namespace) and has exited.
bool peerProcessAlive(const ProcessIdentity& peer);

/// The content of a listen handle.
struct ListenHandle {
  std::string address;  ///< the listener's fabric endpoint address
  uint64_t listenId = 0;
  ProcessIdentity owner;
};
inline constexpr size_t kHandleBytes = 128;
/// Largest endpoint address a handle carries.
inline constexpr size_t kMaxHandleAddress = 96;

/// Writes kHandleBytes bytes; throws InvalidArgument when the address does not fit.
void encodeHandle(const ListenHandle& handle, void* out);
/// Throws sharc::Error(InvalidArgument) saying what is wrong (magic, version, length,
/// checksum) for bytes that are not a handle this plugin wrote.
ListenHandle decodeHandle(const void* in);

/// Sent by connect to the listener: who connects, and where to send the reply.
struct ConnectRequest {
  std::string address;  ///< the connecting side's fabric address
  uint64_t sendCommId = 0;
  ProcessIdentity sender;
};
inline constexpr size_t kConnectRequestBytes = 256;
std::string encodeConnectRequest(const ConnectRequest& request);
/// Throws InvalidArgument on a malformed message (`bytes` received).
ConnectRequest decodeConnectRequest(const void* data, size_t bytes);

/// The listener's reply: the id its receiving comm matches data on.
inline constexpr size_t kAcceptReplyBytes = 16;
std::string encodeAcceptReply(uint64_t recvCommId);
uint64_t decodeAcceptReply(const void* data, size_t bytes);

}  // namespace sharc::nccl
