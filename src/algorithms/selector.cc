#include "selector.hpp"

#include <sharc/error.hpp>
#include <sstream>

#include "patterns.hpp"

namespace sharc::algo {
namespace {

// Crossovers (first estimates, to be calibrated by the tuner of the topology issue): below
// them the log-step algorithms' fewer rounds beat the ring's pipelining.
constexpr size_t kLogAllGatherMaxTotal = 256 * 1024;  // bytes gathered per rank in total
constexpr size_t kLogReduceScatterMaxTotal = 256 * 1024;
constexpr size_t kBruckReduceScatterMaxTotal = 64 * 1024;  // Bruck RS sends ~log2(n)/2 x more
constexpr size_t kLogAllReduceMax = 64 * 1024;
// Within one host every transfer is a single copy and ranks often outnumber cores: the direct
// AllGather (no chain of dependent steps) beat the ring from 1 MiB to 16 MiB and matched it at
// 64 MiB on 4 ranks / 2 cores (sharc-perf all_gather under mpirun, SHARC_ALGO=direct vs ring).
constexpr int kDirectAllGatherMaxRanks = 8;
// With single-copy reads the direct AllGather already wins at 32 KiB gathered (2 ranks:
// 4.7 us against 8.5 us for recursive doubling; sharc-perf all_gather -n 200 under mpirun).
constexpr size_t kDirectReadAllGatherMinTotal = 16 * 1024;

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
  const bool oneHost = locality != Locality::Network;
  const bool singleCopy = locality == Locality::OneHostSingleCopy;
  const size_t total = bytesPerRank * static_cast<size_t>(nranks);
  switch (kind) {
    case CollKind::AllGather:
      if (o.allGather) return *o.allGather;
      if (singleCopy && nranks <= kDirectAllGatherMaxRanks && total > kDirectReadAllGatherMinTotal)
        return Algorithm::DirectWrite;
      if (oneHost && nranks <= kDirectAllGatherMaxRanks && total > kLogAllGatherMaxTotal)
        return Algorithm::Direct;
      if (total > kLogAllGatherMaxTotal) return Algorithm::Ring;
      return isPowerOfTwo(nranks) ? Algorithm::RecursiveDoubling : Algorithm::Bruck;
    case CollKind::ReduceScatter:
      if (o.reduceScatter) return *o.reduceScatter;
      if (singleCopy && nranks <= kDirectAllGatherMaxRanks && total > kLogReduceScatterMaxTotal)
        return Algorithm::DirectRead;
      if (isPowerOfTwo(nranks))
        return total <= kLogReduceScatterMaxTotal ? Algorithm::RecursiveDoubling : Algorithm::Ring;
      return total <= kBruckReduceScatterMaxTotal ? Algorithm::Bruck : Algorithm::Ring;
    case CollKind::AllReduce:
      if (o.allReduce) return *o.allReduce;
      if (singleCopy && nranks <= kDirectAllGatherMaxRanks && bytesPerRank > kLogAllReduceMax)
        return Algorithm::DirectRead;
      return bytesPerRank <= kLogAllReduceMax ? Algorithm::RecursiveDoubling : Algorithm::Ring;
    case CollKind::Broadcast: return Algorithm::BinomialTree;
    default: return Algorithm::Dissemination;
  }
}

}  // namespace sharc::algo
