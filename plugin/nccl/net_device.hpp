// One NIC of the network plugin: a libfabric endpoint of the engine's transport shared by all
// comms on that NIC, its peers (added as connections arrive), the tag space that tells the
// comms apart, the control messages that set up connections (sent without blocking), memory
// registrations (host memory, and CUDA memory where the provider has FI_HMEM), the flush
// reads, and the liveness checks that turn a dead peer into an error, not a hang.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net_api.hpp"
#include "net_handle.hpp"
#include "net_request.hpp"
#include "transport/endpoint.hpp"

namespace sharc::nccl {

/// 64-bit tags. Data: bit 63 clear, the receiving comm's id (23 bits), NCCL's tag (24 bits)
/// and a sequence number per (comm, tag) (16 bits) so same-tag messages match in order.
/// Control: bit 63 set, a kind (7 bits) and the id of the comm it is addressed to.
namespace wire {
inline constexpr uint64_t kControlBit = 1ull << 63;
inline constexpr uint64_t kMaxCommId = (1ull << 23) - 1;
inline constexpr uint64_t kMaxUserTag = (1ull << 24) - 1;
inline constexpr uint64_t kControlIdBits = (1ull << 56) - 1;
inline constexpr uint64_t dataTag(uint64_t commId, uint64_t tag, uint16_t seq) {
  return (commId << 40) | (tag << 16) | seq;
}
enum class Control : uint64_t { Connect = 1, Accept = 2, Ping = 3, Pong = 4 };
inline constexpr uint64_t controlTag(Control kind, uint64_t id) {
  return kControlBit | (static_cast<uint64_t>(kind) << 56) | (id & kControlIdBits);
}
}  // namespace wire

/// A registered buffer (the mhandle NCCL gets back); shared by the comms of a device.
struct MemoryRegion {
  static constexpr uint32_t kMagic = 0x4d524853;  // "SHRM"
  uint32_t magic = kMagic;
  int type = NCCL_PTR_HOST;  ///< NCCL_PTR_HOST or NCCL_PTR_CUDA
  uintptr_t begin = 0;
  uintptr_t end = 0;
  int references = 0;
  bool withProvider = false;  ///< registered through Endpoint::registerMemory (FI_HMEM devices)
  uint64_t key = 0;           ///< its remote key (flush reads)
};

class NetDevice {
 public:
  NetDevice(int index, std::unique_ptr<transport::Endpoint> endpoint);
  ~NetDevice();

  /// Guards the endpoint and every comm of this device (NCCL calls from several threads,
  /// and the device's own progress thread).
  std::mutex mutex;

  int index() const { return index_; }
  transport::Endpoint& endpoint() { return *endpoint_; }
  /// The properties; their ptrSupport is NCCL_PTR_HOST until ptrSupport() decided.
  const DeviceProperties& properties() const { return properties_; }
  /// NCCL_PTR_HOST, plus NCCL_PTR_CUDA (and NCCL_PTR_DMABUF) where the provider has FI_HMEM
  /// and CUDA is up in this process. Decided on the first call, not at init: the question
  /// initialises CUDA's runtime, which is only asked when the provider has FI_HMEM and
  /// libcuda is already loaded (NCCL loads it before it asks for properties).
  int ptrSupport();
  /// A fresh id for a listen, send or receive comm; throws once 2^23 were handed out.
  uint64_t newCommId();

  /// The fabric peer at `address` (added on first use).
  uint32_t peer(const std::string& address, const ProcessIdentity& identity);
  /// False once the peer is known dead (`why` says how it was found): a peer on this host
  /// by its pid; another by pings it stopped answering for kPeerSilence.
  bool peerAlive(uint32_t peer, std::string& why);

  /// Reads completions, handles arrived control messages, sends queued ones.
  void progress();
  /// Queues a control message (at most kConnectRequestBytes); never blocks.
  void sendControl(uint32_t peer, uint64_t tag, const std::string& bytes);
  /// Why the control message with `tag` could not be sent; empty while none failed.
  std::string controlFailure(uint64_t tag) const;

  /// Connection requests for `listenId` are kept for takeConnect from now on; others are
  /// refused (the connecting side learns that the listener is closed).
  void openListener(uint64_t listenId);
  void closeListener(uint64_t listenId);
  std::optional<ConnectRequest> takeConnect(uint64_t listenId);

