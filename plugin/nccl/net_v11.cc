// ncclNetPlugin_v11 / ncclCollNetPlugin_v11 (NCCL 2.27 - 2.28): a context per NCCL
// communicator (init returns it, finalize frees it), multi-request size, net attributes.
#include "adapter.hpp"

namespace sharc::nccl {
namespace {

ncclResult_t init(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                  ncclDebugLogger_t logger, ncclProfilerCallback_t) {
  const ncclResult_t rc = netInit(logger);
  if (rc != ncclSuccess) return rc;
  return newContext(ctx, commId, config != nullptr ? config->trafficClass : -1);
}
ncclResult_t getProperties(int dev, ncclNetProperties_v11_t* props) {
  const ncclResult_t rc = properties(dev, props, netGetProperties, kMaxGroupedRecvs);
  if (rc == ncclSuccess) props->maxMultiRequestSize = 1;
  return rc;
}
ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) {
  const ncclResult_t rc = checkContext(ctx, "listen");
  return rc != ncclSuccess ? rc : netListen(dev, handle, listenComm);
}
ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm,
                     ncclNetDeviceHandle_v11_t**) {
  const ncclResult_t rc = checkContext(ctx, "connect");
  return rc != ncclSuccess ? rc : netConnect(dev, handle, sendComm);
}
ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t**) {
  return netAccept(listenComm, recvComm);
}
// Hints about the traffic pattern of the communicator; sharc's transport has no knobs for them.
ncclResult_t setNetAttr(void* ctx, ncclNetAttr_v11_t*) {
  return checkContext(ctx, "setNetAttr");
}

ncclResult_t collInitV11(void** ctx, uint64_t commId, ncclDebugLogger_t logger) {
  const ncclResult_t rc = collInit(logger);
  if (rc != ncclSuccess) return rc;
  return newContext(ctx, commId, -1);
}
ncclResult_t collGetProps(int dev, ncclNetProperties_v11_t* props) {
  const ncclResult_t rc = properties(dev, props, collGetProperties, 1);
  if (rc == ncclSuccess) props->maxMultiRequestSize = 1;
  return rc;
}
ncclResult_t collListenV11(void* ctx, int dev, void* handle, void** listenComm) {
  const ncclResult_t rc = checkContext(ctx, "listen");
  return rc != ncclSuccess ? rc : collListen(dev, handle, listenComm);
}

}  // namespace
}  // namespace sharc::nccl

using namespace sharc::nccl;

extern "C" {

SHARC_PLUGIN_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = {
    "sharc",  init,     netDevices,     getProperties, listen,         connect,
    accept,   netRegMr, netRegMrDmaBuf, netDeregMr,    isendV10,       irecvV10,
    iflushV9, netTest,  netCloseSend,   netCloseRecv,  netCloseListen, nullptr,
    nullptr,  nullptr,  freeContext,    setNetAttr,
};

SHARC_PLUGIN_EXPORT ncclCollNet_v11_t ncclCollNetPlugin_v11 = {
    "sharc",
    collInitV11,
    collDevices,
    collGetProps,
    collListenV11,
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
    freeContext,
};
}  // extern "C"
