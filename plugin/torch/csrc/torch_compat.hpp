// The one place where differences between torch versions are handled. sharc supports torch
// 2.6 (Debian 13's, the oldest tested) to 2.15 (the newest on PyPI when this was written).
//
// c10d::Backend gained virtuals after 2.6; sharc overrides each from the version that has it.
// The versions come from the pull requests that added them; the static_asserts below check
// each guess against the torch being compiled against, so a wrong one fails the build with a
// message naming the macro instead of silently not overriding.
#pragma once

#include <torch/version.h>

#include <chrono>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

#define SHARC_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(SHARC_TORCH_AT_LEAST(2, 6), "sharc's torch backend needs torch 2.6 or newer");

// abort(), shutdown() and getError() (c10d::ErrorType): torch 2.7.
#define SHARC_TORCH_HAS_ABORT SHARC_TORCH_AT_LEAST(2, 7)
// getBackendOptions() and Backend::Options::global_ranks_in_group: torch 2.9.
#define SHARC_TORCH_HAS_BACKEND_OPTIONS SHARC_TORCH_AT_LEAST(2, 9)
// setTimeout(): torch 2.12.
#define SHARC_TORCH_HAS_SET_TIMEOUT SHARC_TORCH_AT_LEAST(2, 12)
// split(store, ranks, options), what ProcessGroup::splitGroup calls: torch 2.9.
#define SHARC_TORCH_HAS_SPLIT SHARC_TORCH_AT_LEAST(2, 9)
// supportsCoalescing(), which batch_isend_irecv and _abort_process_group read: after 2.6
// (pytorch#135338); 2.7 is a guess, checked by the static_assert on each torch built against.
#define SHARC_TORCH_HAS_SUPPORTS_COALESCING SHARC_TORCH_AT_LEAST(2, 7)
// supportsShrinking() and shrink(ranks_to_exclude, flags, options): after 2.6 (NCCL 2.27's
// ncclCommShrink); 2.10 is a guess, checked by the static_assert on each torch built against.
#define SHARC_TORCH_HAS_SHRINK SHARC_TORCH_AT_LEAST(2, 10)
// SHARC_TORCH_CUDA (set by setup.py): built against a CUDA torch with the CUDA toolkit's
// headers, so the extension uses c10::cuda directly instead of looking it up at run time.
#ifndef SHARC_TORCH_CUDA
#define SHARC_TORCH_CUDA 0
#endif

namespace sharc::torch_backend::compat {

template <typename B>
constexpr bool hasAbort = requires(B& b) {
  b.abort();
  b.shutdown();
  b.getError();
};
template <typename B>
constexpr bool hasBackendOptions = requires(B& b) {
  b.getBackendOptions();
};
template <typename B>
constexpr bool hasSetTimeout = requires(B& b) {
  b.setTimeout(std::chrono::milliseconds(1));
};
template <typename B>
constexpr bool hasSplit = requires(B& b, const c10::intrusive_ptr<c10d::Store>& store,
                                   const std::vector<int>& ranks) {
  b.split(store, ranks, c10::intrusive_ptr<typename B::Options>());
};
template <typename B>
constexpr bool hasSupportsCoalescing = requires(const B& b) {
  b.supportsCoalescing();
};
template <typename B>
constexpr bool hasShrink = requires(B& b, const std::vector<int64_t>& ranks) {
  b.shrink(ranks, 0, c10::intrusive_ptr<typename B::Options>());
};

static_assert(hasAbort<c10d::Backend> == bool(SHARC_TORCH_HAS_ABORT),
              "SHARC_TORCH_HAS_ABORT disagrees with this torch's c10d::Backend: fix its version");
static_assert(hasBackendOptions<c10d::Backend> == bool(SHARC_TORCH_HAS_BACKEND_OPTIONS),
              "SHARC_TORCH_HAS_BACKEND_OPTIONS disagrees with this torch's c10d::Backend: fix its "
              "version");
static_assert(hasSetTimeout<c10d::Backend> == bool(SHARC_TORCH_HAS_SET_TIMEOUT),
              "SHARC_TORCH_HAS_SET_TIMEOUT disagrees with this torch's c10d::Backend: fix its "
              "version");
static_assert(hasSplit<c10d::Backend> == bool(SHARC_TORCH_HAS_SPLIT),
              "SHARC_TORCH_HAS_SPLIT disagrees with this torch's c10d::Backend: fix its version");
static_assert(hasSupportsCoalescing<c10d::Backend> == bool(SHARC_TORCH_HAS_SUPPORTS_COALESCING),
              "SHARC_TORCH_HAS_SUPPORTS_COALESCING disagrees with this torch's c10d::Backend: fix "
              "its version");
static_assert(hasShrink<c10d::Backend> == bool(SHARC_TORCH_HAS_SHRINK),
              "SHARC_TORCH_HAS_SHRINK disagrees with this torch's c10d::Backend: fix its version");

}  // namespace sharc::torch_backend::compat
