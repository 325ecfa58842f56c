// The SHARC_TUNER_FILE text (core::parseTunerText). Properties: it returns or throws
// sharc::Error(InvalidArgument) naming SHARC_TUNER_FILE and the path; what it returns has
// only known keys with finite, non-negative values, and survives printing and parsing again.
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sharc/error.hpp>
#include <sstream>
#include <string>

#include "core/config.hpp"
#include "fuzz_common.hpp"

using sharc::fuzz::broken;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, double> values;
  try {
    values = sharc::core::parseTunerText(text, "fuzz.tuner");
  } catch (const sharc::Error& e) {
    if (e.code() != sharc::Result::InvalidArgument) broken("not InvalidArgument");
    if (std::strstr(e.what(), "SHARC_TUNER_FILE 'fuzz.tuner'") == nullptr)
      broken("an error does not name SHARC_TUNER_FILE and the path");
    return 0;
  }
  std::ostringstream again;
  again << std::setprecision(17);
  for (const auto& [key, v] : values) {
    bool known = false;
    for (const char* k : sharc::core::kTunerKeys) known = known || key == k;
    if (!known) broken("an unknown key was accepted");
    if (!std::isfinite(v) || v < 0) broken("a negative or non-finite value was accepted");
    again << key << " = " << v << "\n";
  }
  if (sharc::core::parseTunerText(again.str(), "again") != values)
    broken("the parsed settings do not parse back to the same values");
  return 0;
}
