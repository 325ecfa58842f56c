// UniqueId encoding, job tokens and the advertised address.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <set>
#include <sharc/error.hpp>
#include <string>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"

namespace sharc::bootstrap {
namespace {

void expectSame(const RootAddress& a, const RootAddress& b) {
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.port, b.port);
  EXPECT_EQ(a.token, b.token);
}

TEST(UniqueId, RoundTripIpv4) {
  const RootAddress root{"10.1.2.3", 29500, 0x0123456789abcdefull};
  const UniqueId id = encodeUniqueId(root);
  expectSame(decodeUniqueId(id), root);
  EXPECT_EQ(root.toString(), "10.1.2.3:29500");
}

TEST(UniqueId, RoundTripIpv6) {
  const RootAddress root{"2001:db8::5", 65535, ~0ull};
  expectSame(decodeUniqueId(encodeUniqueId(root)), root);
  EXPECT_EQ(root.toString(), "[2001:db8::5]:65535");
  const RootAddress loop{"::1", 1, 0};
  expectSame(decodeUniqueId(encodeUniqueId(loop)), loop);
}

TEST(UniqueId, EncodingIsDeterministic) {
  const RootAddress root{"192.168.0.9", 1234, 42};
  EXPECT_EQ(encodeUniqueId(root).bytes, encodeUniqueId(root).bytes);
  RootAddress other = root;
  other.token = 43;
  EXPECT_NE(encodeUniqueId(root).bytes, encodeUniqueId(other).bytes);
}

TEST(UniqueId, EncodeRejectsBadInput) {
  EXPECT_THROW(encodeUniqueId(RootAddress{"node1.example", 80, 1}), Error);
  EXPECT_THROW(encodeUniqueId(RootAddress{"", 80, 1}), Error);
  EXPECT_THROW(encodeUniqueId(RootAddress{"10.0.0.1", 0, 1}), Error);
}

TEST(UniqueId, EveryCorruptedByteIsRejected) {
  for (const char* host : {"10.1.2.3", "fd00::1234"}) {
    const UniqueId good = encodeUniqueId(RootAddress{host, 29500, 0x5555aaaa5555aaaaull});
    for (size_t i = 0; i < UniqueId::kBytes; ++i) {
      for (unsigned char flip : {0x01, 0x80, 0xff}) {
        UniqueId bad = good;
        bad.bytes[i] = static_cast<char>(bad.bytes[i] ^ flip);
        try {
          decodeUniqueId(bad);
          ADD_FAILURE() << host << ": corruption of byte " << i << " not detected";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Result::InvalidArgument);
          EXPECT_NE(std::string(e.what()).find("malformed UniqueId"), std::string::npos);
        }
      }
    }
  }
}

TEST(UniqueId, ZeroAndGarbageIdsAreRejected) {
  EXPECT_THROW(decodeUniqueId(UniqueId{}), Error);
  UniqueId garbage;
  for (size_t i = 0; i < UniqueId::kBytes; ++i) garbage.bytes[i] = static_cast<char>(i * 37 + 11);
  EXPECT_THROW(decodeUniqueId(garbage), Error);
}

TEST(EnvironmentToken, DeterministicAndSensitive) {
  const uint64_t base = environmentToken("10.0.0.1:29500", 8, "");
  EXPECT_EQ(base, environmentToken("10.0.0.1:29500", 8, ""));
  EXPECT_NE(base, 0u);
  std::set<uint64_t> tokens = {base};
  tokens.insert(environmentToken("10.0.0.1:29501", 8, ""));
  tokens.insert(environmentToken("10.0.0.1:29500", 9, ""));
  tokens.insert(environmentToken("10.0.0.1:29500", 8, "secret"));
  tokens.insert(environmentToken("10.0.0.1:2950", 8, "0"));  // field boundaries matter
  tokens.insert(environmentToken("", 0, ""));
  EXPECT_EQ(tokens.size(), 6u);
  // A one-bit input change flips about half of the output bits.
  const uint64_t a = environmentToken("a", 1, "");
  const uint64_t b = environmentToken("b", 1, "");  // 'a' ^ 'b' == 3
  EXPECT_GT(__builtin_popcountll(a ^ b), 16);
}

TEST(LocalAdvertiseAddress, HonoursInterfaceName) {
  EXPECT_EQ(localAdvertiseAddress("lo"), "127.0.0.1");
  EXPECT_EQ(localAdvertiseAddress("nosuchif0,lo"), "127.0.0.1");
  try {
    localAdvertiseAddress("nosuchif0");
    ADD_FAILURE() << "expected an error for an unknown interface";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Result::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("SHARC_SOCKET_IFNAME='nosuchif0'"), std::string::npos)
        << e.what();
  }
}

TEST(LocalAdvertiseAddress, AutomaticChoiceIsNumeric) {
  const std::string host = localAdvertiseAddress("");
  unsigned char buf[16];
  EXPECT_TRUE(inet_pton(AF_INET, host.c_str(), buf) == 1 ||
              inet_pton(AF_INET6, host.c_str(), buf) == 1)
      << host;
  EXPECT_NE(host, "");
}

}  // namespace
}  // namespace sharc::bootstrap
