// The named algorithms and their one name table, read by SHARC_ALGO, tuner files, the tuner,
// the tools and the planner. It sits in core because the configuration parses those names.
#pragma once

#include <optional>
#include <sharc/types.hpp>
#include <span>
#include <string>
#include <string_view>

namespace sharc::algo {

enum class Algorithm {
  Ring,               ///< bandwidth-optimal, pipelined in chunks
  RecursiveDoubling,  ///< log steps, powers of two (recursive halving for ReduceScatter)
  Bruck,              ///< log steps, any number of ranks
  Direct,             ///< one step: every rank exchanges with every other at once
  DirectRead,         ///< one host: every rank reads what it needs straight from its peers
  DirectWrite,        ///< one host: every rank writes its block straight into its peers
  BinomialTree,       ///< broadcast
  Dissemination,      ///< barrier
  Hierarchical,       ///< several nodes: across nodes per rail (proxies), then within each node
  /// several equal nodes: a Bruck across nodes per rail (log2 N peers), within each node
  /// pipelined with it; AllReduce runs Hierarchical
  HierarchicalBruck,
};

/// One row of the name table.
struct AlgorithmName {
  Algorithm algorithm;
  const char* name;   ///< "ring", "recursive_doubling", ...
  const char* alias;  ///< another accepted spelling, or nullptr
  bool choosable;     ///< SHARC_ALGO, tuner files and sharc-plan --algorithm accept it
};

/// Every algorithm, in enum order.
std::span<const AlgorithmName> algorithmNames() noexcept;
/// "ring", "recursive_doubling", ...; "unknown" for an out-of-range value.
const char* algorithmName(Algorithm a) noexcept;
/// A choosable algorithm by its name or alias ("rd", "recursive_halving"); nullopt otherwise.
std::optional<Algorithm> parseAlgorithm(std::string_view name);
/// The choosable names, comma-separated, for error messages ("ring, recursive_doubling (rd),
/// ...").
std::string choosableAlgorithmList();

/// A parsed SHARC_ALGO value: one algorithm for every collective ("ring") or per collective
/// ("allgather:ring,reducescatter:bruck,allreduce:rd").
struct AlgorithmOverride {
  std::optional<Algorithm> allGather, reduceScatter, allReduce;
  /// Parses the forms above ("" = no override); throws sharc::Error(InvalidArgument) naming
  /// SHARC_ALGO, the bad item and the accepted names.
  static AlgorithmOverride parse(const std::string& text);
  /// The forced algorithm of `kind`, if any (Broadcast and the others: none).
  std::optional<Algorithm> of(CollectiveKind kind) const noexcept;
};

}  // namespace sharc::algo
