// ncclNetPlugin_v9 / ncclCollNetPlugin_v9 (NCCL 2.22 - 2.23): size_t sizes, virtual NICs.
#include "adapter.hpp"

namespace sharc::nccl {
namespace {

ncclResult_t getProperties(int dev, ncclNetProperties_v9_t* props) {
  return properties(dev, props, netGetProperties, kMaxGroupedRecvs);
}
ncclResult_t connect(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v9_t**) {
  return netConnect(dev, handle, sendComm);
}
ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t**) {
  return netAccept(listenComm, recvComm);
}
ncclResult_t collGetProps(int dev, ncclNetProperties_v9_t* props) {
  return properties(dev, props, collGetProperties, 1);
}

}  // namespace
}  // namespace sharc::nccl

using namespace sharc::nccl;

extern "C" {
// makeVDevice is NULL: NCCL then does not merge NICs into virtual ones.
SHARC_PLUGIN_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = {
    "sharc",      netInit,        netDevices,     getProperties, netListen, connect,  accept,
    netRegMr,     netRegMrDmaBuf, netDeregMr,     netIsend,      irecvV9,   iflushV9, netTest,
    netCloseSend, netCloseRecv,   netCloseListen, nullptr,       nullptr,   nullptr,
};

SHARC_PLUGIN_EXPORT ncclCollNet_v9_t ncclCollNetPlugin_v9 = {
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
