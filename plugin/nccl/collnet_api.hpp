// The version-independent CollNet plugin: NCCL's collective-offload calls (iallreduce,
// iallgather, ireducescatter) run by sharc's engine over the fabric. The per-version
// adapters (net_v8.cc ... net_v11.cc) convert arguments; every call catches its own
// exceptions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_abi.h"
#include "net_api.hpp"

namespace sharc::nccl {

/// One piece of a scattered buffer (ncclNetSGE_vN_t with a size_t size).
struct Sge {
  void* mhandle = nullptr;
  void* address = nullptr;
  size_t size = 0;
};

ncclResult_t collInit(ncclDebugLogger_t logger);
ncclResult_t collDevices(int* ndev);
ncclResult_t collGetProperties(int dev, DeviceProperties& props, const char** name,
                               const char** pciPath);
ncclResult_t collListen(int dev, void* handle, void** listenComm);
ncclResult_t collConnect(void* handles[], int nranks, int rank, void* listenComm, void** collComm);
ncclResult_t collReduceSupport(int dataType, int redOp, int* supported);
ncclResult_t collRegMr(void* collComm, void* data, size_t size, int type, void** mhandle);
ncclResult_t collRegMrDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset,
                             int fd, void** mhandle);
ncclResult_t collDeregMr(void* collComm, void* mhandle);
ncclResult_t collIallreduce(void* collComm, void* sendData, void* recvData, size_t count,
                            int dataType, int redOp, void* sendMhandle, void* recvMhandle,
                            void** request);
ncclResult_t collIallgather(void* collComm, void* sendData, int nRecvParts, const Sge* recvParts,
                            size_t bytesPerRank, size_t windowOffset, size_t windowBytes,
                            void* sendMhandle, void** request);
ncclResult_t collIreducescatter(void* collComm, int nSendParts, const Sge* sendParts,
                                void* recvData, size_t bytesPerRank, size_t windowOffset,
                                size_t windowBytes, int dataType, int redOp, void* recvMhandle,
                                void** request);
ncclResult_t collIflush(void* collComm, void* data, int size, void* mhandle, void** request);
ncclResult_t collTest(void* request, int* done, int* size);
ncclResult_t collCloseColl(void* collComm);
ncclResult_t collCloseListen(void* listenComm);

}  // namespace sharc::nccl
