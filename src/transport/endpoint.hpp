// The transport interface the algorithms are written against: tagged, reliable, unordered
// messages between the peers of one endpoint. The libfabric implementation lives in
// fabric_endpoint.cc; a shared-memory or GPU transport plugs in behind the same interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <sharc/error.hpp>
#include <string>
#include <vector>

namespace sharc::transport {

class TransferOwner;

/// One posted message. Must stay at a fixed address from post until its completion (or the
/// endpoint's destruction). The first member is scratch space the provider may use
/// (libfabric's FI_CONTEXT / FI_CONTEXT2 mode).
struct Transfer {
  alignas(16) unsigned char providerContext[64];
  TransferOwner* owner = nullptr;  ///< told when the transfer completes
  uint32_t index = 0;              ///< owner's own number for this transfer
};

/// Receives completions of the transfers it posted.
class TransferOwner {
 public:
  /// `bytes` is the received length for receives (the posted length for sends); `tag` is the
  /// matched tag for receives.
  virtual void onTransferDone(Transfer& t, size_t bytes, uint64_t tag) = 0;
  virtual void onTransferError(Transfer& t, Result code, const std::string& message) = 0;

 protected:
  ~TransferOwner() = default;
};

/// Status of a post on the hot path (no exceptions there). Completed: the send was injected
/// (small message, buffer already reusable); no completion will be reported for it.
enum class PostStatus { Posted, Completed, Retry, Failed };

/// postRecv's `fromPeer` when the sender is not known in advance.
inline constexpr uint32_t kAnyPeer = UINT32_MAX;

/// Memory for Endpoint::registerMemory: host memory, or CUDA memory (libfabric FI_HMEM),
/// given by its address range or (dmabufFd >= 0) as a DMA-BUF that maps it there.
struct MemoryRegistration {
  enum class Kind { Host, Cuda };
  const void* buf = nullptr;
  size_t len = 0;
  Kind kind = Kind::Host;
  int cudaDevice = -1;        ///< the CUDA device of Kind::Cuda memory
  int dmabufFd = -1;          ///< >= 0: register this DMA-BUF (its bytes from dmabufOffset)
  uint64_t dmabufOffset = 0;  ///< where [buf, buf+len) starts in the DMA-BUF
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  /// Provider name, e.g. "tcp;ofi_rxm" or "shm".
  virtual std::string providerName() const = 0;
  /// This endpoint's address, opaque bytes to hand to the peers' setPeers().
  virtual std::string localAddress() const = 0;
  /// Resolves the peers' addresses; peer ids are indices into `addresses`.
  virtual void setPeers(const std::vector<std::string>& addresses) = 0;
  /// Largest message one post may carry.
  virtual size_t maxMessageSize() const = 0;
  /// Posts a tagged send of `len` bytes to `peer`.
  virtual PostStatus postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                              Transfer& t) = 0;
  /// Posts a tagged receive matching `tag` except the bits set in `ignore`. `fromPeer` says
  /// which peer will send it (kAnyPeer: any); a transport that routes by peer uses it, the
  /// fabric matches on the tag alone (the sender's rank is part of it).
  virtual PostStatus postRecv(uint32_t fromPeer, uint64_t tag, uint64_t ignore, void* buf,
                              size_t len, Transfer& t) = 0;
  /// Asks the provider to cancel a posted transfer; its owner is told (with an error) later.
  virtual void cancel(Transfer& t) = 0;
  /// Reads completions and tells their owners; returns how many were handled.
  virtual size_t progress() = 0;
  /// Human-readable reason of the last Failed post.
  virtual std::string lastError() const = 0;

  /// Adds one peer and returns its id (users that learn their peers one at a time, such as
  /// the NCCL plugin's connections). Transports that take the whole job at once refuse.
  virtual uint32_t addPeer(const std::string& address) {
    (void)address;
    throw Error(Result::InvalidUsage, "transport " + providerName() + " takes no single peers");
  }
  /// The provider's domain (NIC) name, e.g. "lo", "eth0", "rdmap16s27-rdm"; "" when none.
  virtual std::string domainName() const { return {}; }
  /// How many receives the provider holds posted at once (libfabric's fi_info
  /// rx_attr->size; SIZE_MAX where nothing fixes it). A schedule keeps at most a quarter
  /// posted (algo::recvWindow).
  virtual size_t recvQueueSize() const { return SIZE_MAX; }
  /// Largest send that completes at once without a completion (0: none do).
  virtual size_t injectSize() const { return 0; }
  /// Registers [buf, buf+len) ahead of its transfers where the provider needs registered
  /// local memory (nothing to do elsewhere); false, with lastError() set, on failure.
  virtual bool prepareRegion(const void* buf, size_t len) {
    (void)buf;
    (void)len;
    return true;
  }
  /// Forgets what prepareRegion registered (call before the memory is freed).
  virtual void releaseRegion(const void* buf, size_t len) {
    (void)buf;
    (void)len;
  }

