#include "provider.hpp"

#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

#include "core/log.hpp"

namespace sharc::transport {

std::vector<std::string> providerCandidates(const EndpointOptions& options) {
  if (!options.provider.empty()) return {options.provider};
  std::vector<std::string> names;
  if (options.allLocal && !options.sharedMemoryCarriesAll) names.push_back("shm");
  for (const char* n : {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"}) names.emplace_back(n);
  return names;
}

namespace {
// `extraCaps`: FI_HMEM (device memory, whose registration FI_MR_HMEM then requires), maybe
// with RMA reads; 0 for the plain tagged endpoint. `api`: the libfabric API version asked for.
FiInfoPtr tagAllInfo(const std::string& provider, std::string& why, uint64_t extraCaps = 0,
                     uint32_t api = FI_VERSION(1, 14)) {
  FiInfoPtr hints(fi_allocinfo());
  if (!hints) {
    why = "fi_allocinfo failed";
    return nullptr;
  }
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV | extraCaps;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // We only hand local descriptors to send/recv, so these registration modes are all fine.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  if (extraCaps & FI_HMEM) hints->domain_attr->mr_mode |= FI_MR_HMEM;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;  // sharc serialises calls per endpoint
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  fi_info* raw = nullptr;
  const int rc = fi_getinfo(api, nullptr, nullptr, 0, hints.get(), &raw);
  if (rc != 0 || raw == nullptr) {
    why = provider + ": " + (rc != 0 ? fi_strerror(-rc) : "no matching endpoint");
    return nullptr;
  }
  return FiInfoPtr(raw);
}
}  // namespace

std::vector<std::string> listDomains(const std::string& provider, std::string& why) {
  std::vector<std::string> names;
  FiInfoPtr all = tagAllInfo(provider, why);
  for (const fi_info* it = all.get(); it != nullptr; it = it->next) {
    const char* domain = it->domain_attr && it->domain_attr->name ? it->domain_attr->name : "";
    bool seen = false;
    for (const std::string& n : names) seen = seen || n == domain;
    if (!seen) names.emplace_back(domain);
  }
  return names;
}

namespace {
FiInfoPtr chooseDomain(FiInfoPtr all, const std::string& provider, bool preferLoopback,
                       std::string& why, const std::vector<std::string>& nearNics,
                       const std::string& requiredNic) {
  if (!all) return nullptr;
  // The provider lists one entry per interface and address family. Score them: the loopback
  // domain only when every rank is on this host (else it is unreachable for the peers), the
  // interface FI_TCP_IFACE names if set, and IPv4 over IPv6 (an IPv6 link-local address
  // cannot be connected to without its scope, which the peers' address vectors lack).
  const char* iface = std::getenv("FI_TCP_IFACE");
  auto score = [&](const fi_info* it) {
    const char* domain = it->domain_attr && it->domain_attr->name ? it->domain_attr->name : "";
    const bool loopback = std::strcmp(domain, "lo") == 0;
    int sc = 0;
    if (iface != nullptr && std::strcmp(domain, iface) == 0) sc += 8;
    if (loopback) sc += preferLoopback && iface == nullptr ? 4 : -16;
    if (it->addr_format == FI_SOCKADDR_IN) sc += 2;
    for (const std::string& nic : nearNics)
      if (!nic.empty() && std::strncmp(domain, nic.c_str(), nic.size()) == 0) sc += 4;
    return sc;
  };
  auto onNic = [&](const fi_info* it) {
    const char* domain = it->domain_attr && it->domain_attr->name ? it->domain_attr->name : "";
    return requiredNic.empty() ||
           std::strncmp(domain, requiredNic.c_str(), requiredNic.size()) == 0;
  };
  const fi_info* chosen = nullptr;
  for (const fi_info* it = all.get(); it != nullptr; it = it->next)
    if (onNic(it) && (chosen == nullptr || score(it) > score(chosen))) chosen = it;
  if (chosen == nullptr) {
    why = provider + ": no domain on NIC '" + requiredNic + "'";
    return nullptr;
  }
  FiInfoPtr one(fi_dupinfo(chosen));
  if (!one) why = provider + ": fi_dupinfo failed";
  return one;
}
}  // namespace

FiInfoPtr queryProvider(const std::string& provider, bool preferLoopback, std::string& why,
                        const std::vector<std::string>& nearNics, const std::string& requiredNic,
                        bool hmem) {
  if (hmem) {
    // Device memory with RMA reads, else without them; API 1.20 first where the headers have
    // DMA-BUF registration (it needs that version), then 1.14 (an older libfabric at run time).
#ifdef FI_MR_DMABUF
    const uint32_t apis[] = {FI_VERSION(1, 20), FI_VERSION(1, 14)};
#else
    const uint32_t apis[] = {FI_VERSION(1, 14)};
#endif
    for (uint32_t api : apis)
      for (uint64_t caps : {FI_HMEM | FI_RMA | FI_READ | FI_REMOTE_READ, FI_HMEM}) {
        std::string ignored;
        FiInfoPtr all = tagAllInfo(provider, ignored, caps, api);
        if (FiInfoPtr one = chooseDomain(std::move(all), provider, preferLoopback, ignored,
                                         nearNics, requiredNic))
          return one;
      }
  }
  return chooseDomain(tagAllInfo(provider, why), provider, preferLoopback, why, nearNics,
                      requiredNic);
}

}  // namespace sharc::transport
