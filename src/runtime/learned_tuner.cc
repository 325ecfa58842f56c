// The learning tuner (learned_tuner.hpp): exploration schedule, the agreement vector, the
// decision, and the `choice.` lines of a tuner file.
#include "runtime/learned_tuner.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <sharc/error.hpp>
#include <sstream>
#include <thread>

#include "core/collective.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "runtime/communicator_impl.hpp"

namespace sharc::detail {
namespace {

using algo::Algorithm;

// A median no rank measured.
constexpr double kMissing = 1e300;
// The incumbent is kept unless another plan is faster by more than this (noise).
constexpr double kKeepMargin = 1.03;
// Shapes remembered per communicator; past it the ones still counting are forgotten.
constexpr size_t kMaxShapes = 1024;

std::string fmtBytes(size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= (1u << 10) && b % (1u << 10) == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

std::string fmtUs(double us) {
  char buf[32];
  if (us >= kMissing / 2) return "unmeasured";
  if (us >= 1000)
    std::snprintf(buf, sizeof buf, "%.2f ms", us / 1000);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", us);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A 48-bit hash of the shape and its plans: exact as a double, so that the ranks can check
// with the max-reduction itself that they explored the same plans.
double plansHash(uint64_t key, const std::vector<LearnedPlan>& plans) {
  uint64_t h = core::kFnv1a64Basis;
  const auto mix = [&h](uint64_t x) { h = core::fnv1a64Word(x, h); };
  mix(key);
  for (const LearnedPlan& p : plans) {
    mix(static_cast<uint64_t>(p.algorithm));
    mix(p.chunkBytes);
  }
  return static_cast<double>(h & ((uint64_t{1} << 48) - 1));
}

}  // namespace

std::string planLabel(const LearnedPlan& p) {
  return std::string(algo::algorithmName(p.algorithm)) + "/" + fmtBytes(p.chunkBytes);
}

std::vector<LearnedPlan> LearnedTuner::plansToExplore(const algo::CallShape& shape,
                                                      const algo::TunerParams& params,
                                                      const LearnedPlan& incumbent) {
  struct Scored {
    LearnedPlan plan;
    double us;
  };
  const size_t cap = std::max(core::kMinChunkBytes, shape.maxMessageBytes);
  const size_t block = shape.kind == CollectiveKind::AllReduce
                           ? shape.bytesPerRank / static_cast<size_t>(shape.nranks) + 1
                           : shape.bytesPerRank;
  const auto same = [block](const LearnedPlan& x, const LearnedPlan& y) {
    return x.algorithm == y.algorithm &&
           (x.chunkBytes == y.chunkBytes ||
            (algo::chunkMatters(x.algorithm) && !algo::twoLevel(x.algorithm) &&
             x.chunkBytes >= block && y.chunkBytes >= block));
  };
  std::vector<Scored> all, bestPerAlgorithm;
  for (Algorithm a : algo::rankedCandidates(shape, params)) {
    std::vector<size_t> chunks;
    if (shape.chunkBytesSet || !algo::chunkMatters(a)) {
      chunks.push_back(std::min(shape.chunkBytes, cap));
    } else {
      // Chunks past a rank's block give the same schedule: only the first of them is tried.
      for (size_t c : algo::kChunkChoices)
        if (c <= cap && (chunks.empty() || algo::twoLevel(a) || chunks.back() < block))
          chunks.push_back(c);
      if (chunks.empty()) chunks.push_back(cap);
    }
    std::optional<Scored> best;
    for (size_t c : chunks) {
      const Scored s{{a, c}, algo::predictUs(shape, a, c, params)};
      all.push_back(s);
      if (!best || s.us < best->us) best = s;
    }
    bestPerAlgorithm.push_back(*best);
  }
  const auto byTime = [](const Scored& x, const Scored& y) { return x.us < y.us; };
  std::stable_sort(bestPerAlgorithm.begin(), bestPerAlgorithm.end(), byTime);
  std::stable_sort(all.begin(), all.end(), byTime);
  // The incumbent, every algorithm at its best chunk, then the other chunks, by prediction.
  std::vector<LearnedPlan> out{incumbent};
  for (const auto* list : {&bestPerAlgorithm, &all})
    for (const Scored& s : *list)
      if (out.size() < kMaxPlans && std::none_of(out.begin(), out.end(), [&](const LearnedPlan& p) {
            return same(p, s.plan);
          }))
        out.push_back(s.plan);
  return out;
}

LearnedPlan LearnedTuner::next(uint64_t key, const algo::CallShape& shape,
                               const algo::TunerParams& params, const LearnedPlan& model,
                               FlightRecorder& recorder, bool& explore) {
  explore = false;
  if (!learn_) return model;
  auto it = shapes_.find(key);
  if (it == shapes_.end()) {
    // Deterministic on every rank (the same calls in the same order): the same shapes go.
    // (never a shape agreeing: its buffers are in flight).
    for (Phase drop : {Phase::Counting, Phase::Settled})
      if (shapes_.size() >= kMaxShapes)
        std::erase_if(shapes_, [drop](const auto& kv) { return kv.second.phase == drop; });
    it = shapes_.emplace(key, Shape{}).first;
    it->second.kind = shape.kind;
    it->second.bytes = shape.bytesPerRank;
  }
  Shape& s = it->second;
  ++s.calls;
  const auto begin = [&](const LearnedPlan& incumbent) {
    s.plans = plansToExplore(shape, params, incumbent);
    s.incumbent = 0;
    s.samples.assign(s.plans.size(), {});
    s.pending.clear();
    s.nextCall = 0;
    s.phase = Phase::Exploring;
  };
  switch (s.phase) {
    case Phase::Counting:
      if (s.calls <= static_cast<uint64_t>(after_)) return model;
      s.model = model;
      begin(model);
      if (s.plans.size() < 2) {  // nothing to compare: the model's plan stays
        s.phase = Phase::Settled;
        s.chosen = model;
        s.chosenUs = s.modelUs = kMissing;
        s.exploreAt = ~uint64_t{0};
        ++s.explorations;
        return model;
      }
      break;
    case Phase::Settled:
      if (s.calls < s.exploreAt) return s.chosen;
      begin(s.chosen);
      break;
    case Phase::Exploring: harvest(s, recorder); break;
    case Phase::Agreeing:  // the agreement is being issued (or failed): the incumbent runs
    case Phase::Deciding: return s.plans[s.incumbent];
  }
  const size_t i = s.nextCall % s.plans.size();
  if (++s.nextCall == s.plans.size() * kRounds) s.phase = Phase::Agreeing;
  explore = true;
  ++explorationCalls_;
  return s.plans[i];
}

void LearnedTuner::track(uint64_t key, uint64_t traceId) {
  Shape& s = shapes_.at(key);
  s.pending.push_back({traceId, (s.nextCall - 1) % s.plans.size()});
}

void LearnedTuner::harvest(Shape& s, FlightRecorder& recorder) {
  std::erase_if(s.pending, [&](const Pending& p) {
    const TraceEntry* e = recorder.find(p.traceId);
    if (e && (e->state == TraceState::Queued || e->state == TraceState::Started)) return false;
    if (e && e->state == TraceState::Completed && e->endedNs >= e->startedNs)
      s.samples[p.plan].push_back(static_cast<double>(e->endedNs - e->startedNs) / 1e3);
    return true;  // failed or forgotten by the recorder: no sample
  });
}

LearnedTuner::Agreement* LearnedTuner::agreementToIssue(uint64_t key, FlightRecorder& recorder) {
  const auto it = shapes_.find(key);
  if (it == shapes_.end() || it->second.phase != Phase::Agreeing) return nullptr;
  Shape& s = it->second;
  // Only the calls completed by now count: waiting here for the others could stall a caller
  // that drives several operations at once (an exploration call not yet completed on this
  // rank gives no sample; the medians take the rest).
  harvest(s, recorder);
  std::vector<double>& v = s.agreement.mine;
  v.assign(kVectorLength, -1);  // not measured here: the max takes another rank's figure
  const double h = plansHash(key, s.plans);
  v[0] = h;
  v[1] = -h;
  for (size_t i = 0; i < s.plans.size(); ++i)
    if (!s.samples[i].empty()) v[2 + i] = median(s.samples[i]);
  s.agreement.all.assign(kVectorLength, 0);
  return &s.agreement;
}

void LearnedTuner::issued(uint64_t key, std::shared_ptr<RequestState> request) {
  Shape& s = shapes_.at(key);
  s.agreement.request = std::move(request);
  s.phase = Phase::Deciding;
}

bool LearnedTuner::decisionDue(uint64_t key, std::shared_ptr<RequestState>& request) {
  const auto it = shapes_.find(key);
  if (it == shapes_.end() || it->second.phase != Phase::Deciding) return false;
  request = it->second.agreement.request.lock();
  return true;
}

std::string LearnedTuner::decide(uint64_t key) {
  Shape& s = shapes_.at(key);
  std::vector<double> reduced = std::move(s.agreement.all);
  s.agreement = {};
  for (size_t i = 2; i < reduced.size(); ++i)
    if (reduced[i] < 0) reduced[i] = kMissing;  // no rank measured it
  const LearnedPlan incumbent = s.plans[s.incumbent];
  std::ostringstream log;
  log << core::collectiveName(s.kind) << " of " << s.bytes << " bytes per rank: ";
  size_t best = s.incumbent;
  if (reduced.size() != kVectorLength || reduced[0] != -reduced[1]) {
    log << "the ranks explored different plans; keeping " << planLabel(incumbent);
  } else {
    for (size_t i = 0; i < s.plans.size(); ++i)
      if (reduced[2 + i] < reduced[2 + best]) best = i;
    const double keep = reduced[2 + s.incumbent];
    if (keep < kMissing / 2 && keep <= kKeepMargin * reduced[2 + best]) best = s.incumbent;
    log << "learned " << planLabel(s.plans[best]) << " (" << fmtUs(reduced[2 + best])
        << "; incumbent " << planLabel(incumbent) << " " << fmtUs(keep) << "); medians of "
        << kRounds << " calls, slowest rank:";
    for (size_t i = 0; i < s.plans.size(); ++i)
      log << (i ? ", " : " ") << planLabel(s.plans[i]) << " " << fmtUs(reduced[2 + i]);
  }
  s.chosen = s.plans[best];
  s.chosenUs = reduced.size() == kVectorLength ? reduced[2 + best] : kMissing;
  if (s.explorations == 0) s.modelUs = reduced.size() == kVectorLength ? reduced[2] : kMissing;
  ++s.explorations;
  // Re-explored rarely: at 200·E, 400·E, 800·E... calls of the shape (E calls per
  // exploration), so that exploring stays within 1 % of the calls from 200·E on.
  const uint64_t e = s.plans.size() * kRounds;
  s.exploreAt = std::max<uint64_t>(s.calls * 2, 200 * e << (s.explorations - 1));
  s.phase = Phase::Settled;
  s.samples.assign(s.plans.size(), {});
  s.pending.clear();
  return log.str();
}

bool LearnedTuner::settled(uint64_t key, LearnedPlan& plan, std::string* note) const {
  const auto it = shapes_.find(key);
  if (it == shapes_.end() || it->second.explorations == 0) return false;
  plan = it->second.chosen;
  if (note)
    *note = "learned: measured " + fmtUs(it->second.chosenUs) + " against the model's " +
            planLabel(it->second.model) + " " + fmtUs(it->second.modelUs);
  return true;
}

std::vector<core::TunerChoice> LearnedTuner::choices(int ranks, int nodes) const {
  std::vector<core::TunerChoice> out;
  for (const auto& [key, s] : shapes_) {
    if (s.explorations == 0) continue;
    core::TunerChoice c;
    c.collective = s.kind;
    c.bytes = s.bytes;
    c.ranks = ranks;
    c.nodes = nodes;
    c.algorithm = s.chosen.algorithm;
    c.chunkBytes = s.chosen.chunkBytes;
    out.push_back(std::move(c));
  }
  return out;
}

bool fileChoice(const algo::CallShape& shape, int nodes, LearnedPlan& plan) {
  const core::Config& config = core::Config::get();
  for (const core::TunerChoice& c : config.tunerChoices) {
    if (c.collective != shape.kind || c.bytes != shape.bytesPerRank || c.ranks != shape.nranks ||
        c.nodes != nodes)
      continue;
    const auto options = algo::candidates(shape);
    if (std::find(options.begin(), options.end(), c.algorithm) == options.end()) {
      SHARC_WARN("SHARC_TUNER_FILE '" << config.tunerFile << "': choice."
                                      << core::collectiveKey(c.collective) << "." << c.bytes << "."
                                      << c.ranks << "." << c.nodes << " = "
                                      << algo::algorithmName(c.algorithm)
                                      << " cannot run here (not a candidate); using the model");
      return false;
    }
    plan.algorithm = c.algorithm;
    const size_t cap = std::max(core::kMinChunkBytes, shape.maxMessageBytes);
    plan.chunkBytes = std::min(shape.chunkBytesSet ? shape.chunkBytes : c.chunkBytes, cap);
    return true;
  }
  return false;
}

void saveChoices(const std::string& path, const std::vector<core::TunerChoice>& choices) {
  const auto fail = [&](const std::string& what) {
    throw Error(Result::SystemError,
                "SHARC_TUNER_SAVE '" + path + "': " + what + ": " + std::strerror(errno));
  };
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot open");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }  // also releases the lock
  } closer{fd};
  // Ranks of several communicators may save at once: one at a time, at most 10 s.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() > until) fail("cannot lock");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::string text;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0) fail("cannot read");
    text.append(buf, static_cast<size_t>(n));
  }
  // key -> line: the file's, then this job's parameters, then the choices learned here.
  std::map<std::string, std::string> params, learned;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const std::string body = line.substr(0, line.find('#'));
    const size_t eq = body.find('=');
    if (eq == std::string::npos) continue;
    std::string key = body.substr(0, eq);
    key.erase(0, key.find_first_not_of(" \t"));
    key.erase(key.find_last_not_of(" \t") + 1);
    (key.starts_with("choice.") ? learned : params)[key] = line;
  }
  for (const auto& [key, value] : core::Config::get().tuner) {
    std::ostringstream line;
    line.precision(10);
    line << key << " = " << value;
    params[key] = line.str();
  }
  for (const core::TunerChoice& c : choices) {
    const std::string key = "choice." + core::collectiveKey(c.collective) + "." +
                            std::to_string(c.bytes) + "." + std::to_string(c.ranks) + "." +
                            std::to_string(c.nodes);
    learned[key] =
        key + " = " + algo::algorithmName(c.algorithm) + " chunk=" + std::to_string(c.chunkBytes);
  }
  std::string out =
      "# sharc tuner file (SHARC_TUNER_FILE): model parameters, then learned choices\n"
      "# choice.<collective>.<bytes per rank>.<ranks>.<nodes> = <algorithm> chunk=<bytes>\n";
  for (const auto* m : {&params, &learned})
    for (const auto& [key, line] : *m) out += line + "\n";
  if (::ftruncate(fd, 0) != 0) fail("cannot truncate");
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::pwrite(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n <= 0) fail("cannot write");
    done += static_cast<size_t>(n);
  }
}

}  // namespace sharc::detail
