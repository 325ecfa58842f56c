// The messages ranks exchange through the bootstrap while a world communicator is created,
// one type per round, each with its encoding. Every rank runs the same build, so the
// encoding carries no version.
#pragma once

#include <cstdint>
#include <string>

namespace sharc::detail {

/// Round 1: who a rank is and where it runs.
struct HelloMessage {
  std::string node;       ///< SHARC_NODE_ID, else "hostname/boot id": ranks of one node match
  int32_t pid = 0;        ///< for single-copy reads between ranks of one host
  uint64_t cmaProbe = 0;  ///< address of the word a peer reads to test single-copy access
  std::string machine;    ///< the kernel's boot id: ranks that share CPUs match

  std::string encode() const;
  /// Parses rank `from`'s message; throws InternalError naming `rank`, the round and `from`.
  static HelloMessage decode(const std::string& bytes, int rank, int from);
};

/// Round 2: how to reach a rank.
struct AddressMessage {
  std::string provider;  ///< libfabric provider: every rank must use the same one
  std::string segment;   ///< the node's shared-memory segment (from its creator; else empty)
  std::string address;   ///< the fabric address of the rank's endpoint

  std::string encode() const;
  static AddressMessage decode(const std::string& bytes, int rank, int from);
};

/// Round 3 (also the barrier before any fabric traffic): what a rank could set up.
struct ReadinessMessage {
  bool canReadNext = false;  ///< single-copy reads of the next rank's memory work
  bool shmMapped = false;    ///< the node's segment is mapped and this rank's FIFOs reserved

  std::string encode() const;
  static ReadinessMessage decode(const std::string& bytes, int rank, int from);
};

}  // namespace sharc::detail
