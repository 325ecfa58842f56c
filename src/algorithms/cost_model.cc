// The cost model: what each algorithm's schedule runs, step by step (cost_model.hpp, "Per
// algorithm"), and the call's shape derived once (Model).
#include "cost_model.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "patterns.hpp"

namespace sharc::algo::model {
namespace {

// Read once: the tuner runs on every call, and this is a system call.
int detectCores() {
  static const int cores = [] {
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return CPU_COUNT(&cpus);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }();
  return cores;
}

StepPeers peers(StepPeers::Kind kind, int n, int step) {
  return StepPeers{kind, n, step, floorPowerOfTwo(std::max(1, n))};
}

// The ring's n-1 steps are alike: one is costed and repeated ("Ring").
void ringSteps(const Model& md, Cost& k, double m, bool reduce) {
  const int n = md.n();
  if (n < 2) return;
  const StepPeers next = peers(StepPeers::Kind::Ring, n, 0);
  Cost one;
  if (!md.dmaTransfers()) {  // the transport's copies and the reductions share the cores: add
    md.step(one, next, m, reduce, true);
    k.addRepeated(one, n - 1);
    k.latency += md.ringChainAlpha(reduce) - (n - 1) * (one.latency - md.stepUs());
    return;
  }
  md.step(one, next, m, reduce, true, false);
  const int steps = n - 1;
  const double s = md.stepUs();
  const double chunks = std::max(1.0, std::ceil(m / static_cast<double>(md.chunk())));
  const double wire = one.transfer, red = one.reduce;  // one step's, the slowest link
  const double wire1 = wire / chunks, red1 = red / chunks;
  const double alpha = one.latency - s;  // the slowest link class's
  const double wireLocal = md.localWire(m / chunks), wireCross = md.ringCrossWire(m / chunks);
  const double first = md.ringChain(wireLocal, wireCross, red1, reduce);
  const double chain = first + (chunks - 1) * std::max(wire1, red1 + s);
  const double link = s + steps * wire + alpha + red1;
  const double thread = steps * chunks * (s + red1) + alpha + wire1;
  k.steps += steps;
  k.fabric = k.fabric || one.fabric;
  if (chain >= link && chain >= thread) {
    k.latency += first;  // the first chunk through every step, its wire and reductions too
    k.transfer += (chunks - 1) * wire1;
    k.pipeline += chain - first - (chunks - 1) * wire1;
  } else if (link >= thread) {
    k.latency += s + alpha;
    k.transfer += steps * wire;
    k.reduce += red1;
  } else {
    k.latency += alpha;
    k.transfer += wire1;
    k.reduce += steps * chunks * red1;
    k.pipeline += steps * chunks * s;
  }
}

void allGather(const Model& md, Cost& k, Algorithm a, double m) {
  const int n = md.n();
  switch (a) {
    case Algorithm::RecursiveDoubling:
      md.logSteps(k, logStepsOf(CollectiveKind::AllGather, a, n, m));
      return;
    case Algorithm::Bruck:
      md.logSteps(k, logStepsOf(CollectiveKind::AllGather, a, n, m));
      md.copy(k, n * m);
      return;
    case Algorithm::Direct: md.direct(k, m); return;
    case Algorithm::DirectRead:
    case Algorithm::DirectWrite: md.singleCopy(k, 2, (n - 1) * m, 0); return;
    case Algorithm::Hierarchical: md.hierarchical(k, m, false); return;
    case Algorithm::HierarchicalBruck: md.hierarchicalBruck(k, m, false); return;
    default: ringSteps(md, k, m, false); return;
  }
}

void reduceScatter(const Model& md, Cost& k, Algorithm a, double m) {
  const int n = md.n();
  switch (a) {
    case Algorithm::RecursiveDoubling:
      md.logSteps(k, logStepsOf(CollectiveKind::ReduceScatter, a, n, m));
      return;
    case Algorithm::Bruck:  // the rotated copy comes first (reduce_scatter.cc)
      md.copy(k, n * m);
      md.logSteps(k, logStepsOf(CollectiveKind::ReduceScatter, a, n, m));
      return;
    case Algorithm::DirectRead:
    case Algorithm::DirectWrite: md.singleCopy(k, 2, (n - 1) * m, (n - 1) * m); return;
    case Algorithm::Hierarchical: md.hierarchical(k, m, true); return;
    case Algorithm::HierarchicalBruck: md.hierarchicalBruck(k, m, true); return;
    default: ringSteps(md, k, m, true); return;
  }
}

void allReduce(const Model& md, Cost& k, Algorithm a, double v) {
  const int n = md.n();
  const double m = v / n;
  switch (a) {
    case Algorithm::RecursiveDoubling:
      md.logSteps(k, logStepsOf(CollectiveKind::AllReduce, a, n, v));
      return;
    case Algorithm::DirectRead:
    case Algorithm::DirectWrite: md.singleCopy(k, 4, 2 * (n - 1) * m, (n - 1) * m); return;
    case Algorithm::Hierarchical: md.hierarchicalAllReduce(k, m); return;
    default:
      reduceScatter(md, k, Algorithm::Ring, m);
      allGather(md, k, Algorithm::Ring, m);
      return;
  }
}

// The start copy ("One step"): the log-step schedules send from what it copied; the ring and
// direct send from the input, so by DMA it overlaps their wire.
void startCopy(const Model& md, Cost& k, CollectiveKind kind, Algorithm a, double x) {
  const bool logStep = a == Algorithm::RecursiveDoubling || a == Algorithm::Bruck;
  const bool beside = a == Algorithm::Ring || a == Algorithm::Direct;
  const bool gather =
      kind == CollectiveKind::AllGather && (logStep || (beside && !md.dmaTransfers()));
  const bool doubling = kind == CollectiveKind::AllReduce && a == Algorithm::RecursiveDoubling;
  if (gather || doubling) md.copy(k, x);
}

// The busiest node's sent bytes over `steps`, summed, on nodes of L ranks numbered node by node.
double busiestNodeBytes(const std::vector<LogStep>& steps, int n, int L) {
  double total = 0;
  std::vector<double> out(static_cast<size_t>(n / L), 0);
  for (const LogStep& st : steps) {
    std::fill(out.begin(), out.end(), 0.0);
    for (int r = 0; r < n; ++r) {
      const int q = st.peers.to(r);
      if (q == r || q < 0 || q >= n || q / L == r / L) continue;
      out[static_cast<size_t>(r / L)] += st.x;
    }
    total += *std::max_element(out.begin(), out.end());
  }
  return total;
}

}  // namespace

int StepPeers::to(int r) const {
  switch (kind) {
    case Kind::Ring: return ringSendPeer(r, n);
    case Kind::Doubling: return recursiveDoublingPartner(r, step);
    case Kind::Halving: return recursiveHalvingStep(r, n, step).partner;
    case Kind::Bruck: return bruckAllGatherStep(r, n, step).sendPeer;
    case Kind::ReverseBruck: return reverseBruckStep(r, n, step).sendPeer;
    case Kind::Dissemination: return disseminationSendPeer(r, n, step);
    case Kind::FoldIn: return r >= p ? r - p : r;
    case Kind::FoldedDoubling: return r < p ? recursiveDoublingPartner(r, step) : r;
    case Kind::FoldOut: return r < n - p ? r + p : r;
  }
  return r;
}

int StepPeers::from(int r) const {
  switch (kind) {
    case Kind::Ring: return ringRecvPeer(r, n);
    case Kind::Bruck: return bruckAllGatherStep(r, n, step).recvPeer;
    case Kind::ReverseBruck: return reverseBruckStep(r, n, step).recvPeer;
    case Kind::Dissemination: return disseminationRecvPeer(r, n, step);
    case Kind::FoldIn: return r < n - p ? r + p : r;
    case Kind::FoldOut: return r >= p ? r - p : r;
    default: return to(r);  // the exchanges
  }
}

std::vector<LogStep> logStepsOf(CollectiveKind kind, Algorithm a, int n, double m) {
  using K = StepPeers::Kind;
  std::vector<LogStep> steps;
  if (a != Algorithm::RecursiveDoubling && a != Algorithm::Bruck) return steps;
  switch (kind) {
    case CollectiveKind::AllGather:
      if (a == Algorithm::RecursiveDoubling) {
        for (int k = 0; (1 << k) < n; ++k)
          steps.push_back({peers(K::Doubling, n, k),
                           static_cast<double>(recursiveDoublingHeld(0, k).count) * m, false});
      } else {
        for (int k = 0; (1 << k) < n; ++k)
          steps.push_back({peers(K::Bruck, n, k), bruckAllGatherStep(0, n, k).blocks * m, false});
      }
      return steps;
    case CollectiveKind::ReduceScatter:
      if (a == Algorithm::RecursiveDoubling) {
        for (int k = 0; (n >> (k + 1)) >= 1; ++k)
          steps.push_back({peers(K::Halving, n, k),
                           static_cast<double>(recursiveHalvingStep(0, n, k).send.count) * m,
                           true});
      } else {
        for (int k = 0; k < reverseBruckSteps(n); ++k)
          steps.push_back(
              {peers(K::ReverseBruck, n, k), reverseBruckStep(0, n, k).blocks * m, true});
      }
      return steps;
    case CollectiveKind::AllReduce: {
      // all_reduce.cc: whole vectors of m bytes; off a power of two the others fold in first
      const StepPeers fold = peers(K::FoldIn, n, 0);
      if (n > fold.p) steps.push_back({fold, m, true, true});
      for (int k = 0; (1 << k) < fold.p; ++k)
        steps.push_back({peers(K::FoldedDoubling, n, k), m, true, true});
      if (n > fold.p) steps.push_back({peers(K::FoldOut, n, 0), m, false, true});
      return steps;
    }
    default: return steps;
  }
}

Model::Model(const CallShape& shape, const TunerParams& p, size_t chunk) : p_(p) {
  n_ = std::max(1, shape.nranks);
  chunk_ = modelChunkBytes(chunk);
  const bool map =
      shape.locality == Locality::Network && shape.nodes != nullptr && shape.nodes->size() == n_;
  // Without a map, Network means one rank per node, the one-host localities one node.
  const bool spread = !map && shape.locality == Locality::Network;
  node_.assign(static_cast<size_t>(n_), 0);
  for (int r = 0; r < n_; ++r)
    node_[r] = map ? shape.nodes->nodeOf[static_cast<size_t>(r)] : spread ? r : 0;
  nodes_ = map ? shape.nodes->nodes() : spread ? n_ : 1;
  maxLocal_ = map ? shape.nodes->maxLocal() : spread ? 1 : n_;
  const int cores = p.cores > 0 ? p.cores : detectCores();
  o_ = std::max(1.0, static_cast<double>(maxLocal_) / std::max(1, cores));
  bl_ = p.local.usPerByte();
  bf_ = p.fabric.usPerByte();
  bfRank_ = bf_ / std::clamp(p.fabricRankShare, 1e-9, 1.0);  // one rank's own NICs
  // The hierarchical classes only where two levels apply: the tuner runs on every call.
  hier_ = map && nodes_ > 1 && maxLocal_ > 1 ? hierClasses(*shape.nodes)
                                             : std::vector<HierClass>{{maxLocal_, nodes_ - 1}};
  hierRankBlocks_ = nodes_ - 1;
  if (bfRank_ > bf_ && map && maxLocal_ * nodes_ != n_)
    hierRankBlocks_ = hierBlocksAcross(hier_, nodes_);
  if (map && p.fabricHalfDuplex && !p.dmaTransfers) hierTwoWay_ = hierTwoWayPairs(*shape.nodes);
  if (p.fabricHalfDuplex && !p.dmaTransfers)  // read only by hierarchicalAllReduce's CPU path
    hierBothPhases_ = map ? hierBothPhasesBlocks(*shape.nodes) : 2 * maxLocal_ * (nodes_ - 1);
  c_ = 1.0 / (p.copyGbps * 1e3);
  cma_ = 1.0 / ((p.cmaGbps > 0 ? p.cmaGbps : p.copyGbps) * 1e3);
  blCache_ = 1.0 / (p.localCacheGbps * 1e3);
  g_ = 1.0 / (p.reduceGbps * 1e3);
}

Cost callCost(const CallShape& shape, Algorithm a, size_t chunkBytes, const TunerParams& p) {
  const Model md(shape, p, chunkBytes);
  Cost k;
  const double x = static_cast<double>(shape.bytesPerRank);
  const int n = md.n();
  if (n > 1) switch (shape.kind) {
      case CollectiveKind::AllGather: allGather(md, k, a, x); break;
      case CollectiveKind::ReduceScatter: reduceScatter(md, k, a, x); break;
      case CollectiveKind::AllReduce: allReduce(md, k, a, x); break;
      case CollectiveKind::Broadcast:
        for (int s = 0; (1 << s) < n; ++s)
          md.step(k, peers(StepPeers::Kind::Doubling, n, s), x, false, true);
        break;
      default:
        for (int s = 0; (1 << s) < n; ++s)
          md.step(k, peers(StepPeers::Kind::Dissemination, n, s), 0, false, false);
        break;
    }
  if (n > 1) startCopy(md, k, shape.kind, a, x);
  k.latency += p.stepUs;  // building and starting the schedule
  k.pipeline += md.fill();
  return k;
}

std::optional<double> fabricBytesPerNode(CollectiveKind kind, Algorithm a, double bytes, int N,
                                         int L) {
  if (N <= 1) return 0.0;
  const int n = N * L;
  const double times = kind == CollectiveKind::AllReduce ? 2.0 : 1.0;
  const double m = bytes / n;  // one rank's block (AllReduce: of the vector split n ways)
  switch (a) {
    case Algorithm::Hierarchical:
    case Algorithm::HierarchicalBruck: return times * bytes * (N - 1) / N;
    case Algorithm::Ring: return times * bytes * (n - 1) / n;  // one edge out of a node a step
    case Algorithm::Direct: return static_cast<double>(L) * (n - L) * m;
    case Algorithm::RecursiveDoubling:
    case Algorithm::Bruck:
      return busiestNodeBytes(logStepsOf(kind, a, n, kind == CollectiveKind::AllReduce ? bytes : m),
                              n, L);
    default: return std::nullopt;
  }
}

const char* dataPathName(DataPath p) {
  return p == DataPath::Staged ? "staged" : "device-direct";
}

StagedCopies stagedCopies(CollectiveKind kind, double bytes, int n) {
  const double piece = bytes / std::max(1, n);
  switch (kind) {
    case CollectiveKind::AllGather: return {piece, bytes};
    case CollectiveKind::ReduceScatter: return {bytes, piece};
    default: return {bytes, bytes};
  }
}

int stagedChunks(double blockBytes, size_t chunkBytes) {
  const double chunk = static_cast<double>(std::max<size_t>(1, chunkBytes));
  return std::max(1, static_cast<int>(std::ceil(blockBytes / chunk)));
}

double stagedUs(double chunkCallUs, double chunkCopyUs, int chunks) {
  return (std::max(1, chunks) - 1) * std::max(chunkCallUs, chunkCopyUs) + chunkCallUs + chunkCopyUs;
}

}  // namespace sharc::algo::model
