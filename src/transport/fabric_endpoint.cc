// The libfabric Endpoint: one RDM endpoint, one tagged completion queue, one address vector.
#include <dirent.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>

#include "core/log.hpp"
#include "endpoint.hpp"
#include "fabric.hpp"
#include "mr_cache.hpp"
#include "provider.hpp"

namespace sharc::transport {
namespace {

Transfer& transferOf(void* opContext) {
  // providerContext is Transfer's first member, and is what we pass as the op context.
  return *reinterpret_cast<Transfer*>(opContext);
}

// fi_mr_regattr of `m`: its address range, or (dmabufFd >= 0, libfabric 1.20+) its DMA-BUF,
// which fi_mr(3) puts in place of the iovec, with base_addr the address the range has here.
int registerAttr(fid_domain* domain, const MemoryRegistration& m, uint64_t access, uint64_t key,
                 fid_mr** mr) {
  iovec iov{const_cast<void*>(m.buf), m.len};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = access;
  attr.requested_key = key;
  attr.iface = m.kind == MemoryRegistration::Kind::Cuda ? FI_HMEM_CUDA : FI_HMEM_SYSTEM;
  if (m.kind == MemoryRegistration::Kind::Cuda) attr.device.cuda = m.cudaDevice;
  uint64_t flags = 0;
#ifdef FI_MR_DMABUF
  fi_mr_dmabuf dmabuf{};
  if (m.dmabufFd >= 0) {
    dmabuf.fd = m.dmabufFd;
    dmabuf.offset = m.dmabufOffset;
    dmabuf.len = m.len;
    dmabuf.base_addr = const_cast<void*>(m.buf);
    attr.dmabuf = &dmabuf;
    flags |= FI_MR_DMABUF;
  }
#else
  if (m.dmabufFd >= 0) return -FI_ENOSYS;
#endif
  return fi_mr_regattr(domain, &attr, flags, mr);
}

#ifdef FI_MR_DMABUF
constexpr bool kDmabufBuilt = true;
#else
constexpr bool kDmabufBuilt = false;
#endif

// Tells the provider of an FI_HMEM endpoint (before fi_enable) to make no CUDA calls of its
// own: NCCL's proxy thread may make none (a cudaMemcpy there can wait on a kernel that waits
// on the proxy). 0 when it complies, or when libfabric predates the option (1.18).
int forbidCudaCalls(fid_ep* ep) {
#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 18))
  bool permitted = false;
  return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_CUDA_API_PERMITTED, &permitted,
                   sizeof(permitted));
#else
  (void)ep;
  return 0;
#endif
}

class FabricEndpoint final : public Endpoint {
 public:
  FabricEndpoint(FiInfoPtr info, const std::string& provider, bool forbidProviderCudaCalls)
      : info_(std::move(info)), provider_(provider), forbidCudaCalls_(forbidProviderCudaCalls) {
    fid_fabric* fabric = nullptr;
    checkFi(fi_fabric(info_->fabric_attr, &fabric, nullptr), "fi_fabric");
    fabric_.reset(fabric);
    fid_domain* domain = nullptr;
    checkFi(fi_domain(fabric_.get(), info_.get(), &domain, nullptr), "fi_domain");
    domain_.reset(domain);

    fi_av_attr avAttr{};
    avAttr.type = FI_AV_TABLE;
    fid_av* av = nullptr;
    checkFi(fi_av_open(domain_.get(), &avAttr, &av, nullptr), "fi_av_open");
    av_.reset(av);

    fi_cq_attr cqAttr{};
    cqAttr.format = FI_CQ_FORMAT_TAGGED;
    cqAttr.wait_obj = FI_WAIT_NONE;
    cqAttr.size = 4096;
    fid_cq* cq = nullptr;
    checkFi(fi_cq_open(domain_.get(), &cqAttr, &cq, nullptr), "fi_cq_open");
    cq_.reset(cq);

    fid_ep* ep = nullptr;
    checkFi(fi_endpoint(domain_.get(), info_.get(), &ep, nullptr), "fi_endpoint");
    ep_.reset(ep);
    checkFi(fi_ep_bind(ep_.get(), &av_->fid, 0), "fi_ep_bind(av)");
    checkFi(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    setUpHmem();
    checkFi(fi_enable(ep_.get()), "fi_enable");

    char name[256];
    size_t len = sizeof(name);
    checkFi(fi_getname(&ep_->fid, name, &len), "fi_getname");
    address_.assign(name, len);

    if (info_->domain_attr->mr_mode & FI_MR_LOCAL) mrCache_.emplace(domain_.get());
    maxMsg_ = info_->ep_attr->max_msg_size;
    injectSize_ = info_->tx_attr ? info_->tx_attr->inject_size : 0;
    SHARC_INFO("transport: provider "
               << provider_ << ", fabric " << info_->fabric_attr->name << ", domain "
               << info_->domain_attr->name << ", max message " << maxMsg_ << " B, holds "
               << (info_->rx_attr ? info_->rx_attr->size : 0) << " posted receives, "
               << (mrCache_ ? "local MR required" : "no local MR") << (hmem_ ? ", FI_HMEM" : "")
               << (read_ ? ", FI_RMA" : ""));
  }

  ~FabricEndpoint() override {
    // Close the endpoint before the CQ/AV/domain it is bound to (member order would do the
    // reverse of declaration, which is already right; be explicit for clarity).
    ep_.reset();
    mrCache_.reset();
    registered_.clear();
    cq_.reset();
    av_.reset();
    domain_.reset();
    fabric_.reset();
  }

  std::string providerName() const override { return provider_; }
  std::string localAddress() const override { return address_; }
  size_t maxMessageSize() const override { return maxMsg_; }
  std::string lastError() const override { return lastError_; }

  void setPeers(const std::vector<std::string>& addresses) override {
    peers_.assign(addresses.size(), FI_ADDR_NOTAVAIL);
    for (size_t i = 0; i < addresses.size(); ++i) {
      const int n = fi_av_insert(av_.get(), addresses[i].data(), 1, &peers_[i], 0, nullptr);
      if (n != 1)
        throw Error(Result::SystemError, "fi_av_insert of peer " + std::to_string(i) +
                                             " failed (provider " + provider_ + ")");
    }
  }

  uint32_t addPeer(const std::string& address) override {
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    if (fi_av_insert(av_.get(), address.data(), 1, &addr, 0, nullptr) != 1)
      throw Error(Result::SystemError, "fi_av_insert of a " + std::to_string(address.size()) +
                                           "-byte address failed (provider " + provider_ + ")");
    peers_.push_back(addr);
    return static_cast<uint32_t>(peers_.size() - 1);
  }

  size_t injectSize() const override { return injectSize_; }
  size_t recvQueueSize() const override {
    return info_->rx_attr && info_->rx_attr->size > 0 ? info_->rx_attr->size : SIZE_MAX;
  }
  std::string domainName() const override {
    return info_->domain_attr && info_->domain_attr->name ? info_->domain_attr->name : "";
  }

  bool prepareRegion(const void* buf, size_t len) override {
    void* desc = nullptr;
    return len == 0 || describe(buf, len, desc);
  }

  void releaseRegion(const void* buf, size_t len) override {
    if (mrCache_) mrCache_->invalidate(buf, len);
  }

  bool supportsHmem(std::string& why) const override {
    why = hmemWhy_;
    return hmem_;
  }
  bool supportsDmabuf() const override {
    return kDmabufBuilt && hmem_ &&
           FI_VERSION_GE(info_->fabric_attr->api_version, FI_VERSION(1, 20));
  }
  bool supportsRead() const override { return read_; }

  bool registerMemory(const MemoryRegistration& m, uint64_t& key) override {
    if (!hmem_) {
      lastError_ = hmemWhy_;
      return false;
    }
    const auto begin = reinterpret_cast<uintptr_t>(m.buf);
    if (registered_.count({begin, begin + m.len}) != 0) {
      lastError_ = "[" + std::to_string(begin) + ", +" + std::to_string(m.len) +
                   ") is already registered with provider " + provider_;
      return false;
    }
    if (m.dmabufFd >= 0 && !supportsDmabuf()) {
      lastError_ = "provider " + provider_ + " takes no DMA-BUF (needs libfabric 1.20's " +
                   "FI_MR_DMABUF, built against " + std::to_string(FI_MAJOR_VERSION) + "." +
                   std::to_string(FI_MINOR_VERSION) + ")";
      return false;
    }
    fid_mr* raw = nullptr;
    const uint64_t access = FI_SEND | FI_RECV | (read_ ? FI_READ | FI_REMOTE_READ : 0);
    // Keys apart from MrCache's (providers without FI_MR_PROV_KEY take the requested one).
    const int rc = registerAttr(domain_.get(), m, access, kMemoryKeyBase + nextKey_++, &raw);
    if (rc != 0) {
      lastError_ =
          fiErrorMessage("fi_mr_regattr", rc) + " (provider " + provider_ + ", " +
          (m.kind == MemoryRegistration::Kind::Cuda ? "CUDA device " + std::to_string(m.cudaDevice)
                                                    : std::string("host")) +
          " memory" + (m.dmabufFd >= 0 ? " as a DMA-BUF" : "") + ")";
      return false;
    }
    key = fi_mr_key(raw);
    maxRegistered_ = std::max(maxRegistered_, m.len);
    Registered& r = registered_[{begin, begin + m.len}];
    r.mr.reset(raw);
    r.device = m.kind != MemoryRegistration::Kind::Host;
    return true;
  }

  void releaseMemory(const void* buf, size_t len) override {
    const auto begin = reinterpret_cast<uintptr_t>(buf);
    registered_.erase({begin, begin + len});
  }

  PostStatus postRead(uint32_t peer, void* buf, size_t len, uint64_t remoteAddr,
                      uint64_t remoteBase, uint64_t remoteKey, Transfer& t) override {
    if (!read_) {
      lastError_ = "provider " + provider_ + " was opened without RMA reads";
      return PostStatus::Failed;
    }
    if (peer >= peers_.size()) {
      lastError_ = "peer " + std::to_string(peer) + " out of range";
      return PostStatus::Failed;
    }
    void* desc = nullptr;
    if (!describe(buf, len, desc)) return PostStatus::Failed;
    // Remote addresses are virtual addresses (FI_MR_VIRT_ADDR) or offsets into the region.
    const uint64_t addr =
        (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? remoteAddr : remoteAddr - remoteBase;
    const ssize_t rc =
        fi_read(ep_.get(), buf, len, desc, peers_[peer], addr, remoteKey, t.providerContext);
    return postResult(rc, "fi_read");
  }

  PostStatus postSend(uint32_t peer, uint64_t tag, const void* buf, size_t len,
                      Transfer& t) override {
    if (peer >= peers_.size()) {
      lastError_ = "peer " + std::to_string(peer) + " out of range";
      return PostStatus::Failed;
    }
    if (len == 0) buf = &zeroByte_;
    void* desc = nullptr;
    const Registered* reg = registered_.empty() ? nullptr : registration(buf, len);
    if (len <= injectSize_ && (reg == nullptr || !reg->device)) {  // never from device memory
      // Small messages (handshakes, barrier tokens) skip the completion queue entirely.
      const ssize_t rc = fi_tinject(ep_.get(), buf, len, peers_[peer], tag);
      const PostStatus st = postResult(rc, "fi_tinject");
      return st == PostStatus::Posted ? PostStatus::Completed : st;
    }
    if (reg != nullptr)
      desc = fi_mr_desc(reg->mr.get());
    else if (!describe(buf, len, desc))
      return PostStatus::Failed;
    const ssize_t rc = fi_tsend(ep_.get(), buf, len, desc, peers_[peer], tag, t.providerContext);
    return postResult(rc, "fi_tsend");
  }

  PostStatus postRecv(uint32_t, uint64_t tag, uint64_t ignore, void* buf, size_t len,
                      Transfer& t) override {
    checkIgnoreMask(ignore);
    if (len == 0) buf = &zeroByte_;
    void* desc = nullptr;
    if (!describe(buf, len, desc)) return PostStatus::Failed;
    const ssize_t rc =
        fi_trecv(ep_.get(), buf, len, desc, FI_ADDR_UNSPEC, tag, ignore, t.providerContext);
    const PostStatus st = postResult(rc, "fi_trecv");
    // libfabric's shm: its receive entries (posted and arrived early) ran out. Short: the
    // other ranks get this text in the abort notice, whose length is bounded.
    if (rc == -FI_ENOMEM)
      lastError_ += " (" + provider_ + " holds " + std::to_string(recvQueueSize()) +
                    " receives, early ones included: fewer calls at once or larger "
                    "SHARC_CHUNK_BYTES)";
    return st;
  }

  void cancel(Transfer& t) override { fi_cancel(&ep_->fid, t.providerContext); }

  size_t progress() override {
    fi_cq_tagged_entry entries[32];
    size_t handled = 0;
    for (;;) {
      const ssize_t n = fi_cq_read(cq_.get(), entries, 32);
      if (n > 0) {
        for (ssize_t i = 0; i < n; ++i) {
          Transfer& t = transferOf(entries[i].op_context);
          t.owner->onTransferDone(t, entries[i].len, entries[i].tag);
        }
        handled += static_cast<size_t>(n);
        if (n < 32) return handled;
      } else if (n == -FI_EAVAIL) {
        readError();
        ++handled;
      } else {
        if (n != -FI_EAGAIN) SHARC_WARN("fi_cq_read: " << fi_strerror(static_cast<int>(-n)));
        return handled;
      }
    }
  }

 private:
  struct Registered {
    FiPtr<fid_mr> mr;
    bool device = false;
  };

  // The registerMemory region holding [buf, buf+len), or nullptr: among the regions starting
  // at or before buf (sorted by start, then end), nearest first, no further back than the
  // longest region.
  const Registered* registration(const void* buf, size_t len) const {
    const auto lo = reinterpret_cast<uintptr_t>(buf);
    const uintptr_t hi = lo + len;
    for (auto it = registered_.upper_bound({lo, UINTPTR_MAX}); it != registered_.begin();) {
      --it;
      if (lo - it->first.first > maxRegistered_) break;
      if (it->first.second >= hi) return &it->second;
    }
    return nullptr;
  }

  // The descriptor for a transfer of [buf, buf+len): its registerMemory region's, else the
  // MR cache's where the provider needs local registration, else none.
  bool describe(const void* buf, size_t len, void*& desc) {
    if (!registered_.empty())
      if (const Registered* reg = registration(buf, len)) {
        desc = fi_mr_desc(reg->mr.get());
        return true;
      }
    if (!mrCache_) return true;
    return mrCache_->descriptor(buf, len, desc, lastError_);
  }

  // FI_HMEM: asked for by EndpointOptions::hmem (queryProvider); where CUDA calls of the
  // provider's own are forbidden, one that cannot do without them gets no device memory.
  void setUpHmem() {
    read_ = (info_->caps & FI_RMA) && (info_->caps & FI_READ);
    if (!(info_->caps & FI_HMEM)) {
      hmemWhy_ = "provider " + provider_ + " has no FI_HMEM support";
      return;
    }
    if (const int rc = forbidCudaCalls_ ? forbidCudaCalls(ep_.get()) : 0; rc != 0) {
      hmemWhy_ = "provider " + provider_ + " has FI_HMEM but cannot do without CUDA calls of " +
                 "its own (" + fiErrorMessage("fi_setopt(FI_OPT_CUDA_API_PERMITTED=false)", rc) +
                 ")";
      read_ = false;
      return;
    }
    hmem_ = true;
  }

  // libfabric's shm provider before 1.19 matches a new receive against the messages that
  // arrived before it (unexpected) with the ignore mask of whichever receive used that queue
  // entry last, not with the new receive's mask: once receives with different masks have been
  // posted, a receive can take a message its own mask excludes (another rank's, another
  // sequence's), and the receive that message was meant for then never completes. Safe only
  // while every receive on the endpoint has the same mask (sharc's engine uses the signature
  // mask alone; an entry never used before has mask 0, which only matches more strictly); say
  // so once when a caller mixes them.
  void checkIgnoreMask(uint64_t ignore) {
    if (!staleIgnoreMatching_ || mixedIgnoreWarned_) return;
    if (!anyRecv_) {
      anyRecv_ = true;
      firstIgnore_ = ignore;
      return;
    }
    if (ignore == firstIgnore_) return;
    mixedIgnoreWarned_ = true;
    SHARC_WARN("transport: receives with different ignore masks (0x"
               << std::hex << firstIgnore_ << ", 0x" << ignore << std::dec
               << ") on libfabric's shm provider " << FI_MAJOR(fi_version()) << "."
               << FI_MINOR(fi_version())
               << ", which matches early messages with a stale mask before 1.19: a receive "
                  "may take another's message");
  }

  PostStatus postResult(ssize_t rc, const char* call) {
    if (rc == 0) return PostStatus::Posted;
    if (rc == -FI_EAGAIN) {
      progress();  // manual-progress providers free resources only when polled
      return PostStatus::Retry;
    }
    lastError_ = fiErrorMessage(call, static_cast<int>(rc));
    return PostStatus::Failed;
  }

  void readError() {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(cq_.get(), &err, 0) < 0) return;
    if (err.op_context == nullptr) {  // an error not tied to an operation of ours
      SHARC_WARN("completion error without context: " << fi_strerror(err.err));
      return;
    }
    Transfer& t = transferOf(err.op_context);
    std::string msg;
    Result code = Result::SystemError;
    if (err.err == FI_ETRUNC) {
      msg = "message larger than the posted buffer";
      if (err.olen > 0) msg += " (" + std::to_string(err.olen) + " bytes beyond it)";
      code = Result::InvalidUsage;
    } else if (err.err == FI_ECANCELED) {
      msg = "canceled";
    } else {
      const char* detail = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, nullptr, 0);
      msg = std::string(fi_strerror(err.err)) + (detail ? std::string(" (") + detail + ")" : "");
    }
    t.owner->onTransferError(t, code, msg);
  }

