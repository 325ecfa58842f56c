#include "net_device.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "core/config.hpp"
#include "core/hash.hpp"
#include "core/log.hpp"
#include "topology/link_speed.hpp"
#include "topology/topology.hpp"
#include "transport/provider.hpp"

namespace sharc::nccl {
namespace {

constexpr size_t kControlRequests = 64;
// How often a waiting request checks its peer; how long a peer elsewhere may leave pings
// unanswered (its device's progress thread answers them) before it counts as dead.
constexpr auto kLivenessPeriod = std::chrono::seconds(1);
constexpr auto kPeerSilence = std::chrono::seconds(15);
// A control message the provider keeps refusing this long goes to an unreachable address.
constexpr auto kUnreachable = std::chrono::seconds(10);
// The progress thread runs the device when nobody else has for this long.
constexpr auto kIdleProgressPeriod = std::chrono::milliseconds(100);

// "rdmap16s27-rdm" -> "rdmap16s27": libfabric names domains after the device, plus a suffix.
std::string deviceNameOf(const std::string& domain) {
  for (const char* suffix : {"-rdm", "-dgrm", "-xrc"}) {
    const std::string s(suffix);
    if (domain.size() > s.size() && domain.compare(domain.size() - s.size(), s.size(), s) == 0)
      return domain.substr(0, domain.size() - s.size());
  }
  return domain;
}

// NCCL wants a speed for every device; virtual links (lo, veth, shm) report none, and NCCL
// only compares NICs with each other.
int linkSpeedMbps(const std::string& dev) {
  const double mbits = topo::nicMbits(dev);
  return mbits > 0 ? static_cast<int>(mbits) : 10000;
}

// The PCI function under the NIC named `dev`, from the host topology (hwloc).
std::string pciPathOf(const std::string& dev) {
  try {
    const topo::HostTopology host = topo::HostTopology::load();
    for (const topo::PciDevice& nic : host.nics)
      for (const std::string& os : nic.osDevices)
        if (os == dev) {
          char resolved[PATH_MAX];
          const std::string sys = "/sys/bus/pci/devices/" + nic.busId;
          return realpath(sys.c_str(), resolved) != nullptr ? std::string(resolved) : sys;
        }
  } catch (const std::exception& e) {
    SHARC_INFO("NCCL plugin: no host topology for " << dev << ": " << e.what());
  }
  return {};
}

// Providers whose receive completion means the bytes are in place, device memory included:
// they copy with the CPU or CUDA's copy engines. NIC providers (efa, verbs) DMA into the GPU,
// and a completion may overtake writes still in flight on PCIe.
bool copiesWithCpu(const std::string& provider) {
  for (const char* p : {"shm", "tcp", "udp", "sockets"})
    if (provider.rfind(p, 0) == 0) return true;
  return false;
}

// FI_HMEM where GPU memory is worth it: the NIC providers (GPUDirect). Providers that copy
// with the CPU (shm) get slower for host memory when opened with it; SHARC_NCCL_HMEM=1 asks
// for it anyway (the tests use that to drive the registration path over shm).
bool openWithHmem(const std::string& provider) {
  switch (core::Config::get().ncclHmem) {
    case core::HmemMode::On: return true;
    case core::HmemMode::Off: return false;
    case core::HmemMode::Auto: break;
  }
  return !copiesWithCpu(provider);
}

}  // namespace

NetDevice::NetDevice(int index, std::unique_ptr<transport::Endpoint> endpoint)
    : index_(index), endpoint_(std::move(endpoint)), control_(kControlRequests) {
  const std::string domain = endpoint_->domainName();
  const std::string dev = deviceNameOf(domain);
  properties_.name = domain.empty() ? endpoint_->providerName() : domain;
  properties_.pciPath = pciPathOf(dev);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  properties_.guid = core::fnv1a64(properties_.pciPath.empty() ? std::string(host) + "/" + domain
                                                               : properties_.pciPath);
  properties_.ptrSupport = NCCL_PTR_HOST;  // plus CUDA once ptrSupport() decided
  std::string noHmem;
  hmem_ = endpoint_->supportsHmem(noHmem);
  flushReads_ = hmem_ && endpoint_->supportsRead() && !copiesWithCpu(endpoint_->providerName());
  properties_.speedMbps = linkSpeedMbps(dev);
  properties_.port = 1;
  properties_.latencyUs = 0;
  properties_.maxComms = 1 << 20;
  properties_.maxRecvs = kMaxGroupedRecvs;
  properties_.maxP2pBytes = std::min<size_t>(endpoint_->maxMessageSize(), size_t{1} << 40);
  properties_.maxCollBytes = properties_.maxP2pBytes;
  // Wildcard receives for the control messages: connection requests for any listener
  // (two, so a burst of connects keeps flowing), pings and pongs.
  for (wire::Control kind :
       {wire::Control::Connect, wire::Control::Connect, wire::Control::Ping, wire::Control::Pong}) {
    inbox_.push_back(std::make_unique<NetRequest>());
    inbox_.back()->reset(NetRequest::Use::Control, nullptr, 0);
    inbox_.back()->matchedTag = wire::controlTag(kind, 0);
    postInbox(*inbox_.back());
  }
  progressThread_ = std::thread([this] { progressLoop(); });
}

NetDevice::~NetDevice() {
  stopProgressThread();
  // The endpoint goes first: no completion can reach the requests freed after it.
  endpoint_.reset();
}

void NetDevice::closeEndpoint() {
  endpoint_.reset();
}

void NetDevice::stopProgressThread() {
  stop_.store(true);
  if (progressThread_.joinable()) progressThread_.join();
}

// NCCL drives progress only while it has requests; this thread keeps the provider's
// connection setup moving and answers pings when NCCL is busy elsewhere.
void NetDevice::progressLoop() {
  uint64_t seen = progressCalls_.load(std::memory_order_relaxed);
  while (!stop_.load()) {
    std::this_thread::sleep_for(kIdleProgressPeriod);
    const uint64_t now = progressCalls_.load(std::memory_order_relaxed);
    if (now != seen) {  // someone else ran progress during the last period
      seen = now;
      continue;
    }
    std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
    if (!lock.owns_lock()) continue;
    try {
      progress();
    } catch (const std::exception& e) {
      SHARC_WARN("NCCL plugin: background progress of device " << index_ << ": " << e.what());
    }
  }
}

uint64_t NetDevice::newCommId() {
  if (nextCommId_ > wire::kMaxCommId)
    throw Error(Result::SystemError, "NCCL plugin: device " + std::to_string(index_) +
                                         " ran out of comm ids (2^23 per process)");
  return nextCommId_++;
}

uint32_t NetDevice::peer(const std::string& address, const ProcessIdentity& identity) {
  auto it = peerByAddress_.find(address);
  if (it != peerByAddress_.end()) {
    PeerState& p = peers_[it->second];
    if (p.identity.pid != identity.pid || p.identity.host != identity.host) {
      p = PeerState{};  // a new process at an old address
      p.address = address;
      p.identity = identity;
    }
    return it->second;
  }
  const uint32_t id = endpoint_->addPeer(address);
  if (id >= peers_.size()) peers_.resize(id + 1);
  peers_[id] = PeerState{};
  peers_[id].address = address;
  peers_[id].identity = identity;
  peerByAddress_.emplace(address, id);
  return id;
}

bool NetDevice::peerAlive(uint32_t peer, std::string& why) {
  PeerState& p = peers_.at(peer);
  const auto now = std::chrono::steady_clock::now();
  const bool sameHost = p.identity.host == localHostId();
  if (!p.dead && now - p.lastPing >= kLivenessPeriod) {
    p.lastPing = now;
    if (sameHost) {
      if (!peerProcessAlive(p.identity)) {
        p.dead = true;
        p.why = "peer process " + std::to_string(p.identity.pid) + " on this host has exited";
      }
    } else {
      if (p.unansweredSince == std::chrono::steady_clock::time_point{}) p.unansweredSince = now;
      ConnectRequest ping;
      ping.address = endpoint_->localAddress();
      ping.sendCommId = peer;  // echoed back in the pong
      ping.sender = localIdentity();
      sendControl(peer, wire::controlTag(wire::Control::Ping, 0), encodeConnectRequest(ping));
    }
  }
  if (!p.dead && !sameHost && p.unansweredSince != std::chrono::steady_clock::time_point{} &&
      now - p.unansweredSince > kPeerSilence) {
    p.dead = true;
    p.why = "peer process " + std::to_string(p.identity.pid) + " answered no ping for " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kPeerSilence).count()) +
            " s";
  }
  why = p.why;
  return !p.dead;
}

