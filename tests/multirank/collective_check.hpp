// Runs one collective on a communicator and checks it element by element against the float64
// reference; shared by the multi-rank tests.
#pragma once

#include <sharc/communicator.hpp>
#include <string>

namespace sharc::testing {

using Coll = CollectiveKind;  // AllGather to Broadcast
const char* collName(Coll c);

/// Returns "" on success, else a description of the first mismatches.
std::string runAndCheck(Communicator& comm, Coll coll, DataType type, RedOp op, size_t count,
                        bool inPlace, int root = 0);

}  // namespace sharc::testing
