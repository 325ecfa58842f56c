#include "adapter.hpp"

namespace sharc::nccl {

ncclResult_t newContext(void** ctx, uint64_t commId, int trafficClass) {
  return guarded("init", [&] {
    if (ctx == nullptr) throw Error(Result::InvalidArgument, "init: ctx is NULL");
    auto* c = new PluginContext;
    c->commId = commId;
    c->trafficClass = trafficClass;
    *ctx = c;
    return ncclSuccess;
  });
}

ncclResult_t checkContext(void* ctx, const char* call) {
  return guarded(call, [&] {
    if (ctx == nullptr || static_cast<PluginContext*>(ctx)->magic != PluginContext::kMagic)
      throw Error(Result::InvalidArgument,
                  std::string(call) + ": not a context returned by this plugin's init");
    return ncclSuccess;
  });
}

ncclResult_t freeContext(void* ctx) {
  const ncclResult_t rc = checkContext(ctx, "finalize");
  if (rc != ncclSuccess) return rc;
  static_cast<PluginContext*>(ctx)->magic = 0;
  delete static_cast<PluginContext*>(ctx);
  return ncclSuccess;
}

ncclResult_t iflushV9(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                      void** request) {
  return netIflush(recvComm, n, data, sizes, mhandles, request);
}

ncclResult_t irecvV9(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** request) {
  return netIrecv(recvComm, n, data, sizes, tags, mhandles, request);
}

// phandles are the profiler's per-request handles; sharc reports no profiler events.
ncclResult_t isendV10(void* sendComm, void* data, size_t size, int tag, void* mhandle, void*,
                      void** request) {
  return netIsend(sendComm, data, size, tag, mhandle, request);
}

ncclResult_t irecvV10(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                      void**, void** request) {
  return netIrecv(recvComm, n, data, sizes, tags, mhandles, request);
}

ncclResult_t collReduceSupportV8(ncclDataType_t type, ncclRedOp_t op, int* supported) {
  return collReduceSupport(type, op, supported);
}

ncclResult_t iallreduceV9(void* collComm, void* sendData, void* recvData, size_t count,
                          ncclDataType_t type, ncclRedOp_t op, void* sendMhandle, void* recvMhandle,
                          void** request) {
  return collIallreduce(collComm, sendData, recvData, count, type, op, sendMhandle, recvMhandle,
                        request);
}

}  // namespace sharc::nccl
