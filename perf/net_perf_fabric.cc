// sharc-net-perf's baseline: the same point-to-point traffic with plain libfabric calls, one
// RDM endpoint with one tagged completion queue, opened the way sharc's engine opens its own
// (same provider, hints and threading), so the difference to the plugin is the plugin.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "net_perf.hpp"

namespace sharc::netperf {
namespace {

struct FiCloser {
  template <typename T>
  void operator()(T* p) const noexcept {
    if (p != nullptr) fi_close(&p->fid);
  }
};
template <typename T>
using FiPtr = std::unique_ptr<T, FiCloser>;
struct FiInfoFree {
  void operator()(fi_info* p) const noexcept { fi_freeinfo(p); }
};
using FiInfoPtr = std::unique_ptr<fi_info, FiInfoFree>;

[[noreturn]] void fiFail(const std::string& call, long rc) {
  throw Failure("raw libfabric: " + call + " returned " + std::to_string(rc) + " (" +
                fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)) + "), expected 0");
}
void checkFi(long rc, const char* call) {
  if (rc != 0) fiFail(call, rc);
}

/// fi_getinfo for `provider` with the engine's hints; for tcp the domain FI_TCP_IFACE names
/// (else "lo"), IPv4 first.
FiInfoPtr queryProvider(const std::string& provider) {
  FiInfoPtr hints(fi_allocinfo());
  if (!hints) throw Failure("raw libfabric: fi_allocinfo returned NULL, expected a fi_info");
  hints->caps = FI_TAGGED | FI_MSG;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;  // we hand fi_context2-sized contexts
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup(provider.c_str());  // fi_freeinfo frees it
  fi_info* raw = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 14), nullptr, nullptr, 0, hints.get(), &raw);
  if (rc != 0 || raw == nullptr)
    throw Failure("raw libfabric: fi_getinfo(provider '" + provider +
                  "', FI_TAGGED|FI_MSG, FI_EP_RDM) returned " + std::to_string(rc) + " (" +
                  fi_strerror(-rc) + "), expected a matching provider (see `fi_info -l`)");
  FiInfoPtr all(raw);
  const char* env = std::getenv("FI_TCP_IFACE");
  const std::string iface = env != nullptr && *env != '\0' ? env : "lo";
  const bool tcp = provider.find("tcp") != std::string::npos;
  const fi_info* chosen = nullptr;
  auto score = [&](const fi_info* it) {
    const char* domain = it->domain_attr->name != nullptr ? it->domain_attr->name : "";
    return (!tcp || iface == domain ? 4 : 0) + (it->addr_format == FI_SOCKADDR_IN ? 1 : 0);
  };
  for (const fi_info* it = all.get(); it != nullptr; it = it->next)
    if (chosen == nullptr || score(it) > score(chosen)) chosen = it;
  if (tcp && score(chosen) < 4)
    throw Failure("raw libfabric: fi_getinfo(provider '" + provider + "') lists no domain '" +
                  iface + "' (FI_TCP_IFACE), expected one");
  FiInfoPtr one(fi_dupinfo(chosen));
  if (!one) throw Failure("raw libfabric: fi_dupinfo returned NULL, expected a copy");
  return one;
}

class Raw final : public RawLink {
 public:
  explicit Raw(const std::string& provider) : provider_(provider), info_(queryProvider(provider)) {
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
    checkFi(fi_enable(ep_.get()), "fi_enable");
    char name[256];
    size_t len = sizeof(name);
    checkFi(fi_getname(&ep_->fid, name, &len), "fi_getname");
    address_.assign(name, len);
  }

  ~Raw() override { close(); }

  std::string describe() const override {
    return "provider " + provider_ + ", fabric " + info_->fabric_attr->name + ", domain " +
           info_->domain_attr->name +
           ((info_->domain_attr->mr_mode & FI_MR_LOCAL) ? ", local MR" : ", no local MR");
  }
  std::string address() const override { return address_; }

  void connect(const std::string& peerAddress) override {
    const int n = fi_av_insert(av_.get(), peerAddress.data(), 1, &peer_, 0, nullptr);
    if (n != 1)
      throw Failure("raw libfabric: fi_av_insert(peer address) returned " + std::to_string(n) +
                    ", expected 1");
  }

