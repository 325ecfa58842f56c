#include <gtest/gtest.h>

#include <sharc/error.hpp>

#include "algorithms/selector.hpp"

namespace sharc::algo {
namespace {

TEST(Selector, SmallMessagesTakeLogarithmicAlgorithms) {
  const AlgorithmOverride none;
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 1024, 8, none), Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 1024, 7, none), Algorithm::Bruck);
  EXPECT_EQ(selectAlgorithm(CollKind::ReduceScatter, 1024, 4, none), Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollKind::ReduceScatter, 1024, 7, none), Algorithm::Bruck);
  // On 3 ranks the ring and Bruck make the same two steps and Bruck adds a rotation copy.
  EXPECT_EQ(selectAlgorithm(CollKind::ReduceScatter, 1024, 3, none), Algorithm::Ring);
  EXPECT_EQ(selectAlgorithm(CollKind::AllReduce, 1024, 3, none), Algorithm::RecursiveDoubling);
}

TEST(Selector, LargeMessagesTakeTheRing) {
  const AlgorithmOverride none;
  for (int n : {2, 3, 4, 7, 8}) {
    EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 4 << 20, n, none), Algorithm::Ring);
    EXPECT_EQ(selectAlgorithm(CollKind::ReduceScatter, 4 << 20, n, none), Algorithm::Ring);
    EXPECT_EQ(selectAlgorithm(CollKind::AllReduce, 4 << 20, n, none), Algorithm::Ring);
  }
}

TEST(Selector, OneHostPrefersDirectAllGather) {
  const AlgorithmOverride none;
  const Locality host = Locality::OneHost, cma = Locality::OneHostSingleCopy;
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 1 << 20, 4, none, host), Algorithm::Direct);
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 1 << 20, 4, none, cma), Algorithm::DirectWrite);
  EXPECT_EQ(selectAlgorithm(CollKind::ReduceScatter, 1 << 20, 4, none, cma), Algorithm::DirectRead);
  EXPECT_EQ(selectAlgorithm(CollKind::ReduceScatter, 1 << 20, 4, none, host), Algorithm::Ring);
  EXPECT_EQ(selectAlgorithm(CollKind::AllReduce, 1 << 20, 4, none, cma), Algorithm::DirectRead);
  EXPECT_EQ(selectAlgorithm(CollKind::AllReduce, 1 << 10, 4, none, cma),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 1 << 20, 16, none, host), Algorithm::Ring);
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 1 << 20, 4, none), Algorithm::Ring);
  // Tiny calls: one round of messages (Direct or recursive doubling), never the handshakes.
  EXPECT_NE(selectAlgorithm(CollKind::AllGather, 64, 4, none, cma), Algorithm::DirectWrite);
  EXPECT_NE(selectAlgorithm(CollKind::AllGather, 64, 4, none, cma), Algorithm::Ring);
  // 16 KiB each way fits one shared-memory slot: one message (2.9-5.3 us measured) beats the
  // single-copy handshakes (8 us); from 128 KiB per rank the single copy wins.
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 16 * 1024, 2, none, cma),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 128 * 1024, 2, none, cma), Algorithm::DirectWrite);
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 16 * 1024, 2, none, host),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 64, 4, AlgorithmOverride::parse("direct")),
            Algorithm::Direct);
}

TEST(Selector, OverrideForcesTheChoice) {
  const auto all = AlgorithmOverride::parse("ring");
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 8, 4, all), Algorithm::Ring);
  EXPECT_EQ(selectAlgorithm(CollKind::AllReduce, 8, 4, all), Algorithm::Ring);
  const auto some = AlgorithmOverride::parse("allgather:bruck,allreduce:rd");
  EXPECT_EQ(selectAlgorithm(CollKind::AllGather, 1 << 24, 4, some), Algorithm::Bruck);
  EXPECT_EQ(selectAlgorithm(CollKind::AllReduce, 1 << 24, 4, some), Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollKind::ReduceScatter, 1 << 24, 4, some), Algorithm::Ring);
  EXPECT_FALSE(AlgorithmOverride::parse("").allGather.has_value());
}

TEST(Selector, BadOverrideNamesTheVariable) {
  for (const char* bad : {"fastest", "allgather:", "gather:ring", "ring,bogus"}) {
    try {
      AlgorithmOverride::parse(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Result::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("SHARC_ALGO"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace sharc::algo
