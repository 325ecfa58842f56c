// UniqueId encoding, the advertised rendezvous address and job tokens.
//
// UniqueId layout (128 bytes, integers little-endian):
//   [0,4)   magic "SHID"          [4,6)   version (1)       [6]  family (4 or 6)  [7] 0
//   [8,10)  port (non-zero)       [10,12) 0                 [12,28) address (IPv4: first 4)
//   [28,36) job token             [36,40) FNV-1a-32 checksum of bytes [0,36)
//   [40,128) zero
// Decoding checks every field, the checksum and the zero padding, so any corruption of a
// single byte is detected.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sharc/error.hpp>
#include <sstream>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"
#include "core/config.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"

namespace sharc::bootstrap {
namespace {

constexpr uint32_t kIdMagic = 0x44494853;  // "SHID"
constexpr uint16_t kIdVersion = 1;
constexpr size_t kChecksumOffset = 36;
constexpr size_t kUsedBytes = 40;

void put(char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// splitmix64's finaliser: spreads FNV's weak high bits over the whole word.
uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

[[noreturn]] void badId(const std::string& why) {
  throw Error(Result::InvalidArgument, "malformed UniqueId: " + why +
                                           " (was it produced by makeUniqueId of this sharc "
                                           "version and copied intact?)");
}

// True when `name` matches one entry of the comma-separated list (exactly or as a prefix,
// like NCCL_SOCKET_IFNAME: "eth" selects eth0, eth1...).
bool matchesIfname(const std::string& name, const std::string& list) {
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty() && name.compare(0, item.size(), item) == 0) return true;
  }
  return false;
}

}  // namespace