  /// Keeps requests whose comm closed until their completions arrive.
  void adopt(std::vector<std::unique_ptr<NetRequest>> requests);
  /// Whether a send comm's close already waited its full drain time for sends to `peer` (a
  /// dead or stopped peer): later send comms' closes towards it do not wait again (NCCL's
  /// abort closes every comm in turn). A new process at the address clears it.
  bool unresponsive(uint32_t peer) const;
  void markUnresponsive(uint32_t peer);

  /// The registration of [data, data+size) of NCCL memory `type` (a reference more when it
  /// exists); with `dmabufFd` >= 0 CUDA memory is registered as that DMA-BUF. Throws naming
  /// `call` and the reason (provider, CUDA) when the type is refused or registration fails.
  MemoryRegion* registerRegion(const void* data, size_t size, int type, const char* call,
                               int dmabufFd = -1, uint64_t dmabufOffset = 0);
  void deregisterRegion(MemoryRegion* region);
  /// Whether a receive into `region` needs iflush's read: CUDA memory written by a NIC
  /// (provider with RMA reads that is not a copying one, such as shm or tcp).
  bool flushNeeded(const MemoryRegion& region) const;
  /// Posts iflush's read of `bytes` (1..8) at `addr` inside `region` from this process's own
  /// endpoint into a host buffer, on transfer `t`; throws when the provider refuses it.
  void postFlushRead(const MemoryRegion& region, uintptr_t addr, size_t bytes,
                     transport::Transfer& t);
  /// This process's own endpoint as a peer (the target of flush reads).
  uint32_t selfPeer();
  /// Throws InvalidArgument unless `mhandle` is NULL or a region of this device covering
  /// [data, data+size).
  void checkRegion(const void* mhandle, const void* data, size_t size, const char* call) const;

  /// Stops the progress thread (before the process exits or the plugin is unloaded).
  void stopProgressThread();
  /// Closes the endpoint at exit (after stopProgressThread); the device is unusable after.
  void closeEndpoint();

 private:
  struct PeerState {
    std::string address;
    ProcessIdentity identity;
    bool dead = false;
    std::string why;
    std::chrono::steady_clock::time_point lastPing{};
    std::chrono::steady_clock::time_point unansweredSince{};  // zero: no ping outstanding
    bool unresponsive = false;  // a close timed out draining transfers with it
  };
  struct QueuedControl {
    uint32_t peer;
    uint64_t tag;
    std::string bytes;
    std::chrono::steady_clock::time_point queued;
  };
  void postInbox(NetRequest& r);
  void handleInbox(NetRequest& r);
  void flushControl();
  void progressLoop();
  void decideDeviceMemory();

  int index_;
  std::unique_ptr<transport::Endpoint> endpoint_;
  DeviceProperties properties_;
  uint64_t nextCommId_ = 1;
  std::map<std::string, uint32_t> peerByAddress_;
  std::vector<PeerState> peers_;
  RequestPool control_;  // control sends the provider did not inject
  std::vector<NetRequest*> controlInFlight_;
  std::deque<QueuedControl> controlQueue_;
  std::map<uint64_t, std::string> controlFailures_;
  std::vector<std::unique_ptr<NetRequest>> inbox_;  // wildcard receives of control kinds
  std::map<uint64_t, std::deque<ConnectRequest>> listeners_;
  std::vector<std::unique_ptr<NetRequest>> adopted_;
  std::map<std::pair<uintptr_t, uintptr_t>, std::unique_ptr<MemoryRegion>> regions_;
  bool hmem_ = false;        // the endpoint registers memory itself (FI_HMEM)
  bool flushReads_ = false;  // CUDA receives need iflush's read (a NIC provider with FI_RMA)
  std::once_flag deviceMemoryDecided_;
  std::string cudaRefusal_;
  std::optional<uint32_t> selfPeer_;
  alignas(64) uint64_t flushTarget_[8] = {};  // where flush reads land (registered lazily)
  bool flushTargetRegistered_ = false;
  std::atomic<uint64_t> progressCalls_{0};  // the progress thread runs when it stands still
  std::atomic<bool> stop_{false};
  std::thread progressThread_;
};

/// Opens the plugin's devices once (provider from SHARC_FI_PROVIDER / FI_PROVIDER, else
/// efa, verbs;ofi_rxm, tcp;ofi_rxm); throws SystemError naming what was tried when none works.
void openDevices();
int deviceCount();
/// Throws InvalidArgument naming the valid range for a bad index.
NetDevice& device(int index, const char* call);

}  // namespace sharc::nccl
