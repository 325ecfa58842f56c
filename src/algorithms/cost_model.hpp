// The cost model of the tuner (tuner.hpp) and the planner (src/plan): the time of one
// collective call run with one algorithm, as latency + transfer + reduce + pipeline (Cost).
// This comment is the one statement of its formulas; the sources cite it by section:
//   cost_model.cc        what each algorithm's schedule runs, step by step ("Per algorithm")
//   cost_model_steps.cc  the cost of those steps ("Links", "One step", "Ring", "Log-step")
//   cost_model_hier.cc   the two-level schedules ("Hierarchical")
//   cost_model_hier_bruck.cc  the same with a Bruck across nodes ("Hierarchical with a Bruck")
// The schedule replay (src/plan/schedule_sim.hpp) plays the schedules the builders really make
// and checks these forms.
//
// Notation. n ranks on N nodes, at most L on one node (L_k on node k); m bytes per rank's block
// (AllGather, ReduceScatter: bytesPerRank; AllReduce: the vector V split n ways); a and b: alpha
// (us) and beta (us per byte) of the link class a transfer uses (local: ranks of one node;
// fabric: between nodes); c = 1/copy.gbps; g = 1/reduce.gbps; s = step_us; o = max(1, L/cores)
// (ranks sharing a core serialise their local copies, reductions and wake-ups); C = ceil(m /
// chunk), the chunks of a block; W = postedSends (unbounded at 0); share = fabricRankShare.
//
// Links.
//   local     A message of x bytes moves at local.cache_gbps while it fits one FIFO slot (64
//             KiB, 16 KiB where o > 1), else at local.gbps / o (both ends must run for a FIFO
//             to move). A round of local messages costs o*local.alpha (+ o*switch_us where o >
//             1: the peers sharing a core are scheduled in turn).
//   fabric    A step's crossing bytes take max(load*b, rankLoad*b/share): load is the most
//             bytes one node sends or receives over its fabric link (a node whose ranks all
//             have off-node peers carries L*x), rankLoad the most one rank sends or receives
//             through its own NICs.
//   rails     A message of x bytes is cut into stripePieces(x, fabricRails) pieces, one per
//             rail (one below 32 KiB, else pieces of at least 16 KiB): its fabric time is
//             1/min(1, pieces*fabricRailShare) times its bytes' (railScale, tuner.hpp).
//   half-duplex turns  Where the fabric is half duplex per connection (fabric.half_duplex,
//             tcp), a pair exchanging x bytes each way over one connection moves both
//             directions together for the first 64 KiB of each (kDuplexOverlapBytes), then
//             takes turns: the connection carries max(x, 2x - 64 KiB). Cut in chunks, each of
//             the P = ceil(x/chunk) equal pieces the builders cut overlaps its own first 64
//             KiB: P*max(x/P, 2x/P - 64 KiB). It applies to every exchange across nodes:
//             recursive doubling, a 2-rank ring, direct, hierarchical's two-way pairs.
//   single copy  Cross-memory attach reads or writes at 1/cma.gbps (copy.gbps where unset).
//
// One step, in which every rank r sends x bytes to peer(r), costs
//   latency   a_step + s; a_step = fabric.alpha if any pair crosses nodes, else the local round
//   transfer  max(o*x*b_local(x) if some pair is on one node, the fabric time above)
//   reduce    o*x*g on ReduceScatter and AllReduce steps
//   copy      unchunked steps (recursive doubling/halving, Bruck: whole blocks in one message)
//             add o*max(0, x - chunk)*c: beyond a chunk the receive copy no longer overlaps the
//             wire (not where DMA moves the bytes: they land in place)
//   pipeline  chunked steps add (C - 1)*s, and a call whose blocks span several chunks adds
//             once the fill, chunk*(b + o*g) of its slowest link.
// Every call adds s for building its schedule, and the start copy o*x*c where its first
// message waits for it: AllGather's own block into the output (log-step algorithms on any
// transport, ring and direct on a CPU transport, where the copying thread is the sending one)
// and recursive doubling AllReduce's vector.
//
// CPU and DMA transports. Where the copies run on the ranks' cores (tcp, shared memory:
// dmaTransfers unset) they share them with the reductions, so a step's wire, reductions and
// posts add. Where DMA moves the bytes (NICs, NVLink: the planner's GPU clusters), a pipelined
// ring overlaps its wire, reductions and posts chunk by chunk, and the two-level schedules are
// limited by each rank's window of W posted sends.
//
// Ring (n-1 alike steps to r+1, costed once so the model stays O(n)). On a CPU transport the
// steps add, with the latencies of one chain of n-1 consecutive edges: its hops that cross
// nodes (at most n-1) pay the fabric alpha, the rest a local round; ReduceScatter, whose
// receive waits for the send that read its buffer, also pays a crossing edge every other step:
// at least ((n-2)/2 + 1)*(fabric.alpha + s) - (n-1)*s + local round. With DMA, the longest of
//   chain   the first chunk through all n-1 hops, followed rank by rank: rank r posts step k's
//           send (s) once step k-1's chunk is in and reduced, and it arrives after the edge's
//           alpha and wire; ReduceScatter's receive of step k also waits until its send of
//           step k-1 is delivered (two receive buffers). Nodes of L ranks numbered node by
//           node repeat, so L positions are followed (uneven nodes: all n, O(n^2)). Then the
//           other C-1 chunks at max(wire, reduction + s) each;
//   link    s + (n-1)*wire + alpha + one chunk's reduction (the busiest link, back to back);
//   thread  (n-1)*C*(s + reduction) + alpha + one chunk's wire (the progress thread posts and
//           reduces every chunk while the transport moves the bytes).
// A chunk on a crossing edge takes the NIC of the node with the most crossing edges (that many
// chunks at once) and at least the sender's own NICs' time; a 2-rank ring is an exchange.
// On a ring numbered node by node each node has one edge out, so its link carries (n-1)/n of
// the data; interleaved orders cross more often and load it more.
//
// Log-step (recursive doubling/halving, Bruck): the longest chain of dependencies. Rank r's
// step k sends to to(r) once its step k-1 is done and completes once from(r)'s message is in:
// T_k(r) = max(T_k-1(r), T_k-1(from(r)) + s + edge) (+ its reduction), so a chain of short
// distances pays the fabric alpha only where it crosses a node. Each node's NIC shares its
// rate equally among the messages on it (processor sharing), bytes still on it from earlier
// steps going first. Where a rank drives only its share of the node's NICs, its own crossing
// messages share those fairly as well (a rank may start its next one before the last is out):
// taken one after the other first, then twice more from the start times of the pass before.
// Recursive doubling's AllReduce reduces into the buffer its send reads: a step's reduction
// waits for that send's delivery.
//
// Per algorithm (d: the step's distance)
//   AllGather     Ring               n-1 steps to r+1 of m
//                 RecursiveDoubling  step k: partner r^2^k, 2^k*m (n = 2^j)
//                 Bruck              step k: to r-2^k, min(2^k, n-2^k)*m; + o*n*m*c rotation
//                 Direct             one step, m to each of the n-1 peers: a + (n-1)*s +
//                                    max(o*(L-1)*m*b_local, the node's L(n-L)*m and the rank's
//                                    (n-L)*m at the fabric's rates), turns where pairs exchange
//                 DirectWrite        2*(o*a + (n-1)*s) + o*(n-1)*m*c_cma (one copy)
//   ReduceScatter Ring               n-1 steps to r+1 of m, reducing m
//                 RecursiveDoubling  step k: partner r^d, d = n/2^(k+1), d*m
//                 Bruck              o*n*m*c rotation, then d = floorPow2(n-1) down to 1: to
//                                    r+d, (length-d)*m, length = n, then the last d
//                 DirectRead         2*(o*a + (n-1)*s) + o*(n-1)*m*(c_cma + g)
//   AllReduce     Ring               the ReduceScatter ring, then the AllGather ring, of m
//                 RecursiveDoubling  log2 p steps of V among p = floorPow2(n), reducing V; the
//                                    n-p others fold into r-p first and get the result last
//                 DirectRead         4*(o*a + (n-1)*s) + o*(n-1)*m*(2*c_cma + g)
//   Broadcast     binomial tree      step k: partner r^2^k where it exists, the whole message
//   Barrier       dissemination      step k: to r+2^k, no bytes
//   Hierarchical  below, for AllGather, ReduceScatter and AllReduce.
//   HierarchicalBruck  below ("Hierarchical with a Bruck"), AllGather and ReduceScatter on
//                 equal nodes; AllReduce runs Hierarchical.
//
// Hierarchical (hierarchical.cc). AllGather: each rank sends its block, chunk by chunk, to its
// proxy on every other node and to its node peers; each chunk it receives as a proxy goes on
// to its L-1 node peers. ReduceScatter mirrors it: contributions to the node's proxies first,
// the partials across. Where nodes differ in size the ranks fall into classes (HierClass): on
// node k, local index i proxies the ranks of each other node j with local index i mod L_k,
// ceil((L_j - i)/L_k) of them, h blocks in all (even nodes: one class, h = N-1); one rank's
// own NICs carry at most max h blocks across.
//   CPU transport, one phase: latency fabric.alpha + local round + (N-1)*L*s (a rank posts its
//     own chunk to N-1 proxies, then each proxied chunk to L-1 peers, on its progress thread);
//     transfer max(fabric + forwarded, local): fabric = max(L(N-1)*b, h*b/share)*m, forwarded
//     = the forwards of each block's last chunk, which follow the fabric phase (AllGather:
//     o*(L-1)(N-1)*m*b_local/C), local = o*(L-1)*N*m*b_local; a pair that sends both ways
//     (on uneven nodes: 3+1's lone rank and its proxy) adds its half-duplex turns; reduce
//     o*(n-1)*m*g; pipeline (C-1)*((N-1) + (L-1)*N)*s; fill chunk*(max(L*b, b/share) +
//     o*b_local + o*g).
//   DMA, one phase: the longest of these paths (ready sends are posted oldest in schedule
//     order first, so a chunk's forwards go before the rank's own sends of later chunks, at
//     most W = sendWindow(N-1+L-1) at a time: two per peer, so W >= 2(N-1)).
//     AllGather: the fabric phase chunk by chunk, a round of fabric/C each; in round c the
//       forwards of the chunks already in take the window's places first, each a post, its
//       wire and the local alpha before the place frees, at most at the link's rate; the
//       forwards still queued follow the last round. Also the local link, o*(L-1)*N*m*b_local,
//       and the thread's C*(n-1) posts.
//     ReduceScatter, per class: a proxy of h blocks sends n-1-h contributions and takes in
//       (L_k-1)(h+1) per chunk, all C(n-1-h) local sends ready at once. A chunk's partials
//       go behind its own contributions and ahead of the later chunks' still queued: the
//       first once all but W of the first chunk's n-1-h have left (where they outnumber the
//       window, they are posted only as places free), once the first chunk's contributions
//       are in and reduced, or once the thread has posted min(C(n-1-h), n-1-h+W) sends (the
//       first chunk's, then the later ones that take the places those free before it has run
//       the reductions) and the reductions it could; from then its own NICs carry its h
//       partials, and the last chunk of its last block is in only as the local phase ends
//       (every proxy holds another node's last rank last, whose N-1 partials then arrive
//       together). Also the local phase and the thread's posts and reductions, then the last
//       partial's wire.
//   AllReduce, its ReduceScatter then its AllGather on m: on a CPU transport the two phases'
//     sum, except that over tcp the first 32 KiB of each block leave in the order they were
//     posted (kPhaseOverlapBytes), so for that share of a chunk the phases share the links and
//     the busiest node link carries max_k L_k(N-1) + n - L_k blocks each way (even nodes:
//     2L(N-1), the sum). With DMA, chunk by chunk (a chunk's gather starts once it is
//     reduced): the longest of the two phases' serial paths overlapped after one round of the
//     partials, each resource's work of both phases, one chunk through both phases, and the
//     rank's NICs carrying h + N-1 blocks each way; and the gather's sends, younger than every
//     contribution, leave only once the thread has posted all C(n-1-h) and all but W of them
//     have left, then the gather's own serial path (a rank that holds no block, h = 0 on
//     uneven nodes, has nothing on its NICs before that).
//
// Hierarchical with a Bruck (hierarchical_bruck.cc), equal nodes of L ranks. Across nodes each
// rail runs Bruck over the N nodes: K = ceil(log2 N) steps, step k one message of
// b_k = min(2^k, N-2^k)*m bytes (ReduceScatter: the reversed Bruck's), cut into pieces of
// P = max(chunk, N*m/(kMaxSlots/4)); it crosses at max(L*b_node, b_rank)*railScale(min(P, b_k))
// per byte (the node's NICs carry the L rails' messages of the step at once). Within the node
// every block but the rank's own rail goes to each node peer once: local = o*(L-1)*N*m*b_local
// in messages of min(P, m), each piece cut at the blocks' bounds. The rank posts every send
// (s each) and runs its copies and reductions one after another with the posts, as the
// replay does. DMA only.
//   AllGather: the steps one after another on the rank's NICs, each its wire after the last,
//     but its last piece no sooner than fabric.alpha + s + that piece's wire after the last
//     step's end (its older blocks go first while the last step's arrive: the NICs idle only
//     at the early steps whose messages are that short); then the last piece to the node
//     peers (al, a send and a receive posted per message, its wire and placing); or the
//     local link; or the rank's posts and its copies of the N blocks to the result, then the
//     last piece's way to the node peers.
//   ReduceScatter: the node peers' contributions first, in the order the reversed steps read
//     the positions, reduced in order (where pieces hold several blocks, a run of positions
//     per message, gathered with strided copies); that local phase runs at the slower of
//     NVLink and the rank's posts, gathers and reductions. The first piece across nodes waits
//     for its unit, whose reductions the thread reaches only after the posts (at most
//     L-1+W) and gathers of the kBruckUnitsAhead units made ahead. Step by step, each once
//     the part of the last step it reads is in and reduced (all of it, or the part sent
//     first where reverseBruckSplit splits the last step), the rank's NICs carrying the
//     steps one after another, and once the local phase has made the positions it reads
//     first; while that phase runs, each piece's reduction waits kThreadWaitUnits of a
//     unit's work for the thread. Then acc[0]'s copy to the result.
//
// Data paths (DataPath). Where a call's buffers are in GPU memory, the engine moves them one
// of two ways; everything above costs the first.
//   device-direct  the NICs and NVLink read and write HBM; reductions at reduce.gbps (the GPU's).
//   staged         the call is cut into K = ceil(m / stagingChunk) chunks of each rank's block
//                  (AllReduce: of the vector; SHARC_GPU_STAGING_CHUNK, 4 MiB). Each chunk is
//                  copied GPU -> pinned host memory (D2H), the host collective runs on it with
//                  reductions at the host's rate, and it is copied back (H2D). A rank's copies
//                  per chunk (stagedCopies; AllGather: its piece out, all n pieces back;
//                  ReduceScatter: all n pieces out, its piece back; AllReduce: the chunk both
//                  ways) run one after another on one copy queue over the GPU's PCIe link:
//                  p = (out + back) / pcie. The stages pipeline over the staging slots, so
//                  with t the host collective of one chunk (its own latency included)
//                    T = (K - 1) * max(p, t) + p + t
//                  (the slower stage per chunk, plus one chunk through both: the fill). Since
//                  every staged byte crosses PCIe at least once each way, T >= K*p, and the
//                  bus bandwidth stays below the PCIe rate.
//   The engine's own tuner (tuner.cc, paramsFor) costs a call on device buffers
//   (CallShape::device) with the formulas above at its device queue's rates: reduce.gbps and
//   copy.gbps become the queue's (a CUDA queue: gpu.reduce_gbps and gpu.copy_gbps; the host
//   queue: the host's own), the single-copy algorithms drop out (the ring runs instead), and
//   a link that stages each message through host memory (the engine stages per message, not
//   per call as above) carries at most the queue's host copy rate (gpu.pcie_gbps), with
//   10 us more per message for its two copies' launches.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "node_map.hpp"
#include "tuner.hpp"

