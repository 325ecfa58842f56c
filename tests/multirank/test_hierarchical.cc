// The two-level (hierarchical) AllGather, ReduceScatter and AllReduce over ranks laid out on
// emulated nodes (SHARC_NODE_ID per rank), forced by SHARC_ALGO and checked element by element
// against the float64 reference: equal and uneven nodes, non-contiguous nodes, and the
// layouts where it falls back to the ring (one node, one rank per node); the same for the
// form with a Bruck across nodes (hierarchical_bruck).
#include <gtest/gtest.h>

#include <sharc/communicator.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "collective_check.hpp"
#include "multiprocess.hpp"

namespace sharc::testing {
namespace {

struct Layout {
  std::string name;
  std::vector<int> nodeOfRank;
};

// Every collective of both two-level algorithms on `layout`, forced by SHARC_ALGO.
void runLayout(const Layout& layout, const std::string& algorithm, const std::string& proxy) {
  RunOptions o;
  o.env["SHARC_HIER_PROXY"] = proxy;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_ALGO"] = algorithm;
  o.env["SHARC_CHUNK_BYTES"] = "4096";  // many chunks per block: the phases overlap
  o.env["SHARC_TIMEOUT_MS"] = "60000";
  for (int node : layout.nodeOfRank) o.nodeIds.push_back("node" + std::to_string(node));
  runRanks(
      static_cast<int>(layout.nodeOfRank.size()),
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{65537}}) {
          for (DataType t : {DataType::Float32, DataType::BFloat16}) {
            for (bool inPlace : {false, true}) {
              EXPECT_EQ(runAndCheck(*comm, Coll::AllGather, t, RedOp::Sum, count, inPlace), "");
              for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max})
                EXPECT_EQ(runAndCheck(*comm, Coll::ReduceScatter, t, op, count, inPlace), "");
              EXPECT_EQ(runAndCheck(*comm, Coll::AllReduce, t, RedOp::Sum, count, inPlace), "");
            }
          }
        }
        // AllReduce of a count that does not divide by the ranks, Avg and Max on top.
        EXPECT_EQ(runAndCheck(*comm, Coll::AllReduce, DataType::Float32, RedOp::Avg, 10007, true),
                  "");
        EXPECT_EQ(runAndCheck(*comm, Coll::AllReduce, DataType::Int64, RedOp::Max, 3001, false),
                  "");
      },
      o);
}

// A layout and the proxy rule (SHARC_HIER_PROXY: rail-aligned or rotated).
class Hierarchical : public ::testing::TestWithParam<std::tuple<Layout, std::string>> {};

TEST_P(Hierarchical, MatchesReference) {
  runLayout(std::get<0>(GetParam()), "hierarchical", std::get<1>(GetParam()));
}

// The Bruck across nodes: powers of two and not, non-contiguous nodes, and the layouts where
// it falls back (uneven nodes: hierarchical; one node or one rank per node: the ring).
// AllReduce runs the hierarchical form.
class HierarchicalBruck : public ::testing::TestWithParam<Layout> {};

TEST_P(HierarchicalBruck, MatchesReference) {
  runLayout(GetParam(), "hierarchical_bruck", "rail");
}

// Eight nodes: the reversed steps' messages split more than once (reverseBruckOrder) and the
// parts of a step that fit one run make one local unit; blocks of 32 KiB, 64 KiB and an odd
// size in pieces of 512 KiB.
TEST(HierarchicalBruckEightNodes, ReduceScatterMatchesReference) {
  RunOptions o;
  o.env["SHARC_FI_PROVIDER"] = "tcp;ofi_rxm";
  o.env["SHARC_ALGO"] = "hierarchical_bruck";
  o.env["SHARC_CHUNK_BYTES"] = "524288";
  o.env["SHARC_TIMEOUT_MS"] = "120000";
  for (int node = 0; node < 8; ++node)
    for (int local = 0; local < 2; ++local) o.nodeIds.push_back("node" + std::to_string(node));
  runRanks(
      16,
      [](const RankContext&) {
        auto comm = Communicator::createFromEnvironment();
        for (size_t count : {size_t{8192}, size_t{16384}, size_t{16385}})
          for (bool inPlace : {false, true})
            for (RedOp op : {RedOp::Sum, RedOp::Avg})
              EXPECT_EQ(
                  runAndCheck(*comm, Coll::ReduceScatter, DataType::Float32, op, count, inPlace),
                  "");
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, HierarchicalBruck,
    ::testing::Values(Layout{"2x2", {0, 0, 1, 1}}, Layout{"2x3", {0, 0, 0, 1, 1, 1}},
                      Layout{"3x2", {0, 0, 1, 1, 2, 2}}, Layout{"4x2", {0, 0, 1, 1, 2, 2, 3, 3}},
                      Layout{"5x1plus", {0, 1, 2, 3, 4, 0, 1, 2, 3, 4}},
                      Layout{"interleaved_ABAB", {0, 1, 0, 1}}, Layout{"3plus2", {0, 0, 0, 1, 1}},
                      Layout{"one_node", {0, 0, 0}}, Layout{"one_rank_per_node", {0, 1, 2}}),
    [](const ::testing::TestParamInfo<Layout>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Layouts, Hierarchical,
    ::testing::Combine(
        ::testing::Values(Layout{"2x2", {0, 0, 1, 1}}, Layout{"2x3", {0, 0, 0, 1, 1, 1}},
                          Layout{"3x2", {0, 0, 1, 1, 2, 2}}, Layout{"3plus2", {0, 0, 0, 1, 1}},
                          Layout{"interleaved_ABAB", {0, 1, 0, 1}}, Layout{"1plus3", {0, 1, 1, 1}},
                          Layout{"one_node", {0, 0, 0}}, Layout{"one_rank_per_node", {0, 1, 2}}),
        ::testing::Values("rail", "rotated")),
    [](const ::testing::TestParamInfo<std::tuple<Layout, std::string>>& info) {
      return std::get<0>(info.param).name + "_" + std::get<1>(info.param);
    });

}  // namespace
}  // namespace sharc::testing
