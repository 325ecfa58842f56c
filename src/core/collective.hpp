// The names of sharc::CollectiveKind (include/sharc/types.hpp) in every spelling sharc reads or
// prints, from one table.
#pragma once

#include <optional>
#include <sharc/types.hpp>
#include <string>
#include <string_view>

namespace sharc::core {

/// "AllGather", "ReduceScatter", ..., "SendRecv" for point-to-point: how logs and errors name a
/// call; "unknown collective" for an out-of-range value.
const char* collectiveName(CollectiveKind kind) noexcept;
/// "all_gather", "reduce_scatter", "all_reduce", ...: the spelling of nccl-tests, sharc-perf
/// and sharc-plan.
const char* collectiveToolName(CollectiveKind kind) noexcept;
/// "allgather", "reducescatter", "allreduce", ...: the spelling of SHARC_ALGO and tuner files.
std::string collectiveKey(CollectiveKind kind);
/// Any spelling above, case-insensitive ("AllGather", "all_gather", "allgather").
std::optional<CollectiveKind> parseCollective(std::string_view name) noexcept;
/// True for the collectives that reduce (ReduceScatter, AllReduce).
bool collectiveReduces(CollectiveKind kind) noexcept;

}  // namespace sharc::core