namespace sharc::algo::model {

/// The terms of one call's predicted time (us).
struct Cost {
  double latency = 0, transfer = 0, reduce = 0, pipeline = 0;
  int steps = 0;
  bool fabric = false;  ///< some step crossed nodes
  double total() const { return latency + transfer + reduce + pipeline; }
  /// Adds `times` copies of the steps in `one` (identical steps: the ring's n-1).
  void addRepeated(const Cost& one, int times) {
    latency += times * one.latency;
    transfer += times * one.transfer;
    reduce += times * one.reduce;
    pipeline += times * one.pipeline;
    steps += times * one.steps;
    fabric = fabric || (times > 0 && one.fabric);
  }
};

/// Whom each rank sends to and receives from in one step of a schedule: patterns.hpp's peers.
struct StepPeers {
  enum class Kind : unsigned char {
    Ring,            ///< to r+1, from r-1
    Doubling,        ///< r ^ 2^step, where that rank exists
    Halving,         ///< r ^ n/2^(step+1)
    Bruck,           ///< to r - 2^step, from r + 2^step
    ReverseBruck,    ///< to r + d, from r - d, d = floorPow2(n-1) / 2^step
    Dissemination,   ///< to r + 2^step, from r - 2^step
    FoldIn,          ///< AllReduce off a power of two: ranks from p on to r - p
    FoldedDoubling,  ///< r ^ 2^step among the first p ranks
    FoldOut,         ///< ranks r < n - p back to r + p
  };
  Kind kind = Kind::Ring;
  int n = 1;     ///< ranks
  int step = 0;  ///< the pattern's step index
  int p = 1;     ///< floorPowerOfTwo(n) (the fold kinds)
  /// The rank r sends to (r itself, or one outside [0, n): none).
  int to(int r) const;
  /// The rank r receives from (r itself, or one outside [0, n): none).
  int from(int r) const;
};

/// One step of a log-step schedule: every rank sends x bytes to to(r), receives from from(r).
struct LogStep {
  StepPeers peers;
  double x = 0;
  bool reduce = false;
  bool afterSend = false;  ///< the reduction waits for the step's own send (AllReduce in place)
};

/// The steps of log-step algorithm `a` (RecursiveDoubling, Bruck; AllReduce runs Bruck as
/// RecursiveDoubling) for `kind` on `n` ranks: blocks of `m` bytes, AllReduce's whole vector of
/// `m` bytes. Empty for the other algorithms.
std::vector<LogStep> logStepsOf(CollectiveKind kind, Algorithm a, int n, double m);

/// The cost of `shape` run as `a` (the schedule that runs: see tuner.cc's runsAs) in chunks
/// of `chunkBytes`.
Cost callCost(const CallShape& shape, Algorithm a, size_t chunkBytes, const TunerParams& p);

/// Bytes the busiest node sends across nodes for `kind` of `bytes` (AllGather output,
/// ReduceScatter input, AllReduce vector) run with `a` on `nodes` nodes of `ranksPerNode` ranks
/// numbered node by node: the ring (n-1)/n of the data (AllReduce twice), hierarchical
/// (N-1)/N, direct L(n-L) blocks, the log-step algorithms their steps' loads. nullopt where
/// `a` has no such pattern (the single-copy and tree forms).
std::optional<double> fabricBytesPerNode(CollectiveKind kind, Algorithm a, double bytes, int nodes,
                                         int ranksPerNode);

/// How a call on GPU buffers moves its bytes ("Data paths" above).
enum class DataPath {
  DeviceDirect,  ///< NICs and NVLink on HBM, reductions at the GPU's rate
  Staged,        ///< chunks copied over PCIe to pinned host memory, the host collective, back
};
/// "device-direct", "staged".
const char* dataPathName(DataPath p);

/// Effective rate of one GPU's PCIe Gen4 x16 link in one direction (1e9 B/s; A100 on
/// p4d.24xlarge). The A100 datasheet gives "PCIe Gen4: 64 GB/s", both directions together, so
/// 32 per direction at the line rate (16 GT/s x 16 lanes, 128b/130b: 31.5); 25 is the ~80 %
/// that a pinned cudaMemcpy is commonly reported to reach after packet overhead, an assumption
/// not measured on these instances.
inline constexpr double kPcieGen4x16GBps = 25.0;
/// The same for PCIe Gen5 x16 (H100 on p5.48xlarge, H200 on p5en.48xlarge): the H100 SXM5
/// datasheet gives "PCIe Gen5: 128 GB/s" both ways, 63 per direction at the line rate; 50 at
/// the same ~80 %.
inline constexpr double kPcieGen5x16GBps = 50.0;

/// Bytes one rank copies to the host and back over PCIe on the staged path for `kind` of
/// `bytes` (AllGather output, ReduceScatter input, AllReduce vector) among `n` ranks.
struct StagedCopies {
  double toHost = 0;    ///< D2H
  double toDevice = 0;  ///< H2D
  double total() const { return toHost + toDevice; }
};
StagedCopies stagedCopies(CollectiveKind kind, double bytes, int n);

/// The chunks K a staged call cuts each rank's block of `blockBytes` into at `chunkBytes`
/// (the engine's planChunks: near-equal chunks of at most `chunkBytes`). At least 1.
int stagedChunks(double blockBytes, size_t chunkBytes);

/// The time of a staged call of `chunks` chunks ("Data paths"): each chunk's host collective
/// takes `chunkCallUs` and its copies over PCIe `chunkCopyUs`.
double stagedUs(double chunkCallUs, double chunkCopyUs, int chunks);

/// Ranks that carry the same work in the hierarchical schedules ("Hierarchical" above).
struct HierClass {
  int local = 1;  ///< ranks on its node (L_k)
  int held = 0;   ///< foreign blocks it proxies (h)
};
/// The classes of `map`'s ranks; costs the distinct node sizes squared times L, not n times N.
std::vector<HierClass> hierClasses(const NodeMap& map);
/// The most blocks one rank's own NICs carry across nodes in either phase (even nodes: N-1).
int hierBlocksAcross(const std::vector<HierClass>& classes, int nodes);
/// The blocks the busiest node link carries each way over both phases of hierarchical
/// AllReduce where they share it: max over nodes k of L_k(N-1) + n - L_k.
int hierBothPhasesBlocks(const NodeMap& map);
/// Whether two ranks of different nodes send to each other in hierarchical's inter-node phase
/// under the engine's rotated proxy rule (hierarchical_pattern.hpp); n x N proxy lookups.
bool hierTwoWayPairs(const NodeMap& map);

/// One call's shape and parameters, derived once, and the costs of its steps.
class Model {
 public:
  Model(const CallShape& shape, const TunerParams& p, size_t chunk);