void NetDevice::postInbox(NetRequest& r) {
  const uint64_t tag = r.matchedTag & ~wire::kControlIdBits;  // the kind, any id
  r.reset(NetRequest::Use::Control, nullptr, 0);
  r.matchedTag = tag;
  r.n = 1;
  const transport::PostStatus st =
      endpoint_->postRecv(transport::kAnyPeer, tag, wire::kControlIdBits, r.scratch.data(),
                          r.scratch.size(), r.transfers[0]);
  if (st == transport::PostStatus::Posted) {
    r.pending = 1;
    r.posted[0] = true;
  }
  // Otherwise (provider busy) progress() posts it again.
}

void NetDevice::handleInbox(NetRequest& r) {
  if (r.error != Result::Success) {
    SHARC_WARN("NCCL plugin: control receive failed: " << r.message);
    return;
  }
  const auto kind = static_cast<wire::Control>((r.matchedTag >> 56) & 0x7f);
  const uint64_t id = r.matchedTag & wire::kControlIdBits;
  try {
    if (kind == wire::Control::Connect) {
      ConnectRequest request = decodeConnectRequest(r.scratch.data(), r.sizes[0]);
      auto it = listeners_.find(id);
      if (it != listeners_.end()) {
        it->second.push_back(std::move(request));
      } else {  // closed (or never opened here): tell the connecting side at once
        const uint32_t from = peer(request.address, request.sender);
        sendControl(from, wire::controlTag(wire::Control::Accept, request.sendCommId),
                    encodeAcceptReply(0));
      }
    } else if (kind == wire::Control::Ping) {
      const ConnectRequest ping = decodeConnectRequest(r.scratch.data(), r.sizes[0]);
      sendControl(peer(ping.address, ping.sender), wire::controlTag(wire::Control::Pong, 0),
                  encodeAcceptReply(ping.sendCommId));
    } else if (kind == wire::Control::Pong) {
      const uint64_t ours = decodeAcceptReply(r.scratch.data(), r.sizes[0]);
      if (ours < peers_.size()) peers_[ours].unansweredSince = {};
    }
  } catch (const Error& e) {
    SHARC_WARN("NCCL plugin: ignoring a malformed control message: " << e.what());
  }
}

