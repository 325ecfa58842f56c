#include "multiprocess.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <sharc/communicator.hpp>
#include <stdexcept>

#include "core/config.hpp"

namespace sharc::testing {

std::vector<int> runRanks(int n, const std::function<void(const RankContext&)>& body,
                          const RunOptions& options) {
  std::string id;
  if (options.rendezvous == Rendezvous::UniqueIdFromParent) {
    const UniqueId uid = makeUniqueId();
    id.assign(uid.bytes.data(), uid.bytes.size());
  }
  launcher::Options o;
  o.timeout = options.timeout;
  o.env = options.env;
  o.mayFail = options.mayFail;
  o.rankEnv.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<size_t>(r);
    if (i < options.nodeIds.size())
      o.rankEnv[i]["SHARC_NODE_ID"] = options.nodeIds[i];
    else if (options.oneRankPerNode)
      o.rankEnv[i]["SHARC_NODE_ID"] = "node" + std::to_string(r);
  }
  const launcher::Result result = launcher::run(
      n,
      [&](int rank) {
        // The configuration is per process and read once: it must see this rank's node.
        const auto i = static_cast<size_t>(rank);
        if (i < options.nodeIds.size() && core::Config::get().nodeId != options.nodeIds[i])
          throw std::runtime_error("SHARC_NODE_ID '" + options.nodeIds[i] +
                                   "' not seen: core::Config was loaded before the fork");
        body(RankContext{rank, n, id});
        if (::testing::Test::HasFailure())
          throw std::runtime_error("gtest assertion failed (see output above)");
        return 0;
      },
      o);

  std::vector<int> status(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const launcher::RankResult& rank = result.ranks[static_cast<size_t>(r)];
    status[static_cast<size_t>(r)] = rank.status;
    const bool allowed =
        std::find(options.mayFail.begin(), options.mayFail.end(), r) != options.mayFail.end();
    if (!rank.message.empty()) {
      if (allowed)
        std::printf("(allowed) rank %d: %s\n", r, rank.message.c_str());
      else
        ADD_FAILURE() << "rank " << r << ": " << rank.message;
    }
    if (rank.exitedZero() || (allowed && rank.status != -1)) continue;
    if (rank.stopped && result.firstFailure != -1)
      ADD_FAILURE() << "rank " << r << " of " << n << " stopped after rank " << result.firstFailure
                    << " failed (it " << launcher::describeStatus(rank.status) << ")";
    else
      ADD_FAILURE() << "rank " << r << " of " << n << " failed: it "
                    << launcher::describeStatus(rank.status);
  }
  if (result.timedOut)
    ADD_FAILURE() << "ranks still running after " << options.timeout.count()
                  << " s: stopped (a hang is a bug: every wait must have a timeout)";
  return status;
}

ExchangeFn exchangeOver(Communicator& world) {
  return [&world](const std::string& blob) {
    const int n = world.size();
    const uint64_t mine = blob.size();
    std::vector<uint64_t> sizes(static_cast<size_t>(n));
    world.allGather(&mine, sizes.data(), 1, DataType::Uint64);
    const size_t width = std::max<size_t>(1, *std::max_element(sizes.begin(), sizes.end()));
    std::string padded = blob;
    padded.resize(width);
    std::string all(width * static_cast<size_t>(n), '\0');
    world.allGather(padded.data(), all.data(), width, DataType::Uint8);
    std::vector<std::string> out;
    for (int r = 0; r < n; ++r) out.push_back(all.substr(r * width, sizes[r]));
    return out;
  };
}

}  // namespace sharc::testing
