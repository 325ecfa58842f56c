// What the point-to-point, subgroup and exchange tests share (test_point_to_point.cc,
// test_subgroup.cc, test_create_from_exchange.cc): their run options, messages whose every byte
// is known from (sender, receiver, tag, position), and the catching of sharc::Error.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <sharc/communicator.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "multiprocess.hpp"

namespace sharc::testing {

/// The transports of test_collectives.cc: "tcp;ofi_rxm" (every rank its own host), "shm"
/// (libfabric's shm provider) and "sharc-shm" (sharc's own shared-memory transport).
inline RunOptions transportOptions(const std::string& transport) {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = transport == "sharc-shm" ? "shm" : transport;
  o.env["SHARC_SHM"] = transport == "sharc-shm" ? "1" : "0";
  o.oneRankPerNode = transport == "tcp;ofi_rxm";
  o.env["SHARC_TIMEOUT_MS"] = "30000";
  o.timeout = std::chrono::seconds(120);
  return o;
}

inline RunOptions tcpOptions() {
  return transportOptions("tcp;ofi_rxm");
}

/// As in test_failures.cc: errors must arrive well before the parent's kill.
inline RunOptions shortTimeout() {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_TIMEOUT_MS"] = "4000";
  o.env["SHARC_DEBUG"] = "NONE";
  o.timeout = std::chrono::seconds(60);
  return o;
}

/// Byte `i` of the message `src` sends to `dst` with `tag`: computed from its inputs alone, so a
/// message landing in the wrong buffer (or shifted) is caught.
inline uint8_t pattern(int src, int dst, uint32_t tag, size_t i) {
  uint64_t x = (uint64_t{static_cast<uint32_t>(src)} << 40) ^
               (uint64_t{static_cast<uint32_t>(dst)} << 32) ^ (uint64_t{tag} << 20) ^ i;
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<uint8_t>(x >> 56);
}

/// The whole message `src` sends to `dst` with `tag`, `bytes` long.
inline std::vector<uint8_t> message(int src, int dst, uint32_t tag, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = pattern(src, dst, tag, i);
  return v;
}

/// "" when `got` is the message src -> dst with tag, else the first mismatches.
inline std::string checkMessage(const std::vector<uint8_t>& got, int src, int dst, uint32_t tag,
                                size_t bytes) {
  std::ostringstream os;
  if (got.size() != bytes) os << "size " << got.size() << " expected " << bytes << "; ";
  int shown = 0;
  for (size_t i = 0; i < std::min(got.size(), bytes) && shown < 5; ++i) {
    const uint8_t want = pattern(src, dst, tag, i);
    if (got[i] != want) {
      os << "message " << src << "->" << dst << " tag " << tag << " byte " << i << ": got "
         << int{got[i]} << " expected " << int{want} << "; ";
      ++shown;
    }
  }
  return os.str();
}

/// Error code and message of `f`'s sharc::Error (Success and "" if it did not throw).
template <typename F>
std::pair<Result, std::string> errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {Result::Success, ""};
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace sharc::testing
