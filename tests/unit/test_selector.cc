#include <gtest/gtest.h>

#include <sharc/error.hpp>

#include "algorithms/tuner.hpp"
#include "core/collective.hpp"

namespace sharc::algo {
namespace {

// The tuner's choice with its built-in parameters, every rank on one node unless Network.
Algorithm selectAlgorithm(CollectiveKind kind, size_t bytesPerRank, int nranks,
                          const AlgorithmOverride& override,
                          Locality locality = Locality::Network) {
  CallShape shape;
  shape.kind = kind;
  shape.bytesPerRank = bytesPerRank;
  shape.nranks = nranks;
  shape.locality = locality;
  shape.override = override;
  return plan(shape, TunerParams::defaults()).algorithm;
}

TEST(Selector, SmallMessagesTakeLogarithmicAlgorithms) {
  const AlgorithmOverride none;
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 1024, 8, none),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 1024, 7, none), Algorithm::Bruck);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::ReduceScatter, 1024, 4, none),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::ReduceScatter, 1024, 7, none), Algorithm::Bruck);
  // On 3 ranks the ring and Bruck make the same two steps and Bruck adds a rotation copy.
  EXPECT_EQ(selectAlgorithm(CollectiveKind::ReduceScatter, 1024, 3, none), Algorithm::Ring);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllReduce, 1024, 3, none),
            Algorithm::RecursiveDoubling);
}

TEST(Selector, LargeMessagesTakeTheRing) {
  const AlgorithmOverride none;
  for (int n : {2, 3, 4, 7, 8}) {
    EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 4 << 20, n, none), Algorithm::Ring);
    EXPECT_EQ(selectAlgorithm(CollectiveKind::ReduceScatter, 4 << 20, n, none), Algorithm::Ring);
    EXPECT_EQ(selectAlgorithm(CollectiveKind::AllReduce, 4 << 20, n, none), Algorithm::Ring);
  }
}

TEST(Selector, OneHostPrefersDirectAllGather) {
  const AlgorithmOverride none;
  const Locality host = Locality::OneHost, cma = Locality::OneHostSingleCopy;
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 1 << 20, 4, none, host), Algorithm::Direct);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 1 << 20, 4, none, cma),
            Algorithm::DirectWrite);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::ReduceScatter, 1 << 20, 4, none, cma),
            Algorithm::DirectRead);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::ReduceScatter, 1 << 20, 4, none, host),
            Algorithm::Ring);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllReduce, 1 << 20, 4, none, cma),
            Algorithm::DirectRead);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllReduce, 1 << 10, 4, none, cma),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 1 << 20, 16, none, host), Algorithm::Ring);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 1 << 20, 4, none), Algorithm::Ring);
  // Tiny calls: one round of messages (Direct or recursive doubling), never the handshakes.
  EXPECT_NE(selectAlgorithm(CollectiveKind::AllGather, 64, 4, none, cma), Algorithm::DirectWrite);
  EXPECT_NE(selectAlgorithm(CollectiveKind::AllGather, 64, 4, none, cma), Algorithm::Ring);
  // 16 KiB each way fits one shared-memory slot: one message (2.9-5.3 us measured) beats the
  // single-copy handshakes (8 us); from 128 KiB per rank the single copy wins.
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 16 * 1024, 2, none, cma),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 128 * 1024, 2, none, cma),
            Algorithm::DirectWrite);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 16 * 1024, 2, none, host),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 64, 4, AlgorithmOverride::parse("direct")),
            Algorithm::Direct);
}

TEST(Selector, OverrideForcesTheChoice) {
  const auto all = AlgorithmOverride::parse("ring");
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 8, 4, all), Algorithm::Ring);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllReduce, 8, 4, all), Algorithm::Ring);
  const auto some = AlgorithmOverride::parse("allgather:bruck,allreduce:rd");
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllGather, 1 << 24, 4, some), Algorithm::Bruck);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::AllReduce, 1 << 24, 4, some),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(selectAlgorithm(CollectiveKind::ReduceScatter, 1 << 24, 4, some), Algorithm::Ring);
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

namespace sharc {
namespace {

TEST(AlgorithmNames, EveryNameParsesBackToItsAlgorithm) {
  for (const auto& row : algo::algorithmNames()) {
    EXPECT_STREQ(algo::algorithmName(row.algorithm), row.name);
    const auto parsed = algo::parseAlgorithm(row.name);
    if (row.choosable) {
      EXPECT_EQ(parsed, row.algorithm) << row.name;
      EXPECT_NE(algo::choosableAlgorithmList().find(row.name), std::string::npos) << row.name;
    } else {
      EXPECT_FALSE(parsed.has_value()) << row.name;
    }
  }
  EXPECT_EQ(algo::parseAlgorithm("rd"), algo::Algorithm::RecursiveDoubling);
  EXPECT_EQ(algo::parseAlgorithm("recursive_halving"), algo::Algorithm::RecursiveDoubling);
  EXPECT_FALSE(algo::parseAlgorithm("Ring").has_value());
}

TEST(CollectiveNames, EverySpellingParsesBack) {
  for (int k = 0; k <= static_cast<int>(CollectiveKind::PointToPoint); ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    EXPECT_EQ(core::parseCollective(core::collectiveName(kind)), kind);
    EXPECT_EQ(core::parseCollective(core::collectiveToolName(kind)), kind);
    EXPECT_EQ(core::parseCollective(core::collectiveKey(kind)), kind);
  }
  EXPECT_STREQ(core::collectiveName(CollectiveKind::ReduceScatter), "ReduceScatter");
  EXPECT_STREQ(core::collectiveToolName(CollectiveKind::AllGather), "all_gather");
  EXPECT_EQ(core::collectiveKey(CollectiveKind::AllReduce), "allreduce");
  EXPECT_FALSE(core::parseCollective("gather").has_value());
  EXPECT_STREQ(core::collectiveName(static_cast<CollectiveKind>(7)), "unknown collective");
}

}  // namespace
}  // namespace sharc
