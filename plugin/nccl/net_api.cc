// The network plugin's entry points: argument checks, the device lock, and the guard that
// turns every exception into an ncclResult_t with a warning.
#include "net_api.hpp"

#include <cstring>
#include <map>
#include <mutex>

#include "net_comms.hpp"
#include "net_device.hpp"
#include "plugin_support.hpp"

namespace sharc::nccl {
namespace {

template <typename T>
T& commOf(void* comm, CommKind kind, const char* call) {
  auto* base = static_cast<CommBase*>(comm);
  if (base == nullptr || base->kind != kind)
    throw Error(Result::InvalidArgument,
                std::string(call) + ": not a live comm of the expected kind");
  return *static_cast<T*>(base);
}

CommBase& dataComm(void* comm, const char* call) {
  auto* base = static_cast<CommBase*>(comm);
  if (base == nullptr || (base->kind != CommKind::Send && base->kind != CommKind::Recv))
    throw Error(Result::InvalidArgument, std::string(call) + ": not a live send or receive comm");
  return *base;
}

// Connections under way, by device and handle bytes: NCCL calls connect again with the same
// handle until it returns a comm (a later connect to the same handle starts a new one).
std::mutex gPendingMutex;  // taken after a device's mutex
std::map<std::pair<int, std::string>, std::unique_ptr<SendComm>> gPending;

}  // namespace

ncclResult_t netInit(ncclDebugLogger_t logger) {
  return guarded("init", [&] {
    installNcclLogger(logger);
    openDevices();
    return ncclSuccess;
  });
}

ncclResult_t netDevices(int* ndev) {
  return guarded("devices", [&] {
    if (ndev == nullptr) throw Error(Result::InvalidArgument, "devices: ndev is NULL");
    *ndev = deviceCount();
    return ncclSuccess;
  });
}

ncclResult_t netGetProperties(int dev, DeviceProperties& props, const char** name,
                              const char** pciPath) {
  return guarded("getProperties", [&] {
    NetDevice& d = device(dev, "getProperties");
    const int ptrSupport = d.ptrSupport();  // decided on the first call (may start CUDA)
    props = d.properties();
    props.ptrSupport = ptrSupport;
    *name = d.properties().name.c_str();
    *pciPath = d.properties().pciPath.empty() ? nullptr : d.properties().pciPath.c_str();
    return ncclSuccess;
  });
}

ncclResult_t netListen(int dev, void* handle, void** listenComm) {
  return guarded("listen", [&] {
    if (handle == nullptr || listenComm == nullptr)
      throw Error(Result::InvalidArgument, "listen: handle or listenComm is NULL");
    NetDevice& d = device(dev, "listen");
    std::lock_guard<std::mutex> lock(d.mutex);
    auto comm = std::make_unique<ListenComm>(d);
    std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    comm->writeHandle(handle);
    *listenComm = comm.release();
    return ncclSuccess;
  });
}

ncclResult_t netConnect(int dev, void* handle, void** sendComm) {
  return guarded("connect", [&] {
    if (handle == nullptr || sendComm == nullptr)
      throw Error(Result::InvalidArgument, "connect: handle or sendComm is NULL");
    *sendComm = nullptr;
    NetDevice& d = device(dev, "connect");
    std::lock_guard<std::mutex> lock(d.mutex);
    std::lock_guard<std::mutex> pendingLock(gPendingMutex);
    const auto key =
        std::make_pair(dev, std::string(static_cast<const char*>(handle), kHandleBytes));
    auto it = gPending.find(key);
    if (it == gPending.end())
      it = gPending.emplace(key, std::make_unique<SendComm>(d, decodeHandle(handle))).first;
    try {
      if (!it->second->connected()) return ncclSuccess;
    } catch (...) {
      gPending.erase(it);
      throw;
    }
    *sendComm = it->second.release();
    gPending.erase(it);
    return ncclSuccess;
  });
}

ncclResult_t netAccept(void* listenComm, void** recvComm) {
  return guarded("accept", [&] {
    if (recvComm == nullptr) throw Error(Result::InvalidArgument, "accept: recvComm is NULL");
    *recvComm = nullptr;
    auto& listen = commOf<ListenComm>(listenComm, CommKind::Listen, "accept");
    std::lock_guard<std::mutex> lock(listen.device->mutex);
    *recvComm = listen.accept();
    return ncclSuccess;
  });
}

ncclResult_t netRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return guarded("regMr", [&] {
    CommBase& c = dataComm(comm, "regMr");
    if (mhandle == nullptr) throw Error(Result::InvalidArgument, "regMr: mhandle is NULL");
    if (data == nullptr && size > 0) throw Error(Result::InvalidArgument, "regMr: data is NULL");
    std::lock_guard<std::mutex> lock(c.device->mutex);
    // NCCL_PTR_CUDA only where ptrSupport has it; the refusal names the provider and why.
    *mhandle = c.device->registerRegion(data, size, type, "regMr");
    return ncclSuccess;
  });
}