  FiInfoPtr info_;
  std::string provider_;
  FiPtr<fid_fabric> fabric_;
  FiPtr<fid_domain> domain_;
  FiPtr<fid_av> av_;
  FiPtr<fid_cq> cq_;
  FiPtr<fid_ep> ep_;
  std::optional<MrCache> mrCache_;
  // registerMemory's regions by [start, end); closed before the domain (declared after it).
  static constexpr uint64_t kMemoryKeyBase = uint64_t{1} << 31;
  std::map<std::pair<uintptr_t, uintptr_t>, Registered> registered_;
  size_t maxRegistered_ = 0;
  uint64_t nextKey_ = 1;
  bool hmem_ = false;
  bool forbidCudaCalls_ = false;
  bool read_ = false;
  std::string hmemWhy_;
  std::vector<fi_addr_t> peers_;
  std::string address_;
  size_t maxMsg_ = 0;
  size_t injectSize_ = 0;
  std::string lastError_;
  unsigned char zeroByte_ = 0;
  // checkIgnoreMask's state.
  bool staleIgnoreMatching_ = provider_ == "shm" && FI_VERSION_LT(fi_version(), FI_VERSION(1, 19));
  bool anyRecv_ = false;
  bool mixedIgnoreWarned_ = false;
  uint64_t firstIgnore_ = 0;
};

// libfabric's shm provider names its region /dev/shm/<pid>:<n>:<n> and leaves it behind when
// its process dies without closing the endpoint. A later process that gets the same pid
// then fails fi_enable with EBUSY. Before this process opens its first shm endpoint, remove
// such regions of ours whose process is gone, or that carry our own pid (then they
// cannot be ours yet).
void sweepStaleShmRegions() {
  // Once per process; a forked child (new pid) sweeps again before its own first endpoint.
  static std::atomic<pid_t> sweptBy{0};
  const pid_t self = getpid();
  if (sweptBy.exchange(self) == self) return;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  int removed = 0;
  while (const dirent* e = readdir(dir)) {
    const char* name = e->d_name;
    char* end = nullptr;
    const long pid = std::strtol(name, &end, 10);
    if (end == name || *end != ':' || pid <= 0) continue;
    int colons = 0;
    bool digits = true;
    for (const char* c = end; *c; ++c) {
      if (*c == ':')
        ++colons;
      else if (*c < '0' || *c > '9')
        digits = false;
    }
    if (colons != 2 || !digits) continue;
    const std::string path = std::string("/dev/shm/") + name;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || st.st_uid != geteuid()) continue;
    const bool gone = kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    if ((gone || pid == self) && unlink(path.c_str()) == 0) ++removed;
  }
  closedir(dir);
  if (removed > 0) SHARC_INFO("transport: removed " << removed << " stale libfabric shm region(s)");
}

}  // namespace

std::unique_ptr<Endpoint> openFabricEndpoint(const EndpointOptions& options) {
  std::string tried;
  for (const std::string& name : providerCandidates(options)) {
    if (name == "shm") sweepStaleShmRegions();
    std::string why;
    FiInfoPtr info = queryProvider(name, options.allLocal, why, options.nearNics,
                                   options.requiredNic, options.hmem);
    if (!info) {
      tried += (tried.empty() ? "" : "; ") + why;
      continue;
    }
    try {
      return std::make_unique<FabricEndpoint>(std::move(info), name,
                                              options.hmem && options.forbidProviderCudaCalls);
    } catch (const Error& e) {
      tried += (tried.empty() ? "" : "; ") + name + ": " + e.what();
    }
  }
  throw Error(Result::SystemError, "no usable libfabric provider (tried " + tried +
                                       "); set SHARC_FI_PROVIDER to one `fi_info -l` lists");
}

}  // namespace sharc::transport
