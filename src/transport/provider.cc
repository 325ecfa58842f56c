#include "provider.hpp"

#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

#include "core/log.hpp"

namespace sharc::transport {

std::vector<std::string> providerCandidates(const EndpointOptions& options) {
  if (!options.provider.empty()) return {options.provider};
  std::vector<std::string> names;
  if (options.allLocal) names.push_back("shm");
  for (const char* n : {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"}) names.emplace_back(n);
  return names;
}

FiInfoPtr queryProvider(const std::string& provider, bool preferLoopback, std::string& why) {
  FiInfoPtr hints(fi_allocinfo());
  if (!hints) {
    why = "fi_allocinfo failed";
    return nullptr;
  }
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // We only hand local descriptors to send/recv, so these registration modes are all fine.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;          // sharc serialises calls per endpoint
  hints->fabric_attr->prov_name = strdup(provider.c_str());  // freed by fi_freeinfo

  fi_info* raw = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 14), nullptr, nullptr, 0, hints.get(), &raw);
  if (rc != 0 || raw == nullptr) {
    why = provider + ": " + (rc != 0 ? fi_strerror(-rc) : "no matching endpoint");
    return nullptr;
  }
  FiInfoPtr all(raw);
  const fi_info* chosen = all.get();
  if (preferLoopback && std::getenv("FI_TCP_IFACE") == nullptr) {
    for (const fi_info* it = all.get(); it != nullptr; it = it->next) {
      if (it->domain_attr && it->domain_attr->name &&
          std::strcmp(it->domain_attr->name, "lo") == 0) {
        chosen = it;
        break;
      }
    }
  }
  FiInfoPtr one(fi_dupinfo(chosen));
  if (!one) why = provider + ": fi_dupinfo failed";
  return one;
}

}  // namespace sharc::transport
