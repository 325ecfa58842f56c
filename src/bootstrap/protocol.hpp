// Wire format between bootstrap clients (tcp_bootstrap.cc) and the root server
// (root_server.cc). All integers are little-endian, written byte by byte.
//
//   client -> root  hello: {u32 kHelloMagic, u32 kVersion, u64 token, i32 rank, i32 nranks}
//   root -> client  ack:   {u32 kAckMagic, u32 nranks}
//   client -> root  blob:  {u32 length, length bytes}            (one per allGather round)
//   root -> client  round: {u32 kRoundMagic, u32 round, u32 nranks} + nranks x {u32 len, bytes}
//   root -> client  abort: {u32 kAbortMagic, u32 length, length bytes of text}
//
// An abort frame may replace the ack (the hello was rejected) or any later round result (the
// job failed); the root closes the connection after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sharc::bootstrap::protocol {

constexpr uint32_t kHelloMagic = 0x43524853;  // "SHRC"
constexpr uint32_t kAckMagic = 0x4b434153;    // "SACK"
constexpr uint32_t kRoundMagic = 0x444e5253;  // "SRND"
constexpr uint32_t kAbortMagic = 0x54424153;  // "SABT"
constexpr uint32_t kVersion = 1;

constexpr size_t kHelloBytes = 24;
constexpr size_t kMaxAbortText = 4096;
/// Upper bound on nranks accepted in a hello (keeps every allocation bounded).
constexpr int32_t kMaxRanks = 1 << 20;

inline void putU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void putU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline uint32_t getU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
inline uint64_t getU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

struct Hello {
  uint32_t magic = kHelloMagic;
  uint32_t version = kVersion;
  uint64_t token = 0;
  int32_t rank = -1;
  int32_t nranks = 0;

  std::string encode() const {
    std::string out;
    putU32(out, magic);
    putU32(out, version);
    putU64(out, token);
    putU32(out, static_cast<uint32_t>(rank));
    putU32(out, static_cast<uint32_t>(nranks));
    return out;
  }
  static Hello decode(const char* p) {  // p: kHelloBytes bytes
    Hello h;
    h.magic = getU32(p);
    h.version = getU32(p + 4);
    h.token = getU64(p + 8);
    h.rank = static_cast<int32_t>(getU32(p + 16));
    h.nranks = static_cast<int32_t>(getU32(p + 20));
    return h;
  }
};

inline std::string abortFrame(const std::string& text) {
  const std::string body = text.substr(0, kMaxAbortText);
  std::string out;
  putU32(out, kAbortMagic);
  putU32(out, static_cast<uint32_t>(body.size()));
  return out + body;
}

}  // namespace sharc::bootstrap::protocol
