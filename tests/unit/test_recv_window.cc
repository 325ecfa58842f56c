// How many receives a schedule keeps posted: a quarter of what the endpoint's provider holds
// (schedule.hpp, recvWindow), read from the provider itself; and how many sends (sendWindow).
#include <gtest/gtest.h>
#include <rdma/fabric.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "algorithms/schedule.hpp"
#include "transport/endpoint.hpp"

namespace sharc {
namespace {

TEST(RecvWindow, AQuarterOfTheProvidersQueueWithinBounds) {
  EXPECT_EQ(algo::recvWindow(1024), 256u);  // libfabric's shm
  EXPECT_EQ(algo::recvWindow(2048), 512u);  // tcp;ofi_rxm
  EXPECT_EQ(algo::recvWindow(4096), algo::kMaxPostedRecvs);
  EXPECT_EQ(algo::recvWindow(65536), algo::kMaxPostedRecvs);
  EXPECT_EQ(algo::recvWindow(SIZE_MAX), algo::kMaxPostedRecvs);  // nothing fixes it
  EXPECT_EQ(algo::recvWindow(6), 4u);
  EXPECT_EQ(algo::recvWindow(0), 4u);
  EXPECT_EQ(algo::inOrderRecvs(algo::recvWindow(1024)), 64u);
}

TEST(SendWindow, TwoPerPeerWithinBounds) {
  // Every schedule that runs on this host (at most 16 peers) keeps the floor of 32.
  for (size_t peers = 0; peers <= 16; ++peers) EXPECT_EQ(algo::sendWindow(peers), 32u) << peers;
  EXPECT_EQ(algo::sendWindow(17), 34u);
  EXPECT_EQ(algo::sendWindow(63 + 7), 140u);  // hierarchical on 64 nodes of 8
  EXPECT_EQ(algo::sendWindow(1023 + 7), algo::kMaxPostedSends);
  EXPECT_EQ(algo::sendWindow(5, 0), 10u);  // another floor
  EXPECT_EQ(algo::sendWindow(SIZE_MAX / 4), algo::kMaxPostedSends);
}

// What fi_getinfo says the provider's tagged RDM endpoints hold (the reference, asked
// independently of the transport).
size_t providerRxSize(const std::string& provider) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV;
  hints->ep_attr->type = FI_EP_RDM;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  fi_info* info = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 14), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  if (rc != 0 || info == nullptr) return 0;
  const size_t size = info->rx_attr->size;
  fi_freeinfo(info);
  return size;
}

TEST(RecvWindow, FabricEndpointsReportTheirProvidersQueue) {
  for (const std::string provider : {"tcp;ofi_rxm", "shm"}) {
    const size_t expected = providerRxSize(provider);
    if (expected == 0) {
      ADD_FAILURE() << "libfabric lists no " << provider << " provider";
      continue;
    }
    transport::EndpointOptions options;
    options.provider = provider;
    options.allLocal = true;
    auto ep = transport::openFabricEndpoint(options);
    EXPECT_EQ(ep->recvQueueSize(), expected) << provider;
    EXPECT_LE(algo::recvWindow(ep->recvQueueSize()), expected / 4) << provider;
  }
}

}  // namespace
}  // namespace sharc