void NetDevice::progress() {
  progressCalls_.fetch_add(1, std::memory_order_relaxed);
  endpoint_->progress();
  for (auto& r : inbox_) {
    if (r->pending > 0) continue;
    if (r->sizes[0] > 0 || r->error != Result::Success) handleInbox(*r);  // else never posted
    postInbox(*r);
  }
  flushControl();
  std::erase_if(controlInFlight_, [this](NetRequest* r) {
    if (r->pending > 0) return false;
    if (r->error != Result::Success) {
      SHARC_WARN("NCCL plugin: control message to peer #" << r->peer << " failed: " << r->message);
      controlFailures_[r->matchedTag] = r->message;
    }
    control_.release(r);
    return true;
  });
  std::erase_if(adopted_, [](const std::unique_ptr<NetRequest>& r) { return r->pending == 0; });
}

void NetDevice::sendControl(uint32_t peer, uint64_t tag, const std::string& bytes) {
  if (bytes.size() > kConnectRequestBytes)
    throw Error(Result::InternalError, "NCCL plugin: control message too long");
  controlQueue_.push_back({peer, tag, bytes, std::chrono::steady_clock::now()});
  flushControl();
}

void NetDevice::flushControl() {
  while (!controlQueue_.empty()) {
    QueuedControl& q = controlQueue_.front();
    NetRequest* r = control_.acquire(NetRequest::Use::Control, nullptr, q.peer);
    if (r == nullptr) return;  // all in flight: later
    std::copy(q.bytes.begin(), q.bytes.end(), r->scratch.begin());
    r->n = 1;
    r->matchedTag = q.tag;
    const transport::PostStatus st =
        endpoint_->postSend(q.peer, q.tag, r->scratch.data(), q.bytes.size(), r->transfers[0]);
    if (st == transport::PostStatus::Retry &&
        std::chrono::steady_clock::now() - q.queued < kUnreachable) {
      control_.release(r);  // e.g. the connection is still being set up: later
      return;
    }
    if (st == transport::PostStatus::Retry) {
      controlFailures_[q.tag] = "peer #" + std::to_string(q.peer) +
                                " unreachable (the provider refused the message for 10 s)";
      control_.release(r);
      controlQueue_.pop_front();
      continue;
    }
    if (st == transport::PostStatus::Posted) {
      r->pending = 1;
      r->posted[0] = true;
      controlInFlight_.push_back(r);
    } else {
      if (st == transport::PostStatus::Failed) {
        controlFailures_[q.tag] = endpoint_->lastError();
        SHARC_WARN("NCCL plugin: control message to peer #"
                   << q.peer << " failed: " << endpoint_->lastError());
      }
      control_.release(r);
    }
    controlQueue_.pop_front();
  }
}

std::string NetDevice::controlFailure(uint64_t tag) const {
  auto it = controlFailures_.find(tag);
  return it == controlFailures_.end() ? std::string() : it->second;
}

void NetDevice::openListener(uint64_t listenId) {
  listeners_[listenId];
}

void NetDevice::closeListener(uint64_t listenId) {
  listeners_.erase(listenId);
}

