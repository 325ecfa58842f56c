// One collective of the soak run, executed and checked element by element against the
// float64/int64 reference of tests/harness/reference.hpp.
#pragma once

#include <cstddef>
#include <sharc/communicator.hpp>
#include <string>
#include <vector>

namespace sharc::soak {

using Coll = CollectiveKind;  // AllGather to Barrier
const char* collName(Coll c);

struct Call {
  Coll coll = Coll::AllReduce;
  DataType type = DataType::Float32;
  RedOp op = RedOp::Sum;
  size_t count = 1;  ///< per rank for AllGather/ReduceScatter, in total otherwise
  size_t first = 0;  ///< index offset of the inputs (differs from call to call)
  int root = 0;      ///< Broadcast
  bool inPlace = false;
  bool polled = false;   ///< the non-blocking form, completed by test() in a loop
  bool corrupt = false;  ///< self-test: flip a bit of the result before checking it
};

/// Send and receive buffers allocated once (8 MiB and guards each), so that the run's own
/// allocations do not move the resident-memory figures.
struct Buffers {
  static constexpr size_t kGuard = 64;
  static constexpr size_t kCapacity = size_t{8} << 20;
  Buffers();
  std::vector<unsigned char> send, recv;
};

/// Runs `call` on `comm` and checks every element of the result and the guard bytes around
/// it; throws std::runtime_error naming the rank, the call number `seq`, the communicator
/// `where` and the first wrong elements.
void runAndCheck(Communicator& comm, const Call& call, Buffers& buffers, long seq,
                 const std::string& where);

}  // namespace sharc::soak
