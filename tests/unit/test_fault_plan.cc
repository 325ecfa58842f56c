// SHARC_FAULT's grammar (core::FaultPlan::parse) and the plan's bookkeeping: which call arms
// which rule, when a completion fails, when a drop starts, which sends a delay holds back, and
// that kill and stop really kill and stop the process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sharc/error.hpp>
#include <string>
#include <vector>

#include "core/fault_plan.hpp"

namespace sharc::core {
namespace {

using std::chrono::milliseconds;

// The message of the InvalidArgument error that parsing `text` throws ("" if none).
std::string parseError(const std::string& text) {
  try {
    FaultPlan::parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Result::InvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "SHARC_FAULT='" << text << "' was accepted";
  return {};
}

constexpr const char* kKillForm = "expected kill:rank=R,seq=N[,comm=C][,after=K]";
constexpr const char* kDelayForm = "expected delay:rank=R,ms=T[,comm=C][,seq=N|seq=A-B]";

TEST(FaultPlanParse, EveryActionWithItsKeys) {
  const FaultPlan plan = FaultPlan::parse(
      "kill:rank=2,seq=57; stop:rank=1,seq=10,comm=0 ;delay:rank=3,ms=200;"
      "fail:rank=1,seq=5,after=3;drop:rank=2,seq=9,comm=4095;delay:rank=0,ms=5,seq=3-7,comm=2;"
      "delay:rank=65535,ms=1,seq=4;");
  const auto& r = plan.rules();
  ASSERT_EQ(r.size(), 7u);
  EXPECT_EQ(r[0].action, FaultAction::Kill);
  EXPECT_EQ(r[0].rank, 2);
  EXPECT_FALSE(r[0].comm.has_value());
  EXPECT_EQ(r[0].seq, 57u);
  EXPECT_EQ(r[0].after, 0u);
  EXPECT_EQ(r[0].text, "kill:rank=2,seq=57");
  EXPECT_EQ(r[1].action, FaultAction::Stop);
  EXPECT_EQ(r[1].comm, std::optional<uint32_t>(0));
  EXPECT_EQ(r[1].text, "stop:rank=1,seq=10,comm=0");
  EXPECT_EQ(r[2].action, FaultAction::Delay);
  EXPECT_EQ(r[2].delay, milliseconds(200));
  EXPECT_EQ(r[2].seq, 0u);  // every call
  EXPECT_EQ(r[3].action, FaultAction::Fail);
  EXPECT_EQ(r[3].after, 3u);
  EXPECT_EQ(r[4].action, FaultAction::Drop);
  EXPECT_EQ(r[4].comm, std::optional<uint32_t>(4095));
  EXPECT_EQ(r[5].seq, 3u);
  EXPECT_EQ(r[5].seqLast, 7u);
  EXPECT_EQ(r[6].rank, 65535);
  EXPECT_EQ(r[6].seq, 4u);
  EXPECT_EQ(r[6].seqLast, 4u);  // one call
  EXPECT_TRUE(plan.concerns(1));
  EXPECT_FALSE(plan.concerns(4));
}

TEST(FaultPlanParse, SpacesAroundTokens) {
  const FaultPlan plan = FaultPlan::parse("  kill : rank = 1 , seq = 3 , after = 2  ");
  ASSERT_EQ(plan.rules().size(), 1u);
  EXPECT_EQ(plan.rules()[0].rank, 1);
  EXPECT_EQ(plan.rules()[0].seq, 3u);
  EXPECT_EQ(plan.rules()[0].after, 2u);
}

TEST(FaultPlanParse, MalformedRulesNameTheRuleAndTheExpectedForm) {
  struct Case {
    const char* text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"kil:rank=1,seq=2",
       "SHARC_FAULT rule 'kil:rank=1,seq=2' is malformed: unknown action 'kil'; expected one of "
       "kill, stop, fail, drop (ACTION:rank=R,seq=N[,comm=C][,after=K]) or "
       "delay:rank=R,ms=T[,comm=C][,seq=N|seq=A-B]"},
      {"kill",
       std::string("SHARC_FAULT rule 'kill' is malformed: no ':' after the action; ") + kKillForm},
      {"kill:",
       std::string("SHARC_FAULT rule 'kill:' is malformed: an empty key=value item; ") + kKillForm},
      {"kill:rank=1,,seq=2",
       std::string(
           "SHARC_FAULT rule 'kill:rank=1,,seq=2' is malformed: an empty key=value item; ") +
           kKillForm},
      {"kill:rank1,seq=2",
       std::string("SHARC_FAULT rule 'kill:rank1,seq=2' is malformed: 'rank1' is not key=value; ") +
           kKillForm},
      {"kill:seq=2",
       std::string("SHARC_FAULT rule 'kill:seq=2' is malformed: rank= is missing; ") + kKillForm},
      {"stop:rank=1",
       "SHARC_FAULT rule 'stop:rank=1' is malformed: seq= is missing; expected "
       "stop:rank=R,seq=N[,comm=C][,after=K]"},
      {"delay:rank=1",
       std::string("SHARC_FAULT rule 'delay:rank=1' is malformed: ms= is missing; ") + kDelayForm},
      {"kill:rank=x,seq=2",
       std::string("SHARC_FAULT rule 'kill:rank=x,seq=2' is malformed: rank='x' is not an "
                   "integer in 0..65535; ") +
           kKillForm},
      {"kill:rank=65536,seq=2",
       std::string("SHARC_FAULT rule 'kill:rank=65536,seq=2' is malformed: rank='65536' is not "
                   "an integer in 0..65535; ") +
           kKillForm},
      {"kill:rank=-1,seq=2",
       std::string("SHARC_FAULT rule 'kill:rank=-1,seq=2' is malformed: rank='-1' is not an "
                   "integer in 0..65535; ") +
           kKillForm},
      {"kill:rank=1,seq=0",
       std::string("SHARC_FAULT rule 'kill:rank=1,seq=0' is malformed: seq='0' is not an "
                   "integer in 1..18446744073709551615; ") +
           kKillForm},
      {"kill:rank=1,seq=3-5",
       std::string("SHARC_FAULT rule 'kill:rank=1,seq=3-5' is malformed: seq='3-5' is not an "
                   "integer in 1..18446744073709551615; ") +
           kKillForm},
      {"kill:rank=1,seq=2,comm=4096",
       std::string("SHARC_FAULT rule 'kill:rank=1,seq=2,comm=4096' is malformed: comm='4096' is "
                   "not an integer in 0..4095; ") +
           kKillForm},
      {"kill:rank=1,seq=2,after=",
       std::string("SHARC_FAULT rule 'kill:rank=1,seq=2,after=' is malformed: after='' is not "
                   "an integer in 0..18446744073709551615; ") +
           kKillForm},
      {"kill:rank=1,seq=2,rank=3",
       std::string("SHARC_FAULT rule 'kill:rank=1,seq=2,rank=3' is malformed: rank is given "
                   "twice; ") +
           kKillForm},
      {"kill:rank=1,seq=2,comm=1,comm=2",
       std::string("SHARC_FAULT rule 'kill:rank=1,seq=2,comm=1,comm=2' is malformed: comm is "
                   "given twice; ") +
           kKillForm},
      {"kill:rank=1,seq=2,ms=5",
       std::string("SHARC_FAULT rule 'kill:rank=1,seq=2,ms=5' is malformed: unknown key 'ms' "
                   "for kill (it takes rank, seq, comm, after); ") +
           kKillForm},
      {"delay:rank=1,ms=5,after=2",
       std::string("SHARC_FAULT rule 'delay:rank=1,ms=5,after=2' is malformed: unknown key "
                   "'after' for delay (it takes rank, ms, comm, seq); ") +
           kDelayForm},
      {"delay:rank=1,ms=0",
       std::string("SHARC_FAULT rule 'delay:rank=1,ms=0' is malformed: ms='0' is not an integer "
                   "in 1..3600000; ") +
           kDelayForm},
      {"delay:rank=1,ms=5,seq=7-3",
       std::string("SHARC_FAULT rule 'delay:rank=1,ms=5,seq=7-3' is malformed: seq='7-3' is not "
                   "a range A-B with 1 <= A <= B; ") +
           kDelayForm},
      {"delay:rank=1,ms=5,seq=0-3",
       std::string("SHARC_FAULT rule 'delay:rank=1,ms=5,seq=0-3' is malformed: seq='0-3' is not "
                   "a range A-B with 1 <= A <= B; ") +
           kDelayForm},
      {"delay:rank=1,ms=5,seq=2-",
       std::string("SHARC_FAULT rule 'delay:rank=1,ms=5,seq=2-' is malformed: seq='2-' is not "
                   "a range A-B with 1 <= A <= B; ") +
           kDelayForm},
      // The second rule is the bad one: the message names it, not the first.
      {"kill:rank=1,seq=2;drop:rank=1",
       "SHARC_FAULT rule 'drop:rank=1' is malformed: seq= is missing; expected "
       "drop:rank=R,seq=N[,comm=C][,after=K]"},
      {" ; ;",
       "SHARC_FAULT=' ; ;' has no rule; expected rules separated by ';', each "
       "ACTION:rank=R,seq=N[,comm=C][,after=K] (ACTION kill, stop, fail or drop) or "
       "delay:rank=R,ms=T[,comm=C][,seq=N|seq=A-B]"},
  };
  for (const Case& c : cases) EXPECT_EQ(parseError(c.text), c.message) << c.text;
}

TEST(FaultPlanRuntime, FailArmsAtItsCallAndFailsTheCompletionAfterK) {
  FaultPlan plan = FaultPlan::parse("fail:rank=1,seq=3,comm=0,after=2");
  std::string message;
  // Another rank, another communicator, another call: nothing armed.
  plan.atCall(0, 0, 3);
  plan.atCall(5, 1, 3);
  plan.atCall(0, 1, 2);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(plan.onCompletion(1, 0, 2, message), FaultHit::None);
  plan.atCall(0, 1, 3);
  // Two completions of call 3 (the earlier call's do not count), then the next one fails.
  EXPECT_EQ(plan.onCompletion(1, 0, 2, message), FaultHit::None);
  EXPECT_EQ(plan.onCompletion(1, 0, 3, message), FaultHit::None);
  EXPECT_EQ(plan.onCompletion(0, 0, 3, message), FaultHit::None);  // rank 0's endpoint
  EXPECT_EQ(plan.onCompletion(1, 0, 3, message), FaultHit::None);
  EXPECT_EQ(plan.onCompletion(1, 5, 3, message), FaultHit::None);  // another communicator
  EXPECT_EQ(plan.onCompletion(1, 0, 3, message), FaultHit::Fail);
  EXPECT_EQ(message,
            "completion error injected by SHARC_FAULT (rule 'fail:rank=1,seq=3,comm=0,after=2' "
            "at collective #3 of communicator 0)");
  // Once only, even when the call comes around again.
  EXPECT_EQ(plan.onCompletion(1, 0, 3, message), FaultHit::None);
  plan.atCall(0, 1, 3);
  EXPECT_EQ(plan.onCompletion(1, 0, 3, message), FaultHit::None);
}

TEST(FaultPlanRuntime, FailWithoutAfterTakesTheNextCompletionOfTheCommunicator) {
  FaultPlan plan = FaultPlan::parse("fail:rank=2,seq=1");
  std::string message;
  plan.atCall(7, 2, 1);  // any communicator
  EXPECT_EQ(plan.onCompletion(2, 6, 1, message), FaultHit::None);
  // A completion of an earlier call still in flight on that communicator is "next" too.
  EXPECT_EQ(plan.onCompletion(2, 7, 4095, message), FaultHit::Fail);
  EXPECT_NE(message.find("injected by SHARC_FAULT (rule 'fail:rank=2,seq=1' at collective #1 "
                         "of communicator 7)"),
            std::string::npos)
      << message;
}

TEST(FaultPlanRuntime, CallsBeyond4096AreMatchedByTheirFullNumber) {
  // Call 4099's tags carry 3, as call 3's did: only the hook's full number tells them apart.
  FaultPlan plan = FaultPlan::parse("fail:rank=0,seq=4099,after=1");
  std::string message;
  plan.atCall(0, 0, 3);
  EXPECT_EQ(plan.onCompletion(0, 0, 3, message), FaultHit::None);
  EXPECT_EQ(plan.onCompletion(0, 0, 3, message), FaultHit::None);
  plan.atCall(0, 0, 4099);
  EXPECT_EQ(plan.onCompletion(0, 0, 3, message), FaultHit::None);
  EXPECT_EQ(plan.onCompletion(0, 0, 3, message), FaultHit::Fail);
  EXPECT_NE(message.find("collective #4099"), std::string::npos) << message;
}

TEST(FaultPlanRuntime, DropAtTheCallOrAfterKCompletions) {
  FaultPlan plan = FaultPlan::parse("drop:rank=1,seq=2;drop:rank=3,seq=1,after=2");
  std::string message;
  plan.atCall(0, 1, 1);
  EXPECT_EQ(plan.dropped(1), "");
  plan.atCall(0, 1, 2);
  EXPECT_EQ(plan.dropped(1),
            "endpoint dropped by SHARC_FAULT (rule 'drop:rank=1,seq=2' at collective #2 of "
            "communicator 0)");
  EXPECT_EQ(plan.dropped(3), "");
  plan.atCall(0, 3, 1);
  EXPECT_EQ(plan.onCompletion(3, 0, 1, message), FaultHit::None);
  EXPECT_EQ(plan.dropped(3), "");
  EXPECT_EQ(plan.onCompletion(3, 0, 1, message), FaultHit::Drop);
  EXPECT_EQ(message,
            "endpoint dropped by SHARC_FAULT (rule 'drop:rank=3,seq=1,after=2' at collective #1 "
            "of communicator 0 after 2 transfers)");
  EXPECT_EQ(plan.dropped(3), message);
}

TEST(FaultPlanRuntime, DelaysApplyToTheirRankCommunicatorAndCalls) {
  FaultPlan plan = FaultPlan::parse(
      "delay:rank=1,ms=20;delay:rank=2,ms=30,comm=1,seq=3-4;delay:rank=2,ms=50,seq=4097");
  EXPECT_EQ(plan.sendDelay(1, 0, 5u), milliseconds(20));
  EXPECT_EQ(plan.sendDelay(1, 9, std::nullopt), milliseconds(20));  // point-to-point too
  EXPECT_EQ(plan.sendDelay(0, 0, 5u), milliseconds(0));
  for (uint64_t seq = 1; seq <= 5; ++seq) plan.atCall(1, 2, seq);
  EXPECT_EQ(plan.sendDelay(2, 1, 2u), milliseconds(0));
  EXPECT_EQ(plan.sendDelay(2, 1, 3u), milliseconds(30));
  EXPECT_EQ(plan.sendDelay(2, 1, 4u), milliseconds(30));
  EXPECT_EQ(plan.sendDelay(2, 1, 5u), milliseconds(0));
  EXPECT_EQ(plan.sendDelay(2, 0, 3u), milliseconds(0));  // no call of communicator 0 started
  EXPECT_EQ(plan.sendDelay(2, 1, std::nullopt), milliseconds(0));
  // Call 4097 of communicator 1: tag sequence 1, like call 1.
  for (uint64_t seq = 6; seq <= 4097; ++seq) plan.atCall(1, 2, seq);
  EXPECT_EQ(plan.sendDelay(2, 1, 1u), milliseconds(50));
  EXPECT_EQ(plan.sendDelay(2, 1, 4095u), milliseconds(0));  // call 4095
  // The newest call whose tag carries 3 is call 3 (4099 has not started): in 3-4.
  EXPECT_EQ(plan.sendDelay(2, 1, 3u), milliseconds(30));
}

TEST(FaultPlanRuntime, KillAtTheCallKillsTheProcess) {
  FaultPlan plan = FaultPlan::parse("kill:rank=1,seq=2");
  plan.atCall(0, 1, 1);  // not yet
  plan.atCall(0, 0, 2);  // another rank
  EXPECT_EXIT(plan.atCall(0, 1, 2), ::testing::KilledBySignal(SIGKILL), "");
}

TEST(FaultPlanRuntime, KillAfterKCompletionsKillsAtTheKth) {
  FaultPlan plan = FaultPlan::parse("kill:rank=0,seq=1,comm=3,after=3");
  std::string message;
  plan.atCall(3, 0, 1);
  EXPECT_EXIT(
      {
        for (int i = 0; i < 2; ++i) plan.onCompletion(0, 3, 1, message);
        std::fprintf(stderr, "survived two\n");
        plan.onCompletion(0, 3, 1, message);
        std::fprintf(stderr, "survived three\n");
      },
      ::testing::KilledBySignal(SIGKILL), "survived two");
}

TEST(FaultPlanRuntime, StopStopsTheProcessUntilContinued) {
  FaultPlan plan = FaultPlan::parse("stop:rank=2,seq=4");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    plan.atCall(0, 2, 4);
    _exit(7);  // after SIGCONT
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  EXPECT_TRUE(WIFSTOPPED(status));
  EXPECT_EQ(WSTOPSIG(status), SIGSTOP);
  kill(child, SIGCONT);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << status;
}

}  // namespace
}  // namespace sharc::core
