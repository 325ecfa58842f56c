// A discrete-event replay of the engine's real schedules over a modelled fabric: the check of
// the tuner's analytic cost model (src/algorithms/cost_model.hpp) at scales we cannot run.
//
// Every rank's Schedule is built by the same builders the engine uses (buildAllGather, ...;
// buffers are reserved address space, never touched), reduced to its operations
// (Schedule::describeOps) and replayed:
//   - each rank runs the engine's posting rule (Schedule::advance): ready receives first,
//     oldest first (at most 1,024 posted: the window on a provider holding 4,096 or more),
//     then ready sends (oldest in schedule order first, at most sendWindow posted: two per
//     peer, at least 32), then one local operation (the first to become ready), and again,
//     on one progress thread per rank (a serial CPU clock);
//   - posting a send costs step_us of that clock; a reduce costs bytes / reduce.gbps, a copy
//     bytes / copy.gbps; the schedule's build costs step_us before anything starts;
//   - a send becomes a flow on the links it crosses: between nodes the source node's NIC
//     egress and the destination node's NIC ingress (fabric.gbps each), within a node the
//     source rank's local egress and the destination rank's local ingress (local.gbps each);
//     where the fabric is half duplex (TunerParams::fabricHalfDuplex, tcp) also the one
//     connection of the two ranks, shared as cost_model.hpp's "half-duplex turns" says;
//     messages between the same two ranks go in order (one connection), different pairs
//     share the links max-min fairly, weighted where a flow takes less than all of a link
//     (progressive filling, recomputed whenever a flow starts or ends: NICs and sockets
//     interleave the packets of concurrent connections, so fair share rather than FIFO);
//     the message arrives its link class's alpha after its last byte left; the send
//     completes then (delivery), the matching receive (same source, destination and slot) at
//     max(arrival, when it was posted). Receive-side copies inside the transport, rendezvous
//     handshakes and oversubscribed cores are not modelled;
//   - the transport: where the bytes move by DMA (TunerParams::dmaTransfers: NICs, NVLink)
//     a message moves while its ranks' threads reduce; on a CPU transport (tcp, shared
//     memory) the two ranks' progress threads copy it, so it stands still while either of
//     them reduces or copies (each thread is one more link of the message, of no rate while
//     busy).
// The parameters are the tuner's (algo::TunerParams), so model and simulation differ only in
// method: the model sums per-step terms, the simulation plays out the dependencies.
//
// Cost: the rates are recomputed (max-min, over the flows of one group: SimOptions) at every
// point in time where a flow starts or ends; each flow's finish time waits in a heap. Up to
// 8,192 p5 ranks (1,024 nodes, tens of millions of operations per call) replay in half a
// minute to a few minutes per size on one core, in up to 4.5 GB (docs/replay-scale.md).
#pragma once

#include <cstddef>
#include <string>

#include "algorithms/algorithms.hpp"
#include "algorithms/node_map.hpp"
#include "algorithms/tuner.hpp"
#include "sharc/plan.hpp"

namespace sharc::plan {

/// One simulated call.
struct SimResult {
  double us = 0;           ///< until the last rank's last operation completed
  size_t messages = 0;     ///< sends replayed (all ranks)
  size_t operations = 0;   ///< operations replayed (all ranks)
  size_t rateUpdates = 0;  ///< max-min recomputations (a measure of the simulation's work)
  /// Rank 0's messages to other nodes: when the first started moving, when the last one's
  /// last byte left, and how long at least one was moving (us); all 0 where it sends none.
  /// first is the call's lead before the fabric, last - first - busy the fabric's idle time.
  double fabricFirstUs = 0, fabricLastUs = 0, fabricBusyUs = 0;
};

/// How the replay computes the links' rates; every choice gives the same times (to rounding:
/// test_schedule_sim_scale compares them).
struct SimOptions {
  /// Recompute rates only for the flows of the group that changed: flows that share no link
  /// (by DMA: each node's local flows, the fabric's; where no node link binds and every
  /// message between nodes stays on its rail, each rail's), and leave out a node's NIC link
  /// where its ranks' NICs add up to no more. false: one max-min over every flow and link
  /// at every change (the reference; hours at 2,048 ranks).
  bool groupFlows = true;
};

/// Replays `c` of `bytes` (AllGather output, ReduceScatter input, AllReduce vector; float32
/// elements, rounded down to whole elements per rank) on the ranks of `map` with algorithm
/// `a` cut into `chunkBytes` pieces, over links with the parameters `p` (only one core per
/// rank is modelled: p.cores is ignored; p.dmaTransfers picks the transport's rule above).
/// The builders' own fallbacks apply (hierarchical on one node runs the ring, recursive
/// doubling on 2^k + j ranks Bruck for AllGather and ReduceScatter). Throws
/// sharc::Error(InvalidArgument) for an empty map or too few bytes, and sharc::Error(InternalError)
/// if the replay deadlocks (a receive no rank sends).
SimResult simulate(const algo::TunerParams& p, const algo::NodeMap& map, Collective c, size_t bytes,
                   algo::Algorithm a, size_t chunkBytes, const SimOptions& options = {});

/// The shape the model is given for the same call (bytes per rank rounded as simulate does).
algo::CallShape simShape(Collective c, size_t bytes, const algo::NodeMap& map);

/// For `sharc-plan simulate`: the replay (SimResult::us, the time) of `c` of `bytes` on `nodes`
/// nodes of `cluster` (ranks numbered node by node) with `algorithm` ("" = the tuner's choice) in
/// chunks of `chunkBytes` (0 = the tuner's chunk for that algorithm). Throws
/// sharc::Error(InvalidArgument) for an unknown algorithm name.
SimResult simulateCall(const Cluster& cluster, int nodes, Collective c, size_t bytes,
                       const std::string& algorithm, size_t chunkBytes);

}  // namespace sharc::plan
