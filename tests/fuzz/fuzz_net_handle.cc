// The NCCL plugin's wire formats (plugin/nccl/net_handle.cc): the 128-byte listen handle NCCL
// carries between ranks, and the connect request and accept reply peers send over the
// fabric. Byte 0 picks the decoder, the rest is the message. Properties: a decoder returns or
// throws sharc::Error(InvalidArgument); what it returns encodes to a message that decodes to
// the same values.
#include <cstring>
#include <sharc/error.hpp>
#include <string>

#include "fuzz_common.hpp"
#include "net_handle.hpp"

namespace {

using sharc::fuzz::broken;
namespace nccl = sharc::nccl;

bool same(const nccl::ProcessIdentity& a, const nccl::ProcessIdentity& b) {
  return a.host == b.host && a.pid == b.pid;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t* msg = data + 1;
  const size_t bytes = size - 1;
  try {
    switch (data[0] % 3) {
      case 0: {
        unsigned char handle[nccl::kHandleBytes] = {};  // NCCL always passes 128 bytes
        std::memcpy(handle, msg, std::min(bytes, sizeof handle));
        const nccl::ListenHandle h = nccl::decodeHandle(handle);
        if (h.address.empty() || h.address.size() > nccl::kMaxHandleAddress)
          broken("a decoded handle with an impossible address");
        unsigned char again[nccl::kHandleBytes];
        nccl::encodeHandle(h, again);
        const nccl::ListenHandle h2 = nccl::decodeHandle(again);
        if (h2.address != h.address || h2.listenId != h.listenId || !same(h2.owner, h.owner))
          broken("a handle does not survive encode(decode(x))");
        break;
      }
      case 1: {
        const nccl::ConnectRequest r = nccl::decodeConnectRequest(msg, bytes);
        const std::string again = nccl::encodeConnectRequest(r);
        const nccl::ConnectRequest r2 = nccl::decodeConnectRequest(again.data(), again.size());
        if (r2.address != r.address || r2.sendCommId != r.sendCommId || !same(r2.sender, r.sender))
          broken("a connect request does not survive encode(decode(x))");
        break;
      }
      case 2: {
        const uint64_t id = nccl::decodeAcceptReply(msg, bytes);
        const std::string again = nccl::encodeAcceptReply(id);
        if (nccl::decodeAcceptReply(again.data(), again.size()) != id)
          broken("an accept reply does not survive encode(decode(x))");
        break;
      }
    }
  } catch (const sharc::Error& e) {
    if (e.code() != sharc::Result::InvalidArgument) broken("a decoder threw another error");
  }
  return 0;
}
