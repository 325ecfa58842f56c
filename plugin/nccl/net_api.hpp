// The version-independent network plugin: NCCL's point-to-point plugin calls in sharc's own
// terms. The per-version adapters (net_v8.cc ... net_v11.cc) only convert arguments and fill
// their version's structs; every call here catches its own exceptions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "nccl_abi.h"

namespace sharc::nccl {

/// What getProperties reports, before each version picks its fields.
struct DeviceProperties {
  std::string name;     ///< libfabric domain (NIC) name, e.g. "rdmap16s27" or "lo"
  std::string pciPath;  ///< /sys path of the NIC's PCI function; empty for virtual NICs
  uint64_t guid = 0;
  int ptrSupport = NCCL_PTR_HOST;
  int speedMbps = 0;
  int port = 1;
  float latencyUs = 0;
  int maxComms = 0;
  int maxRecvs = 0;
  size_t maxP2pBytes = 0;
  size_t maxCollBytes = 0;
};

/// Grouped receives one irecv may carry (maxRecvs from v9 on).
inline constexpr int kMaxGroupedRecvs = 8;

ncclResult_t netInit(ncclDebugLogger_t logger);
ncclResult_t netDevices(int* ndev);
/// Fills `props`; the strings live as long as the plugin (NCCL keeps the pointers).
ncclResult_t netGetProperties(int dev, DeviceProperties& props, const char** name,
                              const char** pciPath);
ncclResult_t netListen(int dev, void* handle, void** listenComm);
ncclResult_t netConnect(int dev, void* handle, void** sendComm);
ncclResult_t netAccept(void* listenComm, void** recvComm);
ncclResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t netRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                            void** mhandle);
ncclResult_t netDeregMr(void* comm, void* mhandle);
ncclResult_t netIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                      void** request);
ncclResult_t netIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                      void** mhandles, void** request);
ncclResult_t netIflush(void* recvComm, int n, void** data, const int* sizes, void** mhandles,
                       void** request);
ncclResult_t netTest(void* request, int* done, int* sizes);
ncclResult_t netCloseSend(void* sendComm);
ncclResult_t netCloseRecv(void* recvComm);
ncclResult_t netCloseListen(void* listenComm);

}  // namespace sharc::nccl
