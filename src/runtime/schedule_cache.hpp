// ScheduleCache: built schedules kept per call shape, so that a shape called again (training
// repeats its shapes every step) rearms one instead of building it.
#pragma once

#include <array>
#include <cstddef>
#include <deque>
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
  int device = -2;           ///< the call's device (CommunicatorImpl::kNoDevice: host memory)
  bool directLinks = false;  ///< device path: links decided per rank (else all staged)
  bool operator==(const ScheduleShape&) const = default;
};

/// Per communicator, engine lock held for every call.
class ScheduleCache {
 public:
  /// `enabled` from SHARC_SCHEDULE_CACHE.
  explicit ScheduleCache(bool enabled) : enabled_(enabled) {}
  /// A finished schedule of `shape` that no request holds any more, or null.
  std::shared_ptr<algo::Schedule> take(const ScheduleShape& shape);
  /// Keeps a schedule just built for `shape` if it can be rearmed (Schedule::prepareReuse)
  /// and the shape was called before among the last kSeen shapes built: a shape called once
  /// costs no memory.
  void keep(const ScheduleShape& shape, const std::shared_ptr<algo::Schedule>& schedule);

  /// Schedules kept per shape: FSDP has two or three calls of one shape in flight at once.
  static constexpr size_t kPerShape = 4;
  /// Shapes kept, and operations kept in all (about 240 bytes each); past either, the shape
  /// kept first goes.
  static constexpr size_t kMaxShapes = 32;
  static constexpr size_t kMaxOps = size_t{1} << 18;
  /// Shapes remembered (without a schedule) to tell a repeated shape from a new one.
  static constexpr size_t kSeen = 64;

 private:
  struct Hash {
    size_t operator()(const ScheduleShape& s) const;
  };
  void evictOldest();
  bool enabled_;
  std::unordered_map<ScheduleShape, std::vector<std::shared_ptr<algo::Schedule>>, Hash> kept_;
  std::deque<ScheduleShape> keptOrder_;  // kept_'s shapes, first kept first
  std::array<ScheduleShape, kSeen> seen_{};
  size_t seenNext_ = 0;
  size_t ops_ = 0;
};

}  // namespace sharc::detail