  int n() const { return n_; }
  size_t chunk() const { return chunk_; }
  double stepUs() const { return p_.stepUs; }
  bool dmaTransfers() const { return p_.dmaTransfers; }
  double fill() const { return fill_; }

  /// us per byte of a local message of x bytes ("Links", local).
  double localPerByte(double x) const {
    return x <= (o_ > 1 ? kFifoBytesOversubscribed : kFifoBytes) ? blCache_ : o_ * bl_;
  }
  /// The latency of one round of local messages.
  double localLatency() const { return o_ * p_.local.alphaUs + (o_ > 1 ? o_ * p_.switchUs : 0); }
  /// What one connection carries for x bytes each way ("half-duplex turns").
  double duplexLoad(double x) const {
    return p_.fabricHalfDuplex ? std::max(x, 2 * x - kDuplexOverlapBytes) : x;
  }
  /// The same for x bytes each way cut in the call's chunks.
  double chunkedDuplexLoad(double x) const {
    const double pieces = std::max(1.0, std::ceil(x / static_cast<double>(chunk_)));
    return pieces * duplexLoad(x / pieces);
  }
  /// The rails' factor on a message of x bytes ("Links", rails).
  double railScale(double x) const { return algo::railScale(p_, x); }
  /// One message of x bytes on a local edge.
  double localWire(double x) const { return o_ * x * localPerByte(x); }

