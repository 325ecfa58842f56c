// Choosing a libfabric provider: the user's choice, else the best one this host offers.
#pragma once

#include <string>
#include <vector>

#include "endpoint.hpp"
#include "fabric.hpp"

namespace sharc::transport {

/// Provider names to try, best first: the explicit one alone, else efa, verbs;ofi_rxm,
/// tcp;ofi_rxm — with shm first when every peer is on this host.
std::vector<std::string> providerCandidates(const EndpointOptions& options);

/// fi_getinfo for an RDM tagged endpoint of `provider`; nullptr when the provider is absent.
/// With `preferLoopback`, a "lo" domain is chosen where the provider offers one (all ranks
/// on this host), unless FI_TCP_IFACE already pins the interface.
/// Among the remaining entries, one whose domain is (or starts with the name of) a NIC in
/// `nearNics` wins: the rank's nearest NICs by the host topology ("rdmap16s27", "eth0").
/// With `requiredNic`, only that NIC's domains qualify (one endpoint per rail).
/// With `hmem`, an entry with FI_HMEM (and FI_RMA reads where offered) is preferred; the
/// plain one where the provider has none (EndpointOptions::hmem).
FiInfoPtr queryProvider(const std::string& provider, bool preferLoopback, std::string& why,
                        const std::vector<std::string>& nearNics = {},
                        const std::string& requiredNic = {}, bool hmem = false);

/// The distinct domains (NICs) `provider` offers on this host, in fi_getinfo's order; empty
/// when the provider is absent (`why` says so).
std::vector<std::string> listDomains(const std::string& provider, std::string& why);

}  // namespace sharc::transport
