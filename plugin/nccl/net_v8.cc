// ncclNetPlugin_v8 / ncclCollNetPlugin_v8 (NCCL 2.19 - 2.21): int sizes, no virtual NICs.
#include "adapter.hpp"

namespace sharc::nccl {
namespace {

ncclResult_t getProperties(int dev, ncclNetProperties_v8_t* props) {
  return properties(dev, props, netGetProperties, kMaxGroupedRecvs);
}
ncclResult_t connect(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t**) {
  return netConnect(dev, handle, sendComm);
}
ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t**) {
  return netAccept(listenComm, recvComm);
}
ncclResult_t isend(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) return ncclInvalidArgument;
  return netIsend(sendComm, data, static_cast<size_t>(size), tag, mhandle, request);
}
ncclResult_t irecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                   void** request) {
  if (n < 1 || n > kMaxGroupedRecvs || sizes == nullptr) return ncclInvalidArgument;
  size_t wide[kMaxGroupedRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    wide[i] = static_cast<size_t>(sizes[i]);
  }
  return netIrecv(recvComm, n, data, wide, tags, mhandles, request);
}

ncclResult_t collGetProps(int dev, ncclNetProperties_v8_t* props) {
  return properties(dev, props, collGetProperties, 1);
}
ncclResult_t iallreduce(void* collComm, void* sendData, void* recvData, int count,
                        ncclDataType_t type, ncclRedOp_t op, void* sendMhandle, void* recvMhandle,
                        void** request) {
  if (count < 0) return ncclInvalidArgument;
  return collIallreduce(collComm, sendData, recvData, static_cast<size_t>(count), type, op,
                        sendMhandle, recvMhandle, request);
}
}  // namespace
}  // namespace sharc::nccl

using namespace sharc::nccl;

extern "C" {

SHARC_PLUGIN_EXPORT ncclNet_v8_t ncclNetPlugin_v8 = {
    "sharc",
    netInit,
    netDevices,
    getProperties,
    netListen,
    connect,
    accept,
    netRegMr,
    netRegMrDmaBuf,
    netDeregMr,
    isend,
    irecv,
    [](void* c, int n, void** d, int* s, void** m, void** r) {
      return netIflush(c, n, d, s, m, r);
    },
    netTest,
    netCloseSend,
    netCloseRecv,
    netCloseListen,
    nullptr,
    nullptr,
};

SHARC_PLUGIN_EXPORT ncclCollNet_v8_t ncclCollNetPlugin_v8 = {
    "sharc",
    collInit,
    collDevices,
    collGetProps,
    collListen,
    collConnect,
    collReduceSupportV8,
    collRegMr,
    collRegMrDmaBuf,
    collDeregMr,
    iallreduce,
    iallgatherParts<ncclNetSGE_v8_t>,
    ireducescatterParts<ncclNetSGE_v8_t>,
    collIflush,
    collTest,
    collCloseColl,
    collCloseListen,
};
}  // extern "C"
