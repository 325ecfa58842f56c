// The tuner: which algorithms can run a call, what a forced one runs as, and the cheapest
// candidate and chunk by the cost model (cost_model.hpp, where the formulas are).
#include "tuner.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/config.hpp"
#include "cost_model.hpp"
#include "hierarchical_pattern.hpp"
#include "patterns.hpp"

namespace sharc::algo {
namespace {

// The defaults, measured on the project's 2-core host with `sharc-perf --calibrate`; the
// latencies follow quieter forced-algorithm runs (docs/tuner.md, "Why the constants are what
// they are").
constexpr LinkParams kLocal{1.5, 3.5};
constexpr LinkParams kFabric{40.0, 1.8};
constexpr double kCopyGbps = 8.0;
constexpr double kReduceGbps = 10.0;
constexpr double kStepUs = 1.0;

// A CUDA queue's rates where SHARC_TUNER_FILE sets none: an H100 SXM5's HBM3 (datasheet: 3.35
// TB/s); a copy reads and writes each byte (1/2), a reduction reads two and writes one (1/3),
// as sharc-plan's cluster profiles assume.
constexpr double kGpuHbmGbps = 3350.0;
// What a staged message adds for its two queued copies (device -> host at the sender, host ->
// device at the receiver) beyond their bytes: a copy's launch on a stream, ~5 us each.
constexpr double kStagedCopiesUs = 10.0;

// Direct algorithms keep n-1 transfers in flight per rank: only for small groups.
constexpr int kDirectMaxRanks = 8;

// Below these node counts both two-level forms move the same bytes with few peers, and the
// replay shows no gain for the Bruck (docs/tuner.md): AllGather from 8 nodes, ReduceScatter
// (whose steps overlap) from 4.
int bruckMinNodes(CollectiveKind kind) {
  return kind == CollectiveKind::ReduceScatter ? 4 : 8;
}

bool unchunked(Algorithm a) {
  return a == Algorithm::RecursiveDoubling || a == Algorithm::Bruck;
}

// Bytes the whole call moves in one message for the unchunked algorithms.
size_t wholeMessage(const CallShape& s) {
  return s.kind == CollectiveKind::AllReduce ? s.bytesPerRank
                                             : s.bytesPerRank * static_cast<size_t>(s.nranks);
}

// What the schedule builders (all_gather.cc, reduce_scatter.cc, all_reduce.cc) really run for
// a forced algorithm: SHARC_ALGO=direct_write on a ReduceScatter runs the ring, a recursive
// doubling on a group that is not a power of two runs Bruck, the single-copy forms need
// cross-memory attach and host buffers. The model costs that, not the name.
Algorithm runsAs(const CallShape& s, Algorithm a) {
  if (s.device) a = deviceAlgorithm(a);
  // The Bruck across nodes needs nodes of one size; AllReduce has the direct form only.
  if (a == Algorithm::HierarchicalBruck &&
      (s.kind == CollectiveKind::AllReduce || !s.nodes || !s.nodes->uniform()))
    a = Algorithm::Hierarchical;
  const bool pow2 = isPowerOfTwo(s.nranks);
  const bool single = s.locality == Locality::OneHostSingleCopy;
  switch (s.kind) {
    case CollectiveKind::AllGather:
      if (a == Algorithm::RecursiveDoubling && !pow2) return Algorithm::Bruck;
      if ((a == Algorithm::DirectRead || a == Algorithm::DirectWrite) && !single)
        return Algorithm::Direct;
      return a == Algorithm::DirectRead ? Algorithm::DirectWrite : a;
    case CollectiveKind::ReduceScatter:
      if (a == Algorithm::RecursiveDoubling && !pow2) return Algorithm::Bruck;
      if (a == Algorithm::Direct || a == Algorithm::DirectWrite) return Algorithm::Ring;
      if (a == Algorithm::DirectRead && !single) return Algorithm::Ring;
      return a;
    case CollectiveKind::AllReduce:
      if (a == Algorithm::Bruck) return Algorithm::RecursiveDoubling;
      if (a == Algorithm::Direct || a == Algorithm::DirectWrite) return Algorithm::Ring;
      if (a == Algorithm::DirectRead && !single) return Algorithm::Ring;
      return a;
    default: return a;
  }
}

std::string fmtBytes(size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

}  // namespace

TunerParams TunerParams::defaults() {
  TunerParams p;
  p.local = kLocal;
  p.fabric = kFabric;
  p.copyGbps = kCopyGbps;
  p.reduceGbps = kReduceGbps;
  p.stepUs = kStepUs;
  p.cores = 0;
  // Fitted to 4 ranks on 2 cores: direct's FIFO against direct_write's handshakes.
  p.localCacheGbps = 12.0;
  p.switchUs = 4.0;
  p.fabricHalfDuplex = true;  // this machine's fabric is tcp
  p.dmaTransfers = false;     // tcp and shared memory copy on the ranks' cores
  p.postedSends = static_cast<int>(kMinPostedSends);  // the engine's window's floor
  p.gpuCopyGbps = kGpuHbmGbps / 2;
  p.gpuReduceGbps = kGpuHbmGbps / 3;
  p.pcieGbps = model::kPcieGen5x16GBps;
  return p;
}

DeviceCall deviceCallRates(const TunerParams& p, bool hostQueue) {
  DeviceCall d;
  d.reduceGbps = hostQueue ? p.reduceGbps : p.gpuReduceGbps;
  d.copyGbps = hostQueue ? p.copyGbps : p.gpuCopyGbps;
  d.stagingGbps = hostQueue ? p.copyGbps : p.pcieGbps;
  return d;
}

namespace {

// A link whose messages stage through host memory: each crosses the device's copy to and
// from the host as well (pipelined over the chunks, so the slower sets the rate).
LinkParams staged(LinkParams link, const DeviceCall& d) {
  link.gbps = std::min(link.gbps, d.stagingGbps);
  link.alphaUs += kStagedCopiesUs;
  return link;
}

// The parameters a call is costed with: on device buffers, the queue's copies and reductions,
// and the staged links' copies (cost_model.hpp, Data paths). `storage` holds them.
const TunerParams& paramsFor(const CallShape& shape, const TunerParams& p, TunerParams& storage) {
  if (shape.device == nullptr) return p;
  const DeviceCall& d = *shape.device;
  storage = p;
  storage.reduceGbps = d.reduceGbps;
  storage.copyGbps = d.copyGbps;
  storage.cmaGbps = 0;
  if (d.stagedLocal) {
    storage.local = staged(p.local, d);
    storage.localCacheGbps = std::min(p.localCacheGbps, d.stagingGbps);
  }
  if (d.stagedFabric) storage.fabric = staged(p.fabric, d);
  return storage;
}

}  // namespace

std::string TunerParams::toText() const {
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "local.alpha_us = %.3f\nlocal.gbps = %.3f\nfabric.alpha_us = %.3f\n"
                "fabric.gbps = %.3f\ncopy.gbps = %.3f\nreduce.gbps = %.3f\nstep_us = %.3f\n"
                "cores = %d\nlocal.cache_gbps = %.3f\nswitch_us = %.3f\nfabric.half_duplex = %d\n"
                "cma.gbps = %.3f\ngpu.copy_gbps = %.3f\ngpu.reduce_gbps = %.3f\n"
                "gpu.pcie_gbps = %.3f\n",
                local.alphaUs, local.gbps, fabric.alphaUs, fabric.gbps, copyGbps, reduceGbps,
                stepUs, cores, localCacheGbps, switchUs, fabricHalfDuplex ? 1 : 0,
                cmaGbps > 0 ? cmaGbps : copyGbps, gpuCopyGbps, gpuReduceGbps, pcieGbps);
  return buf;
}

bool chunkMatters(Algorithm a) {
  return a == Algorithm::Ring || a == Algorithm::Direct || twoLevel(a);
}

std::vector<Algorithm> candidates(const CallShape& s) {
  const int n = s.nranks;
  const bool single = s.locality == Locality::OneHostSingleCopy && n <= kDirectMaxRanks;
  const bool oneHost = s.locality != Locality::Network && n <= kDirectMaxRanks;
  const bool hier = s.locality == Locality::Network && s.nodes && s.nodes->size() == n &&
                    s.nodes->nodes() > 1 && s.nodes->maxLocal() > 1;
  const bool fits = wholeMessage(s) <= s.maxMessageBytes;
  // Ties keep the earlier candidate: the log-step ones first (fewest messages), then Ring.
  std::vector<Algorithm> out;
  const auto logStep = [&](bool bruck) {
    if (fits && (isPowerOfTwo(n) || !bruck)) out.push_back(Algorithm::RecursiveDoubling);
    if (fits && bruck) out.push_back(Algorithm::Bruck);
    out.push_back(Algorithm::Ring);
  };
  switch (s.kind) {
    case CollectiveKind::AllGather:
      logStep(true);
      if (oneHost) out.push_back(Algorithm::Direct);
      if (single) out.push_back(Algorithm::DirectWrite);
      break;
    case CollectiveKind::ReduceScatter:
      logStep(true);
      if (single) out.push_back(Algorithm::DirectRead);
      break;
    case CollectiveKind::AllReduce:
      logStep(false);
      if (single) out.push_back(Algorithm::DirectRead);
      break;
    case CollectiveKind::Broadcast: return {Algorithm::BinomialTree};
    default: return {Algorithm::Dissemination};
  }
  if (hier) out.push_back(Algorithm::Hierarchical);
  if (hier && s.nodes->uniform() && s.kind != CollectiveKind::AllReduce)
    out.push_back(Algorithm::HierarchicalBruck);
  if (s.device) std::erase_if(out, [](Algorithm a) { return deviceAlgorithm(a) != a; });
  return out;
}

std::vector<Algorithm> rankedCandidates(const CallShape& shape, const TunerParams& p) {
  std::vector<Algorithm> out = candidates(shape);
  if (!p.dmaTransfers || !shape.nodes || shape.nodes->nodes() < bruckMinNodes(shape.kind))
    std::erase(out, Algorithm::HierarchicalBruck);
  return out;
}

double predictUs(const CallShape& shape, Algorithm a, size_t chunkBytes, const TunerParams& params,
                 std::string* breakdown) {
  TunerParams storage;
  const TunerParams& p = paramsFor(shape, params, storage);
  const model::Cost k = model::callCost(shape, a, chunkBytes, p);
  if (breakdown) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s: %d steps%s, latency %.1f + transfer %.1f + reduce %.1f + pipeline %.1f "
                  "(chunk %s) = %.1f us",
                  algorithmName(a), k.steps, k.fabric ? " (fabric)" : "", k.latency, k.transfer,
                  k.reduce, k.pipeline, fmtBytes(chunkBytes).c_str(), k.total());
    *breakdown = buf;
    if (k.fabric) {  // which link the prediction assumed, and where it came from
      std::snprintf(buf, sizeof buf, "; fabric %.4g GB/s, alpha %.0f us%s (%s)", p.fabric.gbps,
                    p.fabric.alphaUs, p.fabricHalfDuplex ? ", half duplex" : "",
                    p.fabricSource.c_str());
      *breakdown += buf;
      if (p.fabricRails > 1 && p.fabricRailShare < 1) {
        std::snprintf(buf, sizeof buf, "; %d rails of %.4g GB/s, under 32 KiB one", p.fabricRails,
                      p.fabric.gbps * p.fabricRailShare);
        *breakdown += buf;
      }
    }
    if (shape.device) {
      std::snprintf(buf, sizeof buf, "; device queue: reduce %.4g GB/s%s", p.reduceGbps,
                    shape.device->stagedLocal || shape.device->stagedFabric
                        ? ", staged links at most the queue's host copies"
                        : "");
      *breakdown += buf;
    }
  }
  return k.total();
}