  void attach(void* tx, size_t txBytes, void* rx, size_t rxBytes) override {
    if ((info_->domain_attr->mr_mode & FI_MR_LOCAL) == 0) return;
    txMr_ = registerRegion(tx, txBytes, FI_SEND, 1);
    rxMr_ = registerRegion(rx, rxBytes, FI_RECV, 2);
    txDesc_ = fi_mr_desc(txMr_.get());
    rxDesc_ = fi_mr_desc(rxMr_.get());
  }

  bool isend(int slot, const void* buf, size_t size, int tag) override {
    done_[slot] = false;
    const ssize_t rc =
        fi_tsend(ep_.get(), buf, size, txDesc_, peer_, static_cast<uint64_t>(tag), &ctx_[slot]);
    return posted(rc, "fi_tsend");
  }

  bool irecv(int slot, void* buf, size_t size, int tag) override {
    done_[slot] = false;
    const ssize_t rc = fi_trecv(ep_.get(), buf, size, rxDesc_, FI_ADDR_UNSPEC,
                                static_cast<uint64_t>(tag), 0, &ctx_[slot]);
    return posted(rc, "fi_trecv");
  }

  bool test(int slot, size_t& size) override {
    if (!done_[slot]) poll();
    if (!done_[slot]) return false;
    size = len_[slot];
    return true;
  }

  void close() override {
    ep_.reset();  // the endpoint before the MRs, CQ, AV and domain it uses
    txMr_.reset();
    rxMr_.reset();
    cq_.reset();
    av_.reset();
    domain_.reset();
    fabric_.reset();
  }

 private:
  FiPtr<fid_mr> registerRegion(void* buf, size_t len, uint64_t access, uint64_t key) {
    fid_mr* mr = nullptr;
    checkFi(fi_mr_reg(domain_.get(), buf, len, access, 0, key, 0, &mr, nullptr), "fi_mr_reg");
    return FiPtr<fid_mr>(mr);
  }

  bool posted(ssize_t rc, const char* call) {
    if (rc == 0) return true;
    if (rc != -FI_EAGAIN) fiFail(call, rc);
    poll();  // manual-progress providers free resources only when polled
    return false;
  }

  void poll() {
    fi_cq_tagged_entry entries[16];
    const ssize_t n = fi_cq_read(cq_.get(), entries, 16);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        const auto offset = reinterpret_cast<uintptr_t>(entries[i].op_context) -
                            reinterpret_cast<uintptr_t>(ctx_.data());
        const size_t slot = offset / sizeof(fi_context2);
        if (offset % sizeof(fi_context2) != 0 || slot >= ctx_.size())
          throw Failure(
              "raw libfabric: fi_cq_read returned an unknown op_context, expected one "
              "of ours");
        done_[slot] = true;
        len_[slot] = entries[i].len;
      }
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq_.get(), &err, 0);
      const char* detail = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, nullptr, 0);
      throw Failure(std::string("raw libfabric: fi_cq_read reported a failed operation: ") +
                    fi_strerror(err.err) +
                    (detail != nullptr ? std::string(" (") + detail + ")" : "") +
                    (err.err == FI_ETRUNC ? ", expected the message to fit the posted buffer"
                                          : ", expected success"));
    } else if (n != -FI_EAGAIN) {
      fiFail("fi_cq_read", n);
    }
  }

  std::string provider_;
  FiInfoPtr info_;
  FiPtr<fid_fabric> fabric_;
  FiPtr<fid_domain> domain_;
  FiPtr<fid_av> av_;
  FiPtr<fid_cq> cq_;
  FiPtr<fid_ep> ep_;
  FiPtr<fid_mr> txMr_;
  FiPtr<fid_mr> rxMr_;
  void* txDesc_ = nullptr;
  void* rxDesc_ = nullptr;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  std::string address_;
  std::array<fi_context2, kSlots> ctx_{};
  std::array<bool, kSlots> done_{};
  std::array<size_t, kSlots> len_{};
};

}  // namespace

std::unique_ptr<RawLink> openRawLink(const std::string& provider) {
  return std::make_unique<Raw>(provider);
}

}  // namespace sharc::netperf
