#include "core/collective.hpp"

#include <algorithm>
#include <cctype>
#include <iterator>

namespace sharc::core {
namespace {

struct CollectiveNames {
  CollectiveKind kind;
  const char* name;
  const char* toolName;
};

constexpr CollectiveNames kNames[] = {
    {CollectiveKind::AllGather, "AllGather", "all_gather"},
    {CollectiveKind::ReduceScatter, "ReduceScatter", "reduce_scatter"},
    {CollectiveKind::AllReduce, "AllReduce", "all_reduce"},
    {CollectiveKind::Broadcast, "Broadcast", "broadcast"},
    {CollectiveKind::Barrier, "Barrier", "barrier"},
    {CollectiveKind::Split, "Split", "split"},
    {CollectiveKind::PointToPoint, "SendRecv", "send_recv"},
};

const CollectiveNames* find(CollectiveKind kind) noexcept {
  const auto it = std::find_if(std::begin(kNames), std::end(kNames),
                               [&](const CollectiveNames& n) { return n.kind == kind; });
  return it == std::end(kNames) ? nullptr : it;
}

// Lower case without underscores: the form every spelling shares.
std::string folded(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const char* collectiveName(CollectiveKind kind) noexcept {
  const auto* n = find(kind);
  return n ? n->name : "unknown collective";
}

const char* collectiveToolName(CollectiveKind kind) noexcept {
  const auto* n = find(kind);
  return n ? n->toolName : "invalid";
}

std::string collectiveKey(CollectiveKind kind) {
  return folded(collectiveToolName(kind));
}

std::optional<CollectiveKind> parseCollective(std::string_view name) noexcept {
  try {
    const std::string key = folded(name);
    for (const auto& n : kNames)
      if (key == folded(n.toolName) || key == folded(n.name)) return n.kind;
  } catch (...) {  // allocation failure: no match
  }
  return std::nullopt;
}

bool collectiveReduces(CollectiveKind kind) noexcept {
  return kind == CollectiveKind::ReduceScatter || kind == CollectiveKind::AllReduce;
}

}  // namespace sharc::core
