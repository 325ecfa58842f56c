// Rank math of the two-level (hierarchical, rail-aligned) collectives: pure functions of the
// node map, no I/O. hierarchical.cc turns them into schedules; tests/unit/
// test_hierarchical_pattern.cc simulates the data movement they describe.
//
// Proxy rule: on node m, rank q is represented by the rank whose local index is
// localRank(q) mod L_m (L_m = ranks on node m). With equal-sized nodes that is the rank with
// q's own local index (its "rail"), so each NIC carries only its rail's traffic; with uneven
// nodes every block still has exactly one proxy per node.
//
// Rotated rule (`rotate` = 1): the local index is localRank(q) + nodeOf(q), mod L_m. Between
// two nodes every pair of ranks then talks one way only, which is faster over tcp, whose
// connections take turns between their two directions (cost_model.hpp, "half-duplex turns");
// it gives up rail alignment (half the traffic crosses rails).
#pragma once

#include <vector>

#include "node_map.hpp"

namespace sharc::algo {

/// The rank of node `node` that stands in for rank q there (q itself when q is on that node).
int hierProxy(const NodeMap& map, int node, int q, int rotate = 0);

/// The blocks rank r holds once the inter-node phase is done, ascending: its own and those of
/// every rank q of another node whose proxy on r's node is r. In AllGather r forwards exactly
/// these to each of its node peers; in ReduceScatter its node peers send r their
/// contributions to exactly these (r reduces the foreign ones and the node's share of its own).
std::vector<int> hierHeldBlocks(const NodeMap& map, int r, int rotate = 0);

/// Largest hierHeldBlocks(map, r).size() over all ranks: the blocks one intra-node peer pair
/// exchanges at most, i.e. the slot steps a phase needs per pair.
int hierMaxHeld(const NodeMap& map);

/// Position of block q in hierHeldBlocks of the rank that holds it (`held`, ascending), or
/// -1 if absent: the slot step of q on every intra-node pair from (or to) that holder.
int hierHeldIndex(const std::vector<int>& held, int q);

/// Which node peer hands block q to rank t in AllGather's intra-node phase: q itself when q is
/// on t's node, else q's proxy there; -1 when t already has it (q == t, or t is q's proxy and
/// got it straight from q).
int hierIntraSource(const NodeMap& map, int t, int q, int rotate = 0);

/// Whether two levels help: more than one node and some node with more than one rank.
bool hierApplies(const NodeMap& map);

}  // namespace sharc::algo