  // cost_model_steps.cc
  /// One chunk of x bytes on a crossing edge of the ring ("Ring").
  double ringCrossWire(double x) const;
  /// The first chunk through the ring's n-1 hops ("Ring", chain).
  double ringChain(double wireLocal, double wireCross, double red, bool reduce) const;
  /// The alphas along the ring's critical chain ("Ring", CPU transport).
  double ringChainAlpha(bool reduce) const;
  /// One step to `peers` of x bytes ("One step"); `fill` counts the step's pipeline fill.
  void step(Cost& k, const StepPeers& peers, double x, bool reduce, bool chunked,
            bool fill = true) const;
  /// The longest chain through `steps` ("Log-step").
  void logSteps(Cost& k, const std::vector<LogStep>& steps) const;
  /// Direct: one step with a message of x bytes to every peer at once.
  void direct(Cost& k, double x) const;
  /// Single-copy handshakes, and `bytes` copied (`reduced` reduced) by each rank.
  void singleCopy(Cost& k, int handshakes, double bytes, double reduced) const;
  /// A copy of `bytes` on the rank's core.
  void copy(Cost& k, double bytes) const { k.transfer += o_ * bytes * c_; }

  // cost_model_hier.cc
  /// Hierarchical AllGather (reduce false) or ReduceScatter on blocks of m bytes.
  void hierarchical(Cost& k, double m, bool reduce) const;
  /// Hierarchical AllReduce on blocks of m bytes.
  void hierarchicalAllReduce(Cost& k, double m) const;
  // cost_model_hier_bruck.cc
  void hierarchicalBruck(Cost& k, double m, bool reduce) const;

