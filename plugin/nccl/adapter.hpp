// Shared by the per-version adapters (net_v8.cc ... net_v11.cc): filling each version's
// properties struct from the version-independent DeviceProperties, and the v11 contexts.
#pragma once

#include <cstdint>

#include "collnet_api.hpp"
#include "net_api.hpp"
#include "plugin_support.hpp"

// The plugin structs NCCL looks up by name (inside extern "C" blocks).
#define SHARC_PLUGIN_EXPORT __attribute__((visibility("default")))

namespace sharc::nccl {

/// Fields every version from v8 on has.
template <typename Props>
void fillBaseProperties(Props* out, const DeviceProperties& p, const char* name,
                        const char* pciPath) {
  out->name = const_cast<char*>(name);
  out->pciPath = const_cast<char*>(pciPath);
  out->guid = p.guid;
  out->ptrSupport = p.ptrSupport;
  out->regIsGlobal = 1;
  out->speed = p.speedMbps;
  out->port = p.port;
  out->latency = p.latencyUs;
  out->maxComms = p.maxComms;
  out->maxRecvs = p.maxRecvs;
  out->netDeviceType = NCCL_NET_DEVICE_HOST;
  out->netDeviceVersion = 0;
}

/// v9 and later: one physical device per virtual NIC, size limits, no forced flush.
template <typename Props>
void fillV9Properties(Props* out, int dev, const DeviceProperties& p, const char* name,
                      const char* pciPath) {
  fillBaseProperties(out, p, name, pciPath);
  out->forceFlush = 0;
  out->vProps.ndevs = 1;
  out->vProps.devs[0] = dev;
  out->maxP2pBytes = p.maxP2pBytes;
  out->maxCollBytes = p.maxCollBytes;
}

/// Properties through `get` (netGetProperties or collGetProperties), for version filler `fill`.
template <typename Props, typename Get>
ncclResult_t properties(int dev, Props* out, Get get, int maxRecvs) {
  if (out == nullptr) return ncclInvalidArgument;
  DeviceProperties p;
  const char* name = nullptr;
  const char* pciPath = nullptr;
  const ncclResult_t rc = get(dev, p, &name, &pciPath);
  if (rc != ncclSuccess) return rc;
  p.maxRecvs = maxRecvs;
  if constexpr (requires { out->vProps; }) {
    fillV9Properties(out, dev, p, name, pciPath);
  } else {
    fillBaseProperties(out, p, name, pciPath);
  }
  return ncclSuccess;
}

/// Scatter-gather lists NCCL passes (it uses one part; a few more are accepted).
inline constexpr int kMaxParts = 64;
/// Copies a version's SGE list into sharc's; false for a bad count or NULL list.
template <typename VersionSge>
bool widen(int n, const VersionSge* parts, Sge* out) {
  if (n < 0 || n > kMaxParts || (n > 0 && parts == nullptr)) return false;
  for (int i = 0; i < n; ++i) out[i] = {parts[i].mhandle, parts[i].address, parts[i].size};
  return true;
}

/// iallgather / ireducescatter of any version: its SGE list copied into sharc's.
template <typename VersionSge>
ncclResult_t iallgatherParts(void* collComm, void* sendData, int nRecvParts, VersionSge* recvParts,
                             size_t bytesPerRank, size_t windowOffset, size_t windowBytes,
                             void* sendMhandle, void** request) {
  Sge parts[kMaxParts];
  if (!widen(nRecvParts, recvParts, parts)) return ncclInvalidArgument;
  return collIallgather(collComm, sendData, nRecvParts, parts, bytesPerRank, windowOffset,
                        windowBytes, sendMhandle, request);
}
template <typename VersionSge>
ncclResult_t ireducescatterParts(void* collComm, int nSendParts, VersionSge* sendParts,
                                 void* recvData, size_t bytesPerRank, size_t windowOffset,
                                 size_t windowBytes, ncclDataType_t type, ncclRedOp_t op,
                                 void* recvMhandle, void** request) {
  Sge parts[kMaxParts];
  if (!widen(nSendParts, sendParts, parts)) return ncclInvalidArgument;
  return collIreducescatter(collComm, nSendParts, parts, recvData, bytesPerRank, windowOffset,
                            windowBytes, type, op, recvMhandle, request);
}

/// v11's per-communicator context (init returns it; listen/connect/finalize take it back).
struct PluginContext {
  static constexpr uint64_t kMagic = 0x5854434352414853ull;  // "SHARCCTX"
  uint64_t magic = kMagic;
  uint64_t commId = 0;
  int trafficClass = -1;
};
ncclResult_t newContext(void** ctx, uint64_t commId, int trafficClass);
ncclResult_t checkContext(void* ctx, const char* call);
ncclResult_t freeContext(void* ctx);

// Entry points whose signature is the same from v9 (or v10) on; each version's struct points
// at these (ncclNetSGE_v10_t and _v11_t are ncclNetSGE_v9_t).
ncclResult_t iflushV9(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                      void** request);
ncclResult_t irecvV9(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** request);
ncclResult_t isendV10(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                      void* phandle, void** request);
ncclResult_t irecvV10(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                      void** phandles, void** request);
ncclResult_t collReduceSupportV8(ncclDataType_t type, ncclRedOp_t op, int* supported);
ncclResult_t iallreduceV9(void* collComm, void* sendData, void* recvData, size_t count,
                          ncclDataType_t type, ncclRedOp_t op, void* sendMhandle, void* recvMhandle,
                          void** request);
}  // namespace sharc::nccl
