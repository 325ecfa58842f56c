#include "selector.hpp"

#include <sharc/error.hpp>
#include <sstream>

#include "tuner.hpp"

namespace sharc::algo {
namespace {

std::optional<Algorithm> parseName(const std::string& name) {
  if (name == "ring") return Algorithm::Ring;
  if (name == "recursive_doubling" || name == "recursive_halving" || name == "rd")
    return Algorithm::RecursiveDoubling;
  if (name == "bruck") return Algorithm::Bruck;
  if (name == "direct") return Algorithm::Direct;
  if (name == "direct_read") return Algorithm::DirectRead;
  if (name == "direct_write") return Algorithm::DirectWrite;
  if (name == "hierarchical") return Algorithm::Hierarchical;
  return std::nullopt;
}

[[noreturn]] void bad(const std::string& item) {
  throw Error(Result::InvalidArgument,
              "SHARC_ALGO: cannot parse '" + item +
                  "': expected ring, recursive_doubling (rd), bruck, direct, direct_read, "
                  "direct_write, hierarchical, or a comma-separated list "
                  "of collective:name with collective one of allgather, reducescatter, "
                  "allreduce");
}

}  // namespace

AlgorithmOverride AlgorithmOverride::parse(const std::string& text) {
  AlgorithmOverride o;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      const auto a = parseName(item);
      if (!a) bad(item);
      o.allGather = o.reduceScatter = o.allReduce = *a;
      continue;
    }
    const std::string coll = item.substr(0, colon);
    const auto a = parseName(item.substr(colon + 1));
    if (!a) bad(item);
    if (coll == "allgather")
      o.allGather = *a;
    else if (coll == "reducescatter")
      o.reduceScatter = *a;
    else if (coll == "allreduce")
      o.allReduce = *a;
    else
      bad(item);
  }
  return o;
}

Algorithm selectAlgorithm(CollKind kind, size_t bytesPerRank, int nranks,
                          const AlgorithmOverride& o, Locality locality) {
  CallShape shape;
  shape.kind = kind;
  shape.bytesPerRank = bytesPerRank;
  shape.nranks = nranks;
  shape.locality = locality;
  shape.override = o;
  return plan(shape, TunerParams::defaults()).algorithm;
}

}  // namespace sharc::algo