 private:
  // Local messages up to this size move at cache speed (one FIFO slot, shm_endpoint.cc).
  static constexpr double kFifoBytes = 64 << 10;
  static constexpr double kFifoBytesOversubscribed = 16 << 10;

  // The longest paths of one hierarchical phase where DMA moves the bytes.
  struct HierPaths {
    double total = 0;                          // the longest
    double serial = 0;                         // the phase's own chain, as the window allows
    double local = 0, fabric = 0, thread = 0;  // each resource's work
    // serial = head + across + rest: before the rank's NICs start, while they carry the
    // phase's blocks, after
    double head = 0, across = 0, rest = 0;
    // ReduceScatter: when the last contribution has been posted and all but W have left
    double drained = 0;
  };
  // The CPU path's terms: the node link's and the rank's NICs' blocks, the forwards of each
  // block's last chunk, and `phases` phases of node-local copies.
  struct HierCpuTerms {
    double fabric = 0, forwarded = 0, local = 0;
  };
  HierPaths hierarchicalPaths(double m, bool reduce) const;
  HierCpuTerms hierCpuTerms(double m, double nodeBlocks, double rankBlocks, int phases) const;
  void hierarchicalDma(Cost& k, double m, bool reduce) const;

  // Buffers the log-step chain reuses across its steps and passes: the planner asks about
  // thousands of ranks, and allocations dominate under the sanitizers.
  struct LogScratch {
    std::vector<double> t0, lat0, post0, red0, outDone, inDone, outFree, inFree, rankOutFree,
        rankInFree;
    // logPass(): the crossing senders of a step, node by node (egress[egressFirst[i]..])
    std::vector<size_t> egressFirst, ingressFirst, egressNext, ingressNext;
    std::vector<int> egress, ingress;
    std::vector<std::pair<double, int>> active;  // share(): bytes left, sender
    // fairShares(): each rank's messages (start, bytes) and their (step, sender), rank by rank
    std::vector<size_t> outFirst, inFirst, outNext, inNext;
    std::vector<std::pair<double, double>> outMsg, inMsg;
    std::vector<std::pair<size_t, int>> outId, inId;
    // fairEnds()
    std::vector<double> end, left;
    std::vector<size_t> order, fair;
  };

