// Registers sharc._C._plan_fsdp (plan_binding.cc).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace sharc::torch_backend {

void registerPlan(py::module_& m);

}  // namespace sharc::torch_backend
