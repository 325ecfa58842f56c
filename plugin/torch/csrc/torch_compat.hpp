// The one place where differences between torch versions are handled (sharc targets 2.4+).
#pragma once

#include <torch/version.h>

#define SHARC_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(SHARC_TORCH_AT_LEAST(2, 4), "sharc's torch backend needs torch 2.4 or newer");

