// Whether a usable CUDA device exists, asked in a forked child: CUDA does not survive fork,
// so a parent that forks ranks must never initialise it itself.
#pragma once

#include <string>

namespace sharc::testing {

/// True when a child process finds a CUDA device; otherwise false with the reason in `why`.
/// The answer is cached for the process.
bool cudaDevicePresent(std::string* why);

}  // namespace sharc::testing
