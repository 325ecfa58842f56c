// The bootstrap messages of communicator creation: every field survives encode/decode, and a
// malformed message is an error naming this rank, the round and the sender.
#include <gtest/gtest.h>

#include <sharc/error.hpp>
#include <string>

#include "runtime/bootstrap_messages.hpp"

namespace sharc::detail {
namespace {

// Decoding `bytes` throws InternalError whose message holds every one of `parts`.
template <typename Message>
void expectMalformed(const std::string& bytes, std::initializer_list<const char*> parts) {
  try {
    Message::decode(bytes, 3, 5);
    FAIL() << "decoded a malformed message of " << bytes.size() << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Result::InternalError);
    for (const char* p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(BootstrapMessages, HelloKeepsEveryFieldIncludingNulAndEmptyOnes) {
  const std::string node("host\0/boot", 10);
  for (const HelloMessage& m :
       {HelloMessage{node, 4242, 0x7ffdcafe0000ull, "b00t-id"}, HelloMessage{"", 0, 0, ""},
        HelloMessage{std::string(4000, 'n'), -1, ~0ull, "m"}}) {
    const HelloMessage d = HelloMessage::decode(m.encode(), 0, 1);
    EXPECT_EQ(d.node, m.node);
    EXPECT_EQ(d.pid, m.pid);
    EXPECT_EQ(d.cmaProbe, m.cmaProbe);
    EXPECT_EQ(d.machine, m.machine);
  }
}

TEST(BootstrapMessages, AddressKeepsBinaryAddresses) {
  std::string address;
  for (int i = 0; i < 256; ++i) address.push_back(static_cast<char>(i));
  const AddressMessage m{"tcp;ofi_rxm", "sharc-1234-abcd", address};
  const AddressMessage d = AddressMessage::decode(m.encode(), 0, 1);
  EXPECT_EQ(d.provider, m.provider);
  EXPECT_EQ(d.segment, m.segment);
  EXPECT_EQ(d.address, address);
}

TEST(BootstrapMessages, ReadinessKeepsBothFlags) {
  for (bool read : {false, true})
    for (bool mapped : {false, true}) {
      const ReadinessMessage d =
          ReadinessMessage::decode(ReadinessMessage{read, mapped}.encode(), 0, 1);
      EXPECT_EQ(d.canReadNext, read);
      EXPECT_EQ(d.shmMapped, mapped);
    }
}

TEST(BootstrapMessages, TruncatedMessagesNameRankRoundAndSender) {
  const std::string hello = HelloMessage{"node", 1, 2, "machine"}.encode();
  for (size_t n = 0; n < hello.size(); ++n)
    expectMalformed<HelloMessage>(hello.substr(0, n),
                                  {"rank 3", "init: hello", "from rank 5", "too short"});
  const std::string address = AddressMessage{"shm", "", "addr"}.encode();
  for (size_t n = 0; n < address.size(); ++n)
    expectMalformed<AddressMessage>(address.substr(0, n), {"rank 3", "address", "from rank 5"});
  expectMalformed<ReadinessMessage>("1", {"readiness", "from rank 5"});
}

TEST(BootstrapMessages, TrailingBytesAreAnError) {
  expectMalformed<HelloMessage>(HelloMessage{"n", 1, 2, "m"}.encode() + "x", {"1 bytes more"});
  expectMalformed<ReadinessMessage>(ReadinessMessage{}.encode() + "xy", {"2 bytes more"});
}

TEST(BootstrapMessages, AStringLengthBeyondTheMessageIsAnError) {
  std::string bytes = AddressMessage{"tcp", "", ""}.encode();
  bytes[0] = static_cast<char>(0xff);  // the provider's length now exceeds what follows
  expectMalformed<AddressMessage>(bytes, {"too short for a string"});
}

}  // namespace
}  // namespace sharc::detail
