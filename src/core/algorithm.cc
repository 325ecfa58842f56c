#include "core/algorithm.hpp"

#include <sharc/error.hpp>
#include <sstream>

#include "core/collective.hpp"

namespace sharc::algo {
namespace {

constexpr AlgorithmName kNames[] = {
    {Algorithm::Ring, "ring", nullptr, true},
    {Algorithm::RecursiveDoubling, "recursive_doubling", "rd", true},
    {Algorithm::Bruck, "bruck", nullptr, true},
    {Algorithm::Direct, "direct", nullptr, true},
    {Algorithm::DirectRead, "direct_read", nullptr, true},
    {Algorithm::DirectWrite, "direct_write", nullptr, true},
    {Algorithm::BinomialTree, "binomial_tree", nullptr, false},
    {Algorithm::Dissemination, "dissemination", nullptr, false},
    {Algorithm::Hierarchical, "hierarchical", nullptr, true},
    {Algorithm::HierarchicalBruck, "hierarchical_bruck", "hier_bruck", true},
};

[[noreturn]] void badOverride(const std::string& item) {
  throw Error(Result::InvalidArgument,
              "SHARC_ALGO: cannot parse '" + item + "': expected " + choosableAlgorithmList() +
                  ", or a comma-separated list of collective:name with collective one of "
                  "allgather, reducescatter, allreduce");
}

}  // namespace

std::span<const AlgorithmName> algorithmNames() noexcept {
  return kNames;
}

const char* algorithmName(Algorithm a) noexcept {
  for (const auto& n : kNames)
    if (n.algorithm == a) return n.name;
  return "unknown";
}

std::optional<Algorithm> parseAlgorithm(std::string_view name) {
  if (name == "recursive_halving") return Algorithm::RecursiveDoubling;
  for (const auto& n : kNames)
    if (n.choosable && (name == n.name || (n.alias && name == n.alias))) return n.algorithm;
  return std::nullopt;
}

std::string choosableAlgorithmList() {
  std::string out;
  for (const auto& n : kNames) {
    if (!n.choosable) continue;
    if (!out.empty()) out += ", ";
    out += n.name;
    if (n.alias) out += std::string(" (") + n.alias + ")";
  }
  return out;
}

AlgorithmOverride AlgorithmOverride::parse(const std::string& text) {
  AlgorithmOverride o;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const auto colon = item.find(':');
    const auto a = parseAlgorithm(colon == std::string::npos ? item : item.substr(colon + 1));
    if (!a) badOverride(item);
    if (colon == std::string::npos) {
      o.allGather = o.reduceScatter = o.allReduce = *a;
      continue;
    }
    const std::string coll = item.substr(0, colon);
    const auto kind = core::parseCollective(coll);
    // Only the lower-case keys are documented; other spellings of the three are refused too.
    if (!kind || coll != core::collectiveKey(*kind)) badOverride(item);
    switch (*kind) {
      case CollectiveKind::AllGather: o.allGather = *a; break;
      case CollectiveKind::ReduceScatter: o.reduceScatter = *a; break;
      case CollectiveKind::AllReduce: o.allReduce = *a; break;
      default: badOverride(item);
    }
  }
  return o;
}

std::optional<Algorithm> AlgorithmOverride::of(CollectiveKind kind) const noexcept {
  switch (kind) {
    case CollectiveKind::AllGather: return allGather;
    case CollectiveKind::ReduceScatter: return reduceScatter;
    case CollectiveKind::AllReduce: return allReduce;
    default: return std::nullopt;
  }
}

}  // namespace sharc::algo