ncclResult_t netRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                            void** mhandle) {
  // Without a DMA-BUF (fd -1) this is regMr.
  if (fd < 0) return netRegMr(comm, data, size, type, mhandle);
  return guarded("regMrDmaBuf", [&] {
    CommBase& c = dataComm(comm, "regMrDmaBuf");
    if (mhandle == nullptr) throw Error(Result::InvalidArgument, "regMrDmaBuf: mhandle is NULL");
    if (data == nullptr && size > 0)
      throw Error(Result::InvalidArgument, "regMrDmaBuf: data is NULL");
    std::lock_guard<std::mutex> lock(c.device->mutex);
    *mhandle = c.device->registerRegion(data, size, type, "regMrDmaBuf", fd, offset);
    return ncclSuccess;
  });
}

ncclResult_t netDeregMr(void* comm, void* mhandle) {
  return guarded("deregMr", [&] {
    CommBase& c = dataComm(comm, "deregMr");
    if (mhandle == nullptr) return ncclSuccess;
    std::lock_guard<std::mutex> lock(c.device->mutex);
    c.device->deregisterRegion(static_cast<MemoryRegion*>(mhandle));
    return ncclSuccess;
  });
}

ncclResult_t netIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                      void** request) {
  return guarded("isend", [&] {
    if (request == nullptr) throw Error(Result::InvalidArgument, "isend: request is NULL");
    *request = nullptr;
    auto& comm = commOf<SendComm>(sendComm, CommKind::Send, "isend");
    if (data == nullptr && size > 0) throw Error(Result::InvalidArgument, "isend: data is NULL");
    std::lock_guard<std::mutex> lock(comm.device->mutex);
    *request = comm.isend(data, size, tag, mhandle);
    return ncclSuccess;
  });
}

ncclResult_t netIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                      void** mhandles, void** request) {
  return guarded("irecv", [&] {
    if (request == nullptr || data == nullptr || sizes == nullptr || tags == nullptr)
      throw Error(Result::InvalidArgument, "irecv: a NULL array or request pointer");
    *request = nullptr;
    auto& comm = commOf<RecvComm>(recvComm, CommKind::Recv, "irecv");
    std::lock_guard<std::mutex> lock(comm.device->mutex);
    *request = comm.irecv(n, data, sizes, tags, mhandles);
    return ncclSuccess;
  });
}

ncclResult_t netIflush(void* recvComm, int n, void** data, const int* sizes, void** mhandles,
                       void** request) {
  return guarded("iflush", [&] {
    if (request == nullptr) throw Error(Result::InvalidArgument, "iflush: request is NULL");
    *request = nullptr;  // NCCL: nothing to wait for
    auto& comm = commOf<RecvComm>(recvComm, CommKind::Recv, "iflush");
    std::lock_guard<std::mutex> lock(comm.device->mutex);
    *request = comm.iflush(n, data, sizes, mhandles);
    return ncclSuccess;
  });
}

ncclResult_t netTest(void* request, int* done, int* sizes) {
  return guarded("test", [&] {
    if (request == nullptr || done == nullptr)
      throw Error(Result::InvalidArgument, "test: request or done is NULL");
    *done = 0;
    auto* r = static_cast<NetRequest*>(request);
    auto* comm = static_cast<CommBase*>(r->owner);
    if (comm == nullptr) throw Error(Result::InvalidArgument, "test: not a live request");
    std::lock_guard<std::mutex> lock(comm->device->mutex);
    *done = testRequest(r, sizes) ? 1 : 0;
    return ncclSuccess;
  });
}

ncclResult_t netCloseSend(void* sendComm) {
  return guarded("closeSend", [&] {
    auto& comm = commOf<SendComm>(sendComm, CommKind::Send, "closeSend");
    std::lock_guard<std::mutex> lock(comm.device->mutex);
    delete &comm;
    return ncclSuccess;
  });
}

ncclResult_t netCloseRecv(void* recvComm) {
  return guarded("closeRecv", [&] {
    auto& comm = commOf<RecvComm>(recvComm, CommKind::Recv, "closeRecv");
    std::lock_guard<std::mutex> lock(comm.device->mutex);
    delete &comm;
    return ncclSuccess;
  });
}

ncclResult_t netCloseListen(void* listenComm) {
  return guarded("closeListen", [&] {
    auto& comm = commOf<ListenComm>(listenComm, CommKind::Listen, "closeListen");
    std::lock_guard<std::mutex> lock(comm.device->mutex);
    delete &comm;
    return ncclSuccess;
  });
}

}  // namespace sharc::nccl
