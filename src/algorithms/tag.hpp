// The tags the schedules compose: the field layout is core/message_tag.hpp's; this adds the
// signature's encoding (collective, type, op) and the composition of a message's tag.
#pragma once

#include <cstdint>
#include <sharc/types.hpp>

#include "core/message_tag.hpp"

namespace sharc::algo {

namespace tag {
// The layout's names that the algorithms and the runtime use.
using core::tag::kControlSlot;
using core::tag::kMaxComms;
using core::tag::kMaxRanks;
using core::tag::kMaxSlots;
using core::tag::kP2PSlotBase;
using core::tag::kP2PTags;
using core::tag::kSigMask;
using core::tag::sigOf;

inline uint32_t signature(CollectiveKind kind, DataType type, RedOp op) {
  return (static_cast<uint32_t>(kind) & 7u) << 7 | (static_cast<uint32_t>(type) & 15u) << 3 |
         (static_cast<uint32_t>(op) & 7u);
}
inline CollectiveKind sigKind(uint32_t sig) {
  return static_cast<CollectiveKind>((sig >> 7) & 7u);
}
inline DataType sigType(uint32_t sig) {
  return static_cast<DataType>((sig >> 3) & 15u);
}
inline RedOp sigOp(uint32_t sig) {
  return static_cast<RedOp>(sig & 7u);
}

/// Tag without rank and slot: communicator, sequence and signature.
inline uint64_t base(uint32_t comm, uint32_t seq, uint32_t sig) {
  namespace layout = core::tag;
  return uint64_t{comm} << layout::kCommShift |
         (uint64_t{seq} << layout::kSeqShift & layout::kSeqMask) |
         (uint64_t{sig} << layout::kSigShift & layout::kSigMask);
}
inline uint64_t make(uint64_t base, uint32_t srcRank, uint32_t slot) {
  return base | uint64_t{srcRank} << core::tag::kRankShift | slot;
}
}  // namespace tag

}  // namespace sharc::algo