Plan plan(const CallShape& shape, const TunerParams& p, bool withBreakdown) {
  std::optional<Algorithm> forced;
  switch (shape.kind) {
    case CollectiveKind::AllGather: forced = shape.override.allGather; break;
    case CollectiveKind::ReduceScatter: forced = shape.override.reduceScatter; break;
    case CollectiveKind::AllReduce: forced = shape.override.allReduce; break;
    default: break;
  }
  // Log-step algorithms send whole (multi-)blocks in one message: past the provider's
  // largest message the chunked ring carries the call instead.
  if (forced && unchunked(*forced) && wholeMessage(shape) > shape.maxMessageBytes)
    forced = Algorithm::Ring;
  // Two levels need several nodes and a node with several ranks; else the ring is what runs.
  if (forced && twoLevel(*forced) && !(shape.nodes && hierApplies(*shape.nodes)))
    forced = Algorithm::Ring;
  // A forced name that runs as another schedule keeps the chunk it had (SHARC_CHUNK_BYTES or
  // its default), as the schedule it runs is built with that chunk.
  const bool keepChunk = forced && !chunkMatters(*forced);
  if (forced) forced = runsAs(shape, *forced);
  const std::vector<Algorithm> options =
      forced ? std::vector<Algorithm>{*forced} : rankedCandidates(shape, p);
  const size_t cap = std::max(core::kMinChunkBytes, shape.maxMessageBytes);
  Plan best;
  best.predictedUs = -1;
  for (Algorithm a : options) {
    std::vector<size_t> chunks;
    if (shape.chunkBytesSet || keepChunk || !chunkMatters(a)) {
      chunks.push_back(std::min(shape.chunkBytes, cap));
    } else {
      for (size_t c : kChunkChoices)
        if (c <= cap) chunks.push_back(c);
      if (chunks.empty()) chunks.push_back(cap);
    }
    for (size_t c : chunks) {
      const double t = predictUs(shape, a, c, p);
      // Strictly cheaper wins, so ties keep the earlier (simpler) candidate and chunk.
      if (best.predictedUs < 0 || t < best.predictedUs) {
        best.algorithm = a;
        best.chunkBytes = c;
        best.predictedUs = t;
      }
    }
  }
  // Formatting the terms costs more than the model: only for the winner (this runs per call).
  if (withBreakdown) predictUs(shape, best.algorithm, best.chunkBytes, p, &best.breakdown);
  if (forced && withBreakdown) best.breakdown += " [SHARC_ALGO]";
  return best;
}

}  // namespace sharc::algo
