// How a multi-rail rank cuts a message over its rails (StripedEndpoint), apart so that the
// cost model (algo::railScale) and the planner's replay cut exactly as the transport does.
#pragma once

#include <algorithm>
#include <cstddef>

namespace sharc::transport {

/// Messages from this size on are cut over several rails; smaller ones go over the first
/// rail alone (one piece of less would be all latency).
inline constexpr size_t kStripeMin = 32 * 1024;
/// The smallest piece: a message is cut into min(rails, len / this) near-equal pieces.
/// 16 KiB is rxm's eager size (the measurements behind it: docs/planning.md).
inline constexpr size_t kStripePiece = 16 * 1024;

/// Into how many pieces, on rails 0..n-1, a message of `len` bytes is cut on `rails` rails;
/// both sides of a transfer cut alike.
constexpr size_t stripePieces(size_t len, size_t rails) {
  return len < kStripeMin ? 1
                          : std::clamp<size_t>(len / kStripePiece, 1, std::max<size_t>(rails, 1));
}

}  // namespace sharc::transport
