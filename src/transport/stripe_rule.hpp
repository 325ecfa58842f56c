// How a multi-rail rank cuts a message over its rails (StripedEndpoint), apart so that the
// cost model (algo::railScale) and the planner's replay cut exactly as the transport does.
#pragma once

#include <algorithm>
#include <cstddef>

namespace sharc::transport {

/// Messages from this size on are cut into one near-equal piece per rail; smaller ones go
/// over the first rail alone. (Cutting from 32 KiB on into pieces of at least 16 KiB gave
/// the two-rail time in some runs and the one-rail time in others on the emulated cluster;
/// docs/planning.md, "The link model it showed".)
inline constexpr size_t kStripeMin = 64 * 1024;

/// Into how many pieces, on rails 0..n-1, a message of `len` bytes is cut on `rails` rails;
/// both sides of a transfer cut alike.
constexpr size_t stripePieces(size_t len, size_t rails) {
  return len < kStripeMin ? 1 : std::max<size_t>(rails, 1);
}

}  // namespace sharc::transport
