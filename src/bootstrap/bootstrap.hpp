// Rendezvous before any fabric traffic: every rank contributes a small blob and receives all.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <sharc/communicator.hpp>
#include <string>
#include <vector>

namespace sharc::bootstrap {

/// A job-wide exchange channel used only while communicators are created.
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Collective: every rank passes one blob (at most kMaxBlobBytes); returns all blobs
  /// indexed by rank. May be called several times; rounds are matched in call order.
  /// Throws sharc::Error (Timeout / SystemError / RemoteError) naming the root address.
  virtual std::vector<std::string> allGather(const std::string& blob) = 0;

  static constexpr size_t kMaxBlobBytes = 64 * 1024;
};

/// Decoded content of a UniqueId.
struct RootAddress {
  std::string host;  ///< numeric IPv4/IPv6 address of the rendezvous server
  uint16_t port = 0;
  uint64_t token = 0;            ///< random job token every connecting rank must present
  std::string toString() const;  ///< "host:port"
};

/// Serialises / parses the 128-byte UniqueId. parse throws InvalidArgument on a malformed id
/// (bad magic, version, address family, zero port).
UniqueId encodeUniqueId(const RootAddress& root);
RootAddress decodeUniqueId(const UniqueId& id);

/// Connects to the root server as `rank` of `nranks`, retrying until `timeout`, then throws
/// sharc::Error(Timeout or SystemError) with a message naming the root address.
std::unique_ptr<Bootstrap> connectToRoot(const RootAddress& root, int rank, int nranks,
                                         std::chrono::milliseconds timeout);
/// connectToRoot's handshake over an already connected stream socket (taken over: closed on
/// failure, owned by the result on success): sends the hello and reads the root's reply
/// before `deadline`. Separate so that what a root sends can be fed through a socket pair
/// (tests/fuzz/fuzz_bootstrap_client.cc); connectToRoot is connect + joinRoot.
std::unique_ptr<Bootstrap> joinRoot(int socket, const RootAddress& root, int rank, int nranks,
                                    std::chrono::milliseconds timeout,
                                    std::chrono::steady_clock::time_point deadline);

/// The rendezvous server. It accepts connections until `nranks` distinct ranks have presented
/// the job token (connections with a wrong magic/token/rank/size or garbage are closed and
/// logged, the job continues), then serves allGather rounds until every rank disconnects.
class RootServer {
 public:
  /// Binds host:port (port 0 picks a free port; host "" or "0.0.0.0" binds every IPv4
  /// address) and starts serving on a thread. nranks <= 0: taken from the first valid hello.
  static std::unique_ptr<RootServer> start(const std::string& host, uint16_t port, uint64_t token,
                                           int nranks, std::chrono::milliseconds timeout);
  virtual ~RootServer() = default;  ///< stops the thread (closing every connection)
  /// The address ranks should connect to (a numeric address of this host and the bound port).
  virtual RootAddress address() const = 0;
  /// Lets the server outlive this object: it ends by itself when the job finishes or times out.
  virtual void detach() = 0;
};

/// A random nonzero job token (from /dev/urandom) for a root server.
uint64_t randomToken();

/// Picks the address this host advertises for rendezvous: SHARC_SOCKET_IFNAME's first IPv4
/// address if set, else the first non-loopback IPv4 interface that is up, else 127.0.0.1.
std::string localAdvertiseAddress();

/// Deterministic job token for environment bootstrap: a hash of the root address, the world
/// size and SHARC_JOB_TOKEN, so that only members of this launch pass the handshake.
uint64_t environmentToken(const std::string& rootHostPort, int worldSize,
                          const std::string& extraSecret);

}  // namespace sharc::bootstrap
