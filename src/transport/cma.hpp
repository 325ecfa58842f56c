// Cross-memory attach (Linux process_vm_readv): a rank copies straight out of another
// process's memory on the same host, one copy and no bounce buffer. Used by the one-host
// algorithms; the fabric still carries the small messages that say where to read.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace sharc::transport {

/// Lets other processes of this user read this process's memory where the kernel's Yama
/// policy would otherwise restrict it to descendants (prctl PR_SET_PTRACER); harmless
/// elsewhere.
void cmaAllowPeers();

/// Address of a word with a fixed, known value in this process (capability probe).
uint64_t cmaProbeAddress();
/// True if this process can read the probe word of process `pid` at `address`.
bool cmaProbe(pid_t pid, uint64_t address);

/// Copies `bytes` from `remoteAddress` in process `pid` into `local`. Returns "" on success,
/// else a message with the system error (hot path: no exceptions).
std::string cmaRead(pid_t pid, uint64_t remoteAddress, void* local, size_t bytes);

/// Copies `bytes` from `local` to `remoteAddress` in process `pid` (process_vm_writev).
std::string cmaWrite(pid_t pid, uint64_t remoteAddress, const void* local, size_t bytes);

}  // namespace sharc::transport