  // The log-step chain's pieces (cost_model_steps.cc).
  void pipeline(Cost& k, double x, double perByte, bool reduce) const;
  void share(std::span<int> senders, const std::vector<double>& t, double x,
             std::vector<double>& done, double& free,
             std::vector<std::pair<double, int>>& active) const;
  static void fairEnds(const std::pair<double, double>* msgs, size_t k, double perByte,
                       LogScratch& s);
  void fairShares(const std::vector<LogStep>& steps,
                  const std::vector<std::vector<double>>& startAt,
                  std::vector<std::vector<double>>& outTook,
                  std::vector<std::vector<double>>& inTook, LogScratch& s) const;
  void logPass(Cost& k, const std::vector<LogStep>& steps,
               const std::vector<std::vector<double>>* outTook,
               const std::vector<std::vector<double>>* inTook,
               std::vector<std::vector<double>>& startAt, std::vector<double>& t,
               std::vector<double>& lat, std::vector<double>& post, std::vector<double>& red,
               LogScratch& s) const;

  const TunerParams& p_;
  int n_ = 1, nodes_ = 1, maxLocal_ = 1, hierRankBlocks_ = 0;
  size_t chunk_ = 1u << 20;
  double o_ = 1, bl_ = 0, bf_ = 0, bfRank_ = 0, c_ = 0, g_ = 0, blCache_ = 0, cma_ = 0;
  std::vector<int> node_;
  std::vector<HierClass> hier_;
  bool hierTwoWay_ = false;  // hierTwoWayPairs, where the fabric is half duplex
  int hierBothPhases_ = 0;   // hierBothPhasesBlocks, where the fabric is half duplex
  mutable double fill_ = 0;
};

}  // namespace sharc::algo::model
