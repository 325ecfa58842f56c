// The process's tuner parameters, apart from the communicator's code so that the parts that
// only plan (the device path's link decision) link without it.
#include "algorithms/tuner.hpp"
#include "core/config.hpp"
#include "runtime/communicator_impl.hpp"

namespace sharc::detail {

const algo::TunerParams& tunerParams() {
  static const algo::TunerParams params = algo::TunerParams::fromConfig(core::Config::get());
  return params;
}

}  // namespace sharc::detail
