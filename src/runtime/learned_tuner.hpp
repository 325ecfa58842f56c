// The learning tuner: for a shape (collective, bytes) called often on one communicator, it
// runs the cost model's runner-up plans (algorithm and chunk) a few times each, then the
// ranks agree on the fastest measured one and keep it. The agreement is one small internal
// AllReduce(max) of each rank's medians, issued (not waited for) at the next call of that
// shape and read at the one after: the same calls on every rank, so every rank switches at
// the same call. Choices learned, or read from SHARC_TUNER_FILE (`choice.` lines), replace
// the model's; SHARC_ALGO beats both.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/tuner.hpp"
#include "core/config.hpp"

namespace sharc::detail {

class RequestState;
class FlightRecorder;

/// One way to run a call.
struct LearnedPlan {
  algo::Algorithm algorithm = algo::Algorithm::Ring;
  size_t chunkBytes = 1u << 20;
  bool operator==(const LearnedPlan&) const = default;
};

/// "ring/1M"-style label of a plan, for logs.
std::string planLabel(const LearnedPlan& p);

/// The per-communicator learning state. All calls with the engine lock held.
class LearnedTuner {
 public:
  /// Plans explored per shape at most; the agreement vector has kMaxPlans + 2 doubles.
  static constexpr size_t kMaxPlans = 8;
  static constexpr size_t kVectorLength = kMaxPlans + 2;
  /// Samples of each plan per exploration (the median is kept).
  static constexpr int kRounds = 3;

  /// `learn` and `after` from SHARC_TUNER_LEARN and SHARC_TUNER_LEARN_AFTER.
  LearnedTuner(bool learn, int after) : learn_(learn), after_(after) {}

  /// What this call of `shape` runs, `model` being the model's plan; counts the call.
  /// `explore` is set to true when the call is an exploration call (then track() it).
  /// The shape must be learnable (see learnable()).
  LearnedPlan next(uint64_t key, const algo::CallShape& shape, const algo::TunerParams& params,
                   const LearnedPlan& model, FlightRecorder& recorder, bool& explore);
  /// Remembers the flight-record entry of an exploration call: its time, once completed.
  void track(uint64_t key, uint64_t traceId);
  /// Agreement buffers of one shape: this rank's medians in, every rank's max out
  /// (kVectorLength doubles each; they stay put while the shape is agreeing).
  struct Agreement {
    std::vector<double> mine, all;
    /// Weak: a communicator destroyed meanwhile must not be kept alive by its own request
    /// (expired: it has finished, and a failure has marked the communicator failed).
    std::weak_ptr<RequestState> request;
  };
  /// When this call of `key` must issue the agreement: its buffers, `mine` filled from the
  /// exploration calls completed so far; the caller starts the AllReduce and calls issued().
  Agreement* agreementToIssue(uint64_t key, FlightRecorder& recorder);
  void issued(uint64_t key, std::shared_ptr<RequestState> request);
  /// When this call of `key` must take the decision (true): the agreement to wait for in
  /// `request` (null once it has finished).
  bool decisionDue(uint64_t key, std::shared_ptr<RequestState>& request);
  /// Takes the choice from the agreement's result; returns the log line.
  std::string decide(uint64_t key);
  /// The learned plan of `key` (false while none is settled), for Communicator::plan.
  bool settled(uint64_t key, LearnedPlan& plan, std::string* note = nullptr) const;
  /// Exploration calls made so far (all shapes).
  uint64_t explorationCalls() const { return explorationCalls_; }
  /// The choices settled here (`ranks`, `nodes`: the communicator's), for SHARC_TUNER_SAVE.
  std::vector<core::TunerChoice> choices(int ranks, int nodes) const;

 private:
  enum class Phase { Counting, Exploring, Agreeing, Deciding, Settled };
  struct Pending {
    uint64_t traceId = 0;
    size_t plan = 0;
  };
  struct Shape {
    CollectiveKind kind = CollectiveKind::AllGather;
    uint64_t bytes = 0;
    uint64_t calls = 0;
    Phase phase = Phase::Counting;
    std::vector<LearnedPlan> plans;  // plans[incumbent]: what ran before exploring
    size_t incumbent = 0;
    std::vector<std::vector<double>> samples;  // per plan, microseconds
    std::vector<Pending> pending;
    size_t nextCall = 0;  // exploration call index
    LearnedPlan chosen;
    LearnedPlan model;
    double chosenUs = 0, modelUs = 0;
    uint64_t exploreAt = 0;  // calls count of the next re-exploration
    int explorations = 0;
    Agreement agreement;
  };
  void harvest(Shape& s, FlightRecorder& recorder);
  static std::vector<LearnedPlan> plansToExplore(const algo::CallShape& shape,
                                                 const algo::TunerParams& params,
                                                 const LearnedPlan& incumbent);

  bool learn_;
  int after_;
  std::unordered_map<uint64_t, Shape> shapes_;
  uint64_t explorationCalls_ = 0;
};

/// The choice of SHARC_TUNER_FILE for a shape, if any and valid for it (else false; an
/// algorithm the shape cannot run is reported once as a warning).
bool fileChoice(const algo::CallShape& shape, int nodes, LearnedPlan& plan);

/// Merges `choices` into the SHARC_TUNER_SAVE file `path` (locked while it is rewritten):
/// the SHARC_TUNER_FILE parameters of this job, the choices already in the file, then ours.
/// Throws sharc::Error(SystemError) naming the file when it cannot be written.
void saveChoices(const std::string& path, const std::vector<core::TunerChoice>& choices);

}  // namespace sharc::detail