uint64_t randomToken() {
  uint64_t token = 0;
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (!urandom.read(reinterpret_cast<char*>(&token), sizeof(token))) {
    std::random_device rd;
    token = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return token != 0 ? token : 0x9e3779b97f4a7c15ull;  // 0 is reserved as "no token"
}

std::string RootAddress::toString() const {
  return net::joinHostPort(host, port);
}

UniqueId encodeUniqueId(const RootAddress& root) {
  UniqueId id;
  char* p = id.bytes.data();
  unsigned char addr[16] = {0};
  uint8_t family = 0;
  if (::inet_pton(AF_INET, root.host.c_str(), addr) == 1) {
    family = 4;
  } else if (::inet_pton(AF_INET6, root.host.c_str(), addr) == 1) {
    family = 6;
  } else {
    throw Error(Result::InvalidArgument,
                "encodeUniqueId: host '" + root.host + "' is not a numeric IPv4 or IPv6 address");
  }
  if (root.port == 0) throw Error(Result::InvalidArgument, "encodeUniqueId: port is 0");
  put(p, kIdMagic, 4);
  put(p + 4, kIdVersion, 2);
  p[6] = static_cast<char>(family);
  put(p + 8, root.port, 2);
  std::memcpy(p + 12, addr, 16);
  put(p + 28, root.token, 8);
  put(p + kChecksumOffset, core::fnv1a32(p, kChecksumOffset), 4);
  return id;
}

RootAddress decodeUniqueId(const UniqueId& id) {
  const char* p = id.bytes.data();
  if (get(p, 4) != kIdMagic) badId("bad magic number");
  if (get(p + 4, 2) != kIdVersion) {
    badId("unsupported version " + std::to_string(get(p + 4, 2)) + " (expected " +
          std::to_string(kIdVersion) + ")");
  }
  const auto family = static_cast<unsigned char>(p[6]);
  if (family != 4 && family != 6) badId("bad address family " + std::to_string(family));
  if (get(p + kChecksumOffset, 4) != core::fnv1a32(p, kChecksumOffset)) badId("checksum mismatch");
  if (p[7] != 0 || get(p + 10, 2) != 0) badId("non-zero reserved bytes");
  if (family == 4) {
    for (int i = 16; i < 28; ++i) {
      if (p[i] != 0) badId("non-zero bytes after the IPv4 address");
    }
  }
  for (size_t i = kUsedBytes; i < UniqueId::kBytes; ++i) {
    if (p[i] != 0) badId("non-zero padding at byte " + std::to_string(i));
  }
  RootAddress root;
  root.port = static_cast<uint16_t>(get(p + 8, 2));
  if (root.port == 0) badId("port 0");
  char text[INET6_ADDRSTRLEN] = {0};
  if (::inet_ntop(family == 4 ? AF_INET : AF_INET6, p + 12, text, sizeof(text)) == nullptr) {
    badId("unprintable address");
  }
  root.host = text;
  root.token = get(p + 28, 8);
  return root;
}

std::string localAdvertiseAddress(const std::string& ifnames) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    if (!ifnames.empty()) {
      throw Error(Result::SystemError, "SHARC_SOCKET_IFNAME='" + ifnames +
                                           "': cannot list interfaces: " + net::errnoString(errno));
    }
    return "127.0.0.1";
  }
  std::string chosen;
  std::string chosenV6;
  std::string seen;  // interface names, for the error message
  for (const ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_name == nullptr) continue;
    const std::string name = ifa->ifa_name;
    if (seen.find(" " + name + ",") == std::string::npos) seen += " " + name + ",";
    if ((ifa->ifa_flags & IFF_UP) == 0) continue;
    if (ifnames.empty() && (ifa->ifa_flags & IFF_LOOPBACK) != 0) continue;
    if (!ifnames.empty() && !matchesIfname(name, ifnames)) continue;
    char text[INET6_ADDRSTRLEN] = {0};
    if (ifa->ifa_addr->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      chosen = text;
      break;
    }
    if (ifa->ifa_addr->sa_family == AF_INET6 && chosenV6.empty() && !ifnames.empty()) {
      // Only as a fallback for an explicitly named interface; link-local addresses would
      // need a scope id, which a UniqueId does not carry.
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr);
      if (!IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) {
        ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
        chosenV6 = text;
      }
    }
  }
  ::freeifaddrs(list);
  if (chosen.empty()) chosen = chosenV6;
  if (chosen.empty()) {
    if (!ifnames.empty()) {
      if (!seen.empty()) seen.pop_back();  // trailing comma
      throw Error(Result::InvalidArgument,
                  "SHARC_SOCKET_IFNAME='" + ifnames +
                      "' matches no interface that is up with an IP address: expected one of" +
                      seen);
    }
    chosen = "127.0.0.1";
  }
  return chosen;
}

std::string localAdvertiseAddress() {
  return localAdvertiseAddress(core::Config::get().socketIfname);
}

uint64_t environmentToken(const std::string& rootHostPort, int worldSize,
                          const std::string& extraSecret) {
  uint64_t h = core::kFnv1a64Basis;
  // Each field is length-prefixed so that ("ab", "c") and ("a", "bc") hash differently.
  const uint64_t len1 = rootHostPort.size();
  h = core::fnv1a64(&len1, sizeof(len1), h);
  h = core::fnv1a64(rootHostPort.data(), rootHostPort.size(), h);
  const int64_t size = worldSize;
  h = core::fnv1a64(&size, sizeof(size), h);
  const uint64_t len2 = extraSecret.size();
  h = core::fnv1a64(&len2, sizeof(len2), h);
  h = core::fnv1a64(extraSecret.data(), extraSecret.size(), h);
  const uint64_t token = mix64(h);
  return token != 0 ? token : 1;
}

}  // namespace sharc::bootstrap

namespace sharc {

UniqueId makeUniqueId() {
  using namespace bootstrap;
  const uint64_t token = randomToken();
  const std::string host = localAdvertiseAddress();
  std::unique_ptr<RootServer> server =
      RootServer::start(host, 0, token, /*nranks=*/0, core::Config::get().timeout);
  const RootAddress address = server->address();
  // The server thread ends by itself once the job has finished or timed out.
  server->detach();
  SHARC_INFO("bootstrap: makeUniqueId: root server listening on " << address.toString());
  return encodeUniqueId(address);
}

}  // namespace sharc