  /// Whether registerMemory works (an endpoint opened with EndpointOptions::hmem whose
  /// provider has FI_HMEM); when not, `why` says what is missing.
  virtual bool supportsHmem(std::string& why) const {
    why = "transport " + providerName() + " registers no device memory";
    return false;
  }
  /// Whether messages to `peer` may carry registered device memory: the transport that
  /// reaches it has FI_HMEM (an endpoint over several transports answers per peer). When
  /// not, `why` says what is missing, and the device path stages those messages.
  virtual bool hmemTo(uint32_t peer, std::string& why) const {
    (void)peer;
    return supportsHmem(why);
  }
  /// Whether registerMemory takes DMA-BUFs (libfabric 1.20's FI_MR_DMABUF).
  virtual bool supportsDmabuf() const { return false; }
  /// Whether postRead works (FI_RMA reads, which only hmem endpoints ask for).
  virtual bool supportsRead() const { return false; }
  /// Registers `m` with the provider (fi_mr_regattr); sends and receives of buffers inside it
  /// carry its descriptor until releaseMemory. `key` gets its remote key (for postRead). False,
  /// with lastError() set, on failure.
  virtual bool registerMemory(const MemoryRegistration& m, uint64_t& key) {
    (void)m;
    (void)key;
    return false;
  }
  /// Undoes registerMemory of exactly [buf, buf+len) (before the memory is freed).
  virtual void releaseMemory(const void* buf, size_t len) {
    (void)buf;
    (void)len;
  }
  /// Posts an RMA read of `len` bytes into `buf` (inside a registerMemory region) from
  /// `remoteAddr` of `peer`, inside the peer's registration that starts at `remoteBase` and
  /// has key `remoteKey`. The owner of `t` is told when the bytes have arrived.
  virtual PostStatus postRead(uint32_t peer, void* buf, size_t len, uint64_t remoteAddr,
                              uint64_t remoteBase, uint64_t remoteKey, Transfer& t) {
    (void)peer, (void)buf, (void)len, (void)remoteAddr, (void)remoteBase, (void)remoteKey;
    (void)t;
    return PostStatus::Failed;
  }
};

/// What the provider selection decided.
struct EndpointOptions {
  std::string provider;   ///< exact provider name; empty: automatic
  bool allLocal = false;  ///< every peer runs on this host (shm and loopback become candidates)
  /// sharc's own shared-memory transport carries every peer: libfabric's shm provider is not
  /// a candidate then (it would sit idle, and it leaves its 16 MiB segments in /dev/shm when
  /// a process is killed).
  bool sharedMemoryCarriesAll = false;
  /// OS names of the NICs nearest this rank (host topology): their domains are preferred.
  std::vector<std::string> nearNics;
  /// Only this NIC's domains (name or prefix): the endpoint of one rail of several.
  std::string requiredNic;
  /// Device memory (the NCCL plugin, the engine's device path): ask for FI_HMEM (plus FI_RMA
  /// reads where offered), falling back to a plain endpoint.
  bool hmem = false;
  /// With `hmem` and libfabric 1.18+: forbid the provider CUDA calls of its own
  /// (FI_OPT_CUDA_API_PERMITTED), which NCCL's proxy thread must not make: a provider that
  /// needs them then reports no supportsHmem(). The NCCL plugin sets it; the engine does not.
  bool forbidProviderCudaCalls = false;
};

/// Opens a libfabric RDM endpoint with tagged messaging; throws sharc::Error naming the
/// provider(s) tried when none can be opened.
std::unique_ptr<Endpoint> openFabricEndpoint(const EndpointOptions& options);

}  // namespace sharc::transport
