// --calibrate FILE: measures the tuner's cost-model parameters on the running job and writes
// them as a SHARC_TUNER_FILE.
#pragma once

#include <sharc/communicator.hpp>

#include "options.hpp"

namespace sharc::perf {

/// Measures (collective over `comm`; rank 0 prints and writes options.calibratePath):
///   step_us          median 8 B all_reduce on a 1-rank communicator (one schedule's overhead)
///   copy.gbps        16 MiB memcpy on rank 0, one core
///   reduce.gbps      float32 sum kernel over 16 MiB (bytes of one input per second)
///   local.*          rank 0 and the next rank on its node: 8 B and 16 MiB broadcasts, roots
///                    alternating (ping-pong), median; alpha = t(8 B) - 2 * step_us,
///                    gbps = 16 MiB / (t(16 MiB) - t(8 B))
///   fabric.*         the same with the first rank on another node
/// Nodes are told apart by SHARC_NODE_ID, else the host name. Keys that cannot be measured
/// (no second rank on rank 0's node, a single node) are left out: the tuner keeps its
/// defaults for them. Returns 0, or 1 when the file cannot be written.
int runCalibration(Communicator& comm, const Options& options);

}  // namespace sharc::perf
