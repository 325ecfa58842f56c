// The 128-byte UniqueId (bootstrap/unique_id.cc): the bytes a user copies between processes
// (and the CollNet listen handle NCCL gathers). Any input either decodes or is rejected with
// sharc::Error; one that decodes encodes back to exactly the same bytes, because the decoder
// checks every byte (fields, zero padding, checksum).
#include <cstring>
#include <sharc/communicator.hpp>
#include <sharc/error.hpp>

#include "bootstrap/bootstrap.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sharc::UniqueId id;  // a shorter input is zero-padded, a longer one cut
  std::memcpy(id.bytes.data(), data, std::min(size, sharc::UniqueId::kBytes));
  sharc::bootstrap::RootAddress root;
  try {
    root = sharc::bootstrap::decodeUniqueId(id);
  } catch (const sharc::Error& e) {
    if (e.code() != sharc::Result::InvalidArgument) sharc::fuzz::broken("not InvalidArgument");
    return 0;
  }
  if (root.port == 0 || root.host.empty()) sharc::fuzz::broken("decoded port 0 or no host");
  if (sharc::bootstrap::encodeUniqueId(root).bytes != id.bytes)
    sharc::fuzz::broken("a decoded id does not encode back to the same bytes");
  return 0;
}
