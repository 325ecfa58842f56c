// The learning tuner's bookkeeping without communication (src/api/learned_tuner.hpp): the
// exploration schedule, the fastest measured plan chosen, and exploring within 1 % of a
// shape's calls over a long run. One rank: the agreement's max is this rank's own vector.
#include <gtest/gtest.h>

#include <map>

#include "runtime/flight_recorder.hpp"
#include "runtime/learned_tuner.hpp"

namespace sharc::detail {
namespace {

using algo::Algorithm;

TEST(LearnedTunerLogic, PicksTheFastestMeasuredAndExploresWithinOnePercent) {
  FlightRecorder recorder(64);
  constexpr int kAfter = 10;
  LearnedTuner tuner(true, kAfter);
  algo::CallShape shape;
  shape.kind = CollectiveKind::ReduceScatter;
  shape.bytesPerRank = size_t{32} << 20;
  shape.nranks = 2;
  shape.locality = algo::Locality::OneHostSingleCopy;
  const algo::TunerParams params = algo::TunerParams::defaults();
  const algo::Plan p = algo::plan(shape, params, false);
  const LearnedPlan model{p.algorithm, p.chunkBytes};
  // The "measured" time of each plan: the ring with 2 MiB chunks is the fastest by far.
  const LearnedPlan fastest{Algorithm::Ring, 2u << 20};
  const auto fakeUs = [&](const LearnedPlan& q) { return q == fastest ? 1000 : 3000; };
  const uint64_t key = 7;
  uint64_t explored = 0, firstExploration = 0;
  std::vector<uint64_t> agreedAt;
  std::map<std::string, int> tried;
  for (uint64_t call = 1; call <= 400000; ++call) {
    std::shared_ptr<RequestState> pending;
    if (tuner.decisionDue(key, pending)) {
      EXPECT_EQ(pending, nullptr);
      tuner.decide(key);
    } else if (LearnedTuner::Agreement* a = tuner.agreementToIssue(key, recorder)) {
      a->all = a->mine;  // one rank
      tuner.issued(key, nullptr);
      agreedAt.push_back(call);
      if (agreedAt.size() == 1) firstExploration = explored;
    }
    bool explore = false;
    const LearnedPlan run = tuner.next(key, shape, params, model, recorder, explore);
    if (call <= kAfter) {
      EXPECT_EQ(run, model) << call;
    }
    if (explore) {
      ++explored;
      if (agreedAt.empty()) ++tried[planLabel(run)];
      TraceEntry& e = recorder.add();
      e.state = TraceState::Started;
      e.startedNs = wallClockNs() - 1000 * fakeUs(run);
      recorder.finish(e.id, true, {});
      tuner.track(key, e.id);
    } else if (agreedAt.size() >= 1 && call > agreedAt[0] + 1) {
      EXPECT_EQ(run, fastest) << "call " << call;
    }
    if (firstExploration > 0 && call >= 200 * firstExploration && call % 997 == 0) {
      ASSERT_LE(explored * 100, call) << "explored " << explored << " of " << call << " calls";
    }
  }
  // Explored once right after kAfter calls: every plan 3 times, at most 8 plans.
  ASSERT_FALSE(agreedAt.empty());
  EXPECT_EQ(agreedAt[0], kAfter + firstExploration + 1);
  EXPECT_LE(firstExploration, 24u);
  EXPECT_GE(tried.size(), 2u);
  for (const auto& [label, n] : tried) EXPECT_EQ(n, 3) << label;
  EXPECT_EQ(tried.count(planLabel(fastest)), 1u);
  // Then again only at 200·E, 400·E, 800·E... calls.
  ASSERT_GE(agreedAt.size(), 2u);
  for (size_t i = 1; i < agreedAt.size(); ++i)
    EXPECT_GE(agreedAt[i], (200 * firstExploration) << (i - 1)) << "exploration " << i;
  LearnedPlan settled;
  std::string note;
  ASSERT_TRUE(tuner.settled(key, settled, &note));
  EXPECT_EQ(settled, fastest) << note;
  EXPECT_EQ(tuner.explorationCalls(), explored);
  // What SHARC_TUNER_SAVE writes for it.
  const auto choices = tuner.choices(2, 1);
  ASSERT_EQ(choices.size(), 1u);
  EXPECT_EQ(choices[0].collective, CollectiveKind::ReduceScatter);
  EXPECT_EQ(choices[0].bytes, shape.bytesPerRank);
  EXPECT_EQ(choices[0].algorithm, algo::Algorithm::Ring);
  EXPECT_EQ(choices[0].chunkBytes, fastest.chunkBytes);
}

TEST(LearnedTunerLogic, OffMeansTheModelAlways) {
  FlightRecorder recorder(8);
  LearnedTuner tuner(false, 1);
  algo::CallShape shape;
  shape.kind = CollectiveKind::AllGather;
  shape.bytesPerRank = 1 << 20;
  shape.nranks = 4;
  const LearnedPlan model{Algorithm::Bruck, 1 << 20};
  for (int i = 0; i < 1000; ++i) {
    bool explore = true;
    EXPECT_EQ(tuner.next(1, shape, algo::TunerParams::defaults(), model, recorder, explore), model);
    EXPECT_FALSE(explore);
    EXPECT_EQ(tuner.agreementToIssue(1, recorder), nullptr);
  }
  EXPECT_EQ(tuner.explorationCalls(), 0u);
}

}  // namespace
}  // namespace sharc::detail
