// sharc._C: the creator torch.distributed calls for backend "sharc", and measuring aids.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "backend.hpp"
#include "plan_binding.hpp"
#include "tensor_args.hpp"
#include "torch_compat.hpp"

namespace {

using sharc::torch_backend::ProcessGroupSharc;

ProcessGroupSharc& asSharc(const c10::intrusive_ptr<c10d::Backend>& backend) {
  auto* pg = dynamic_cast<ProcessGroupSharc*>(backend.get());
  TORCH_CHECK(pg != nullptr, "sharc: expected a sharc backend (group._get_backend(device)), got ",
              backend->getBackendName());
  return *pg;
}

// Median time in microseconds of `iters` blocking all-reduces of `numel` float32 elements
// issued straight to the engine, bypassing torch: the baseline of the backend's overhead.
double engineAllReduceUs(const c10::intrusive_ptr<c10d::Backend>& backend, int64_t numel,
                         int iters) {
  sharc::Communicator& comm = asSharc(backend).communicator();
  std::vector<float> buf(static_cast<size_t>(std::max<int64_t>(numel, 1)), 1.0f);
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    comm.allReduce(buf.data(), buf.data(), static_cast<size_t>(numel), sharc::DataType::Float32,
                   sharc::RedOp::Sum);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + static_cast<long>(us.size() / 2), us.end());
  return us.empty() ? 0.0 : us[us.size() / 2];
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "sharc's torch.distributed backend (import sharc.torch to register it)";
  m.def("_create_backend", &sharc::torch_backend::createBackend, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout_seconds"), py::arg("global_ranks"),
        py::call_guard<py::gil_scoped_release>(),
        "Creates the sharc backend of one process group (torch calls this through "
        "sharc.torch's registered creator).");
  m.def(
      "_provider",
      [](const c10::intrusive_ptr<c10d::Backend>& b) {
        return asSharc(b).communicator().provider();
      },
      "The libfabric provider a sharc group's endpoint uses.");
  // The type a sharc group's backend object (group._get_backend(device)) has in Python: its
  // base's methods, plus what other backends' Python types offer beside them.
  py::class_<ProcessGroupSharc, c10d::Backend, c10::intrusive_ptr<ProcessGroupSharc>>(
      m, "ProcessGroupSharc")
      .def(
          "_set_default_timeout",
          [](ProcessGroupSharc& self, std::chrono::milliseconds timeout) {
            self.changeTimeout(timeout);
          },
          py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
          "Bounds the group's later operations by `timeout` (a timedelta), as "
          "ProcessGroupGloo's and ProcessGroupNCCL's do.");
  m.def("_engine_allreduce_us", &engineAllReduceUs, py::arg("backend"), py::arg("numel"),
        py::arg("iters"), py::call_guard<py::gil_scoped_release>(),
        "Median microseconds of blocking float32 all-reduces issued to the engine directly.");
  m.def(
      "_cuda_available",
      [] {
        std::string why;
        const bool ok = sharc::cudaAvailable(&why);
        return py::make_tuple(ok, why);
      },
      "(usable, why not): whether libsharc can run collectives on CUDA tensors here.");
  sharc::torch_backend::registerPlan(m);
  m.attr("TORCH_VERSION_BUILT") =
      std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
}
