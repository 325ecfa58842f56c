// Layout of the 64-bit libfabric tag of every sharc message.
//
//   63..52 communicator id (12)  51..36 source rank (16)  35..24 sequence (12)
//   23..14 signature (10: collective 3, type 4, op 3)     13..0 slot (14)
//
// The source rank is in the tag because not every provider supports directed receives. The
// signature is ignored when matching and checked on completion, so a rank that calls another
// collective, type or op is reported instead of silently mixing data. Slot 0x3FFF is the
// control channel (abort notices); slots 0x2000..0x3FFE carry point-to-point messages, whose
// sequence counts per (peer, tag) instead of per collective.
//
// The layout lives in core because layers below the algorithms read fields of it (the fault
// plan counts a call's transfers by communicator and sequence); algorithms/tag.hpp composes
// tags and encodes the signature on top of it.
#pragma once

#include <cstdint>

namespace sharc::core::tag {

inline constexpr int kCommBits = 12, kRankBits = 16, kSeqBits = 12, kSigBits = 10, kSlotBits = 14;
inline constexpr int kSlotShift = 0, kSigShift = 14, kSeqShift = 24, kRankShift = 36,
                     kCommShift = 52;
inline constexpr uint64_t kSlotMask = (1ull << kSlotBits) - 1;
inline constexpr uint64_t kSigMask = ((1ull << kSigBits) - 1) << kSigShift;
inline constexpr uint64_t kSeqMask = ((1ull << kSeqBits) - 1) << kSeqShift;
inline constexpr uint64_t kRankMask = ((1ull << kRankBits) - 1) << kRankShift;
inline constexpr uint32_t kMaxComms = 1u << kCommBits;
inline constexpr uint32_t kMaxRanks = 1u << kRankBits;
inline constexpr uint32_t kControlSlot = static_cast<uint32_t>(kSlotMask);
/// Slots usable by one schedule per peer pair. The slots above are point-to-point tags.
inline constexpr uint32_t kMaxSlots = 0x2000;
/// Point-to-point messages: slot kP2PSlotBase + user tag (modulo kP2PTags).
inline constexpr uint32_t kP2PSlotBase = kMaxSlots;
inline constexpr uint32_t kP2PTags = kControlSlot - kP2PSlotBase;

inline uint32_t commOf(uint64_t t) {
  return static_cast<uint32_t>(t >> kCommShift) & (kMaxComms - 1);
}
inline uint32_t rankOf(uint64_t t) {
  return static_cast<uint32_t>((t & kRankMask) >> kRankShift);
}
/// The low kSeqBits of the call's sequence number.
inline uint32_t seqOf(uint64_t t) {
  return static_cast<uint32_t>((t & kSeqMask) >> kSeqShift);
}
inline uint32_t sigOf(uint64_t t) {
  return static_cast<uint32_t>((t & kSigMask) >> kSigShift);
}
inline uint32_t slotOf(uint64_t t) {
  return static_cast<uint32_t>(t & kSlotMask);
}
/// A collective's message: not an abort notice, not point-to-point.
inline bool isCollectiveSlot(uint32_t slot) {
  return slot < kMaxSlots;
}

}  // namespace sharc::core::tag