std::optional<ConnectRequest> NetDevice::takeConnect(uint64_t listenId) {
  auto it = listeners_.find(listenId);
  if (it == listeners_.end() || it->second.empty()) return std::nullopt;
  ConnectRequest r = std::move(it->second.front());
  it->second.pop_front();
  return r;
}

void NetDevice::adopt(std::vector<std::unique_ptr<NetRequest>> requests) {
  for (auto& r : requests) adopted_.push_back(std::move(r));
}

bool NetDevice::unresponsive(uint32_t peer) const {
  return peer < peers_.size() && peers_[peer].unresponsive;
}

void NetDevice::markUnresponsive(uint32_t peer) {
  if (peer < peers_.size()) peers_[peer].unresponsive = true;
}

namespace {
std::mutex gDevicesMutex;
std::vector<std::unique_ptr<NetDevice>>* gDevices = nullptr;  // never freed: see openDevices
}  // namespace

void openDevices() {
  std::lock_guard<std::mutex> lock(gDevicesMutex);
  if (gDevices != nullptr) return;
  const std::string chosen = core::Config::get().provider;
  std::vector<std::string> candidates;
  if (!chosen.empty())
    candidates.push_back(chosen);
  else
    candidates = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};
  auto devices = std::make_unique<std::vector<std::unique_ptr<NetDevice>>>();
  std::string tried;
  for (const std::string& provider : candidates) {
    std::string why;
    std::vector<std::string> domains = transport::listDomains(provider, why);
    if (domains.empty()) {
      tried += (tried.empty() ? "" : "; ") + why;
      continue;
    }
    // tcp and shm: one device whatever the interfaces (the provider picks, FI_TCP_IFACE
    // steers); NIC providers: one device per domain.
    const bool single = provider.rfind("tcp", 0) == 0 || provider == "shm";
    if (single) domains = {""};
    for (const std::string& domain : domains) {
      try {
        transport::EndpointOptions options;
        options.provider = provider;
        options.requiredNic = domain;
        options.hmem = openWithHmem(provider);   // GPU memory where wanted (ptrSupport)
        options.forbidProviderCudaCalls = true;  // NCCL's proxy thread must make no CUDA calls
        devices->push_back(std::make_unique<NetDevice>(static_cast<int>(devices->size()),
                                                       transport::openFabricEndpoint(options)));
      } catch (const std::exception& e) {
        tried += (tried.empty() ? "" : "; ") + provider + " " + domain + ": " + e.what();
      }
    }
    if (!devices->empty()) break;
  }
  if (devices->empty())
    throw Error(Result::SystemError, "NCCL plugin: no usable libfabric provider (tried " + tried +
                                         "); set SHARC_FI_PROVIDER to one `fi_info -l` lists");
  for (const auto& d : *devices) {
    std::string noHmem;
    const bool hmem = d->endpoint().supportsHmem(noHmem);
    SHARC_INFO("NCCL plugin: device "
               << d->index() << ": " << d->properties().name << " (" << d->endpoint().providerName()
               << ", " << d->properties().speedMbps << " Mbps, " << (hmem ? "FI_HMEM" : noHmem)
               << ")");
  }
  // The devices are deliberately never destroyed: NCCL may call in from its proxy thread
  // until the process exits. Their progress threads stop at exit (or when the plugin is
  // unloaded), before libfabric's own teardown runs.
  static struct ProgressThreadsStopper {
    ~ProgressThreadsStopper() {
      if (gDevices == nullptr) return;
      for (auto& d : *gDevices) d->stopProgressThread();
      // Close the endpoints too: libfabric's shm provider removes its /dev/shm region only
      // when its endpoint is closed.
      for (auto& d : *gDevices) {
        std::lock_guard<std::mutex> lock(d->mutex);
        d->closeEndpoint();
      }
    }
  } stopper;
  gDevices = devices.release();
}

int deviceCount() {
  std::lock_guard<std::mutex> lock(gDevicesMutex);
  return gDevices == nullptr ? 0 : static_cast<int>(gDevices->size());
}

NetDevice& device(int index, const char* call) {
  std::lock_guard<std::mutex> lock(gDevicesMutex);
  if (gDevices == nullptr)
    throw Error(Result::InvalidUsage, std::string(call) + ": the plugin is not initialised");
  if (index < 0 || index >= static_cast<int>(gDevices->size()))
    throw Error(Result::InvalidArgument, std::string(call) + ": device " + std::to_string(index) +
                                             ", expected 0.." +
                                             std::to_string(gDevices->size() - 1));
  return *(*gDevices)[static_cast<size_t>(index)];
}

}  // namespace sharc::nccl
