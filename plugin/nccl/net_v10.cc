// ncclNetPlugin_v10 / ncclCollNetPlugin_v10 (NCCL 2.24 - 2.26): profiler callback and
// per-connection config.
#include "adapter.hpp"

namespace sharc::nccl {
namespace {

ncclResult_t init(ncclDebugLogger_t logger, ncclProfilerCallback_t) {
  return netInit(logger);
}
ncclResult_t getProperties(int dev, ncclNetProperties_v10_t* props) {
  return properties(dev, props, netGetProperties, kMaxGroupedRecvs);
}
// The traffic class has no libfabric counterpart here; it is accepted and not used.
ncclResult_t connect(int dev, ncclNetCommConfig_v10_t*, void* handle, void** sendComm,
                     ncclNetDeviceHandle_v10_t**) {
  return netConnect(dev, handle, sendComm);
}
ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v10_t**) {
  return netAccept(listenComm, recvComm);
}
ncclResult_t collGetProps(int dev, ncclNetProperties_v10_t* props) {
  return properties(dev, props, collGetProperties, 1);
}

}  // namespace
}  // namespace sharc::nccl

using namespace sharc::nccl;

extern "C" {
SHARC_PLUGIN_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = {
    "sharc",      init,           netDevices,     getProperties, netListen, connect,  accept,
    netRegMr,     netRegMrDmaBuf, netDeregMr,     isendV10,      irecvV10,  iflushV9, netTest,
    netCloseSend, netCloseRecv,   netCloseListen, nullptr,       nullptr,   nullptr,
};

SHARC_PLUGIN_EXPORT ncclCollNet_v10_t ncclCollNetPlugin_v10 = {
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
    iallreduceV9,
    iallgatherParts<ncclNetSGE_v9_t>,
    ireducescatterParts<ncclNetSGE_v9_t>,
    collIflush,
    collTest,
    collCloseColl,
    collCloseListen,
    nullptr,
};
}  // extern "C"
