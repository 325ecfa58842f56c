// The flight recorder: the last SHARC_TRACE_ENTRIES operations of one communicator, always on.
// Recording costs a few stores and clock reads per call (no allocation once the ring is full);
// the JSON is made only when someone asks (a failure, SIGUSR1, the trace socket, the API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <sharc/types.hpp>
#include <string>
#include <vector>

#include "algorithms/tag.hpp"

namespace sharc::detail {

enum class TraceState : uint8_t { Queued, Started, Completed, Failed };
const char* traceStateName(TraceState s);

/// Where an operation stood (the schedule's progress, kept when it fails).
struct TraceProgress {
  bool valid = false;
  size_t opsDone = 0, opsTotal = 0;
  const char* waitingFor = "none";
  int peer = -1, peerWorldRank = -1;
  uint64_t bytesReceived = 0, bytesExpected = 0;
};

/// One operation as the recorder keeps it (README "Flight record" documents the JSON fields).
struct TraceEntry {
  uint64_t id = 0;      ///< record number on this communicator (1-based); 0: empty slot
  uint64_t seq = 0;     ///< collective sequence number (0 for point-to-point groups)
  uint64_t p2pSeq = 0;  ///< point-to-point group number (0 for collectives)
  CollectiveKind kind = CollectiveKind::Barrier;
  DataType type = DataType::Uint8;
  RedOp op = RedOp::Sum;
  bool hasOp = false;  ///< the call reduces (op is meaningful)
  int root = -1;       ///< Broadcast's root, else -1
  size_t count = 0;    ///< elements per rank (bytes for point-to-point)
  const char* algorithm = "";
  size_t chunkBytes = 0;
  bool scheduleReused = false;  ///< rearmed a kept schedule instead of building one
  const char* internal = "";    ///< "split", "destroy": calls sharc makes itself
  const char* path = "host";    ///< "host", or "stream" for the executor of stream-ordered calls
  TraceState state = TraceState::Queued;
  int64_t queuedNs = 0, startedNs = 0, endedNs = 0;  ///< CLOCK_REALTIME, 0 = not yet
  std::string error;
  TraceProgress failedAt;  ///< where it stood when it failed
  std::string probeNote;   ///< what the stall probe had found when it failed
};

/// A ring of the last `capacity` entries of one communicator (engine lock held for all calls).
class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}
  /// A fresh entry with its id assigned (it overwrites the oldest once the ring is full).
  TraceEntry& add();
  /// The entry with record number `id`, null once it has been overwritten.
  TraceEntry* find(uint64_t id);
  /// The newest entry of collective sequence `seq` still kept, null if none.
  const TraceEntry* findSeq(uint64_t seq) const;
  /// Marks entry `id` completed or failed now; updates the last completed collective.
  void finish(uint64_t id, bool ok, const std::string& error);
  /// The entries, oldest first.
  std::vector<const TraceEntry*> entries() const;
  uint64_t lastCompletedSeq() const { return lastCompletedSeq_; }
  int64_t lastCompletedNs() const { return lastCompletedNs_; }

 private:
  size_t capacity_;
  std::vector<TraceEntry> ring_;
  uint64_t nextId_ = 1;
  uint64_t lastCompletedSeq_ = 0;
  int64_t lastCompletedNs_ = 0;
};

/// CLOCK_REALTIME in nanoseconds (comparable across the hosts of a job, unlike steady_clock).
int64_t wallClockNs();

/// Appends `text` to `out` as a JSON string literal (quotes and escapes included).
void appendJsonString(std::string& out, const std::string& text);

/// Appends the entry as one JSON object; `live` (an operation still running) replaces the
/// progress kept at failure; `liveNote` the stall probe's note.
void appendEntryJson(std::string& out, const TraceEntry& e, const TraceProgress* live = nullptr,
                     const std::string* liveNote = nullptr);

}  // namespace sharc::detail
