// ScheduleCache: built schedules kept per call shape, so that a shape called again (training
// repeats its shapes every step) rearms one instead of building it.
#pragma once

#include <cstddef>
#include <memory>
#include <sharc/types.hpp>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/schedule.hpp"

namespace sharc::detail {

/// Everything a schedule's operations depend on, besides the communicator's own constants.
struct ScheduleShape {
  CollectiveKind kind = CollectiveKind::Barrier;
  DataType type = DataType::Uint8;
  RedOp op = RedOp::Sum;
  size_t count = 0;
  int root = -1;
  algo::Algorithm algorithm{};
  size_t chunkBytes = 0;
  bool inPlace = false;
  bool operator==(const ScheduleShape&) const = default;
};

/// Per communicator, engine lock held for every call.
class ScheduleCache {
 public:
  /// `enabled` from SHARC_SCHEDULE_CACHE.
  explicit ScheduleCache(bool enabled) : enabled_(enabled) {}
  /// A finished schedule of `shape` that no request holds any more, or null.
  std::shared_ptr<algo::Schedule> take(const ScheduleShape& shape);
  /// Keeps a schedule just built for `shape` if it can be rearmed (Schedule::prepareReuse).
  void keep(const ScheduleShape& shape, const std::shared_ptr<algo::Schedule>& schedule);
  /// Calls that rearmed a kept schedule so far (tests, logs).
  uint64_t reused() const { return reused_; }

  /// Schedules kept per shape: FSDP has two or three calls of one shape in flight at once.
  static constexpr size_t kPerShape = 4;
  /// Operations kept in all (about 200 bytes each); past this the cache starts over.
  static constexpr size_t kMaxOps = size_t{1} << 19;

 private:
  struct Hash {
    size_t operator()(const ScheduleShape& s) const;
  };
  bool enabled_;
  std::unordered_map<ScheduleShape, std::vector<std::shared_ptr<algo::Schedule>>, Hash> kept_;
  size_t ops_ = 0;
  uint64_t reused_ = 0;
};

}  // namespace sharc::detail
