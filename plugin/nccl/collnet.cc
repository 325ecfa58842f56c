// The CollNet plugin over sharc's engine: one CollNet device; every CollNet communicator is an
// engine communicator (its own endpoint) created from rank 0's rendezvous server, whose
// UniqueId is the listen handle NCCL gathers. Host memory only (ptrSupport NCCL_PTR_HOST):
// GPU buffers are refused at registration.
//
// Object lifetimes:
//  * listen comm: owns a bootstrap root server (started by collListen). At collConnect the
//    rank whose server handles[0] names detaches it (it then serves the job and ends by
//    itself when the communicator is up or SHARC_TIMEOUT_MS passes); every other rank stops
//    its unused server there. closeListen frees what is left.
//  * coll comm: the engine communicator plus the registrations made on it. closeColl
//    destroys the communicator: after a closing barrier bounded by min(timeout, 2 s) when
//    the communicator is healthy and idle (a dead or stopped peer delays it, never hangs
//    it); at once, without a barrier, when it has failed or NCCL closes it with requests in
//    flight (only an abort does: the net API cannot tell an abort from a normal close).
//  * request: freed by the test call that reports it done or failed.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <sharc/error.hpp>
#include <sharc/types.hpp>

#include "bootstrap/bootstrap.hpp"
#include "collnet_internal.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "net_device.hpp"
#include "plugin_support.hpp"

namespace sharc::nccl {

using collnet::CollComm;
using collnet::CollRequest;
using collnet::MemRegion;

namespace {

// Communicators per process NCCL may open: each is a whole engine endpoint.
constexpr int kMaxComms = 256;
// Largest single collective NCCL may hand over (NCCL splits larger ones).
constexpr size_t kMaxCollBytes = size_t{1} << 30;
// closeColl's closing barrier waits at most this long (NCCL may be tearing down a job whose
// peer is stopped): long enough for the peers' last completions, short for an abort.
constexpr std::chrono::milliseconds kClosingWait{2000};

struct ListenComm {
  static constexpr uint64_t kMagic = 0x6c632d7368617263ull;  // "crahs-cl"
  uint64_t magic = kMagic;
  UniqueId id;
  std::unique_ptr<bootstrap::RootServer> server;  // null once detached or stopped
};

[[noreturn]] void invalid(const std::string& what) {
  throw Error(Result::InvalidArgument, what);
}

void checkDevice(int dev, const char* call) {
  if (dev != 0)
    invalid(std::string(call) + ": device " + std::to_string(dev) +
            " out of range (the CollNet plugin has one device: expected 0)");
}

ListenComm& listenOf(void* listenComm, const char* call) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (l == nullptr || l->magic != ListenComm::kMagic)
    invalid(std::string(call) + ": listenComm is null or not a CollNet listen comm");
  return *l;
}

CollComm& commOf(void* collComm, const char* call) {
  auto* c = static_cast<CollComm*>(collComm);
  if (c == nullptr || c->magic != CollComm::kMagic)
    invalid(std::string(call) + ": collComm is null or not a live CollNet communicator");
  return *c;
}

// Hands a request to NCCL (which frees it through test).
ncclResult_t post(CollComm& c, std::unique_ptr<CollRequest> req, void** request) {
  req->inFlight = c.inFlight;
  ++*req->inFlight;
  *request = req.release();
  return ncclSuccess;
}

void freeRequest(CollRequest* req) {
  req->magic = 0;
  if (req->inFlight) --*req->inFlight;
  delete req;
}

std::string hostRegistrationError(int type) {
  if (type == NCCL_PTR_CUDA || type == NCCL_PTR_DMABUF)
    return std::string(type == NCCL_PTR_CUDA ? "CUDA" : "DMA-BUF") +
           " memory cannot be registered: this build of the sharc CollNet plugin has no GPU "
           "memory support (it reports ptrSupport NCCL_PTR_HOST only)";
  return "unknown memory type " + std::to_string(type) +
         " (expected NCCL_PTR_HOST = " + std::to_string(NCCL_PTR_HOST) + ")";
}

}  // namespace

// ---- shared with collnet_window.cc -------------------------------------------------------

namespace collnet {

std::string CollComm::where(const char* call) const {
  return "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": " + call + ": ";
}

void CollComm::fail(Result code, const char* call, const std::string& what) const {
  throw Error(code, where(call) + what);
}

void CollComm::checkRegion(void* mhandle, const void* p, size_t bytes, const char* call,
                           const char* what) {
  if (mhandle == nullptr) return;
  auto* r = static_cast<MemRegion*>(mhandle);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (regions.count(r) == 0)
      fail(Result::InvalidArgument, call,
           std::string(what) + "'s mhandle is not a live registration of this communicator");
  }
  if (bytes == 0) return;
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (p == nullptr || a < r->base || a - r->base > r->size || bytes > r->size - (a - r->base))
    fail(Result::InvalidArgument, call,
         std::string(what) + " [" + std::to_string(a) + ", +" + std::to_string(bytes) +
             ") lies outside its registration [" + std::to_string(r->base) + ", +" +
             std::to_string(r->size) + ")");
}

size_t elementSize(int dataType) noexcept {
  if (dataType < 0 || dataType >= kNumDataTypes) return 0;
  return dataTypeSize(static_cast<DataType>(dataType));
}

}  // namespace collnet

// ---- setup ------------------------------------------------------------------------------

ncclResult_t collInit(ncclDebugLogger_t logger) {
  return guarded("collnet init", [&] {
    installNcclLogger(logger);
    openDevices();  // the CollNet device describes the network plugin's first NIC
    return ncclSuccess;
  });
}

ncclResult_t collDevices(int* ndev) {
  return guarded("collnet devices", [&] {
    if (ndev == nullptr) invalid("collnet devices: ndev is null");
    *ndev = 1;
    return ncclSuccess;
  });
}

ncclResult_t collGetProperties(int dev, DeviceProperties& props, const char** name,
                               const char** pciPath) {
  return guarded("collnet getProperties", [&] {
    checkDevice(dev, "collnet getProperties");
    // The NIC the engine's endpoint normally lands on: the network plugin's first device.
    // Reporting its name, PCI path and guid lets NCCL mark that NIC as CollNet-capable
    // instead of adding a NIC of its own.
    const DeviceProperties& nic = device(0, "collnet getProperties").properties();
    props = DeviceProperties{};
    props.name = nic.name;
    props.pciPath = nic.pciPath;
    props.guid = nic.guid;
    props.ptrSupport = NCCL_PTR_HOST;
    props.speedMbps = nic.speedMbps;
    props.port = 1;
    props.latencyUs = 0;
    props.maxComms = kMaxComms;
    props.maxRecvs = 1;
    props.maxP2pBytes = kMaxCollBytes;
    props.maxCollBytes = kMaxCollBytes;
    if (name != nullptr) *name = nic.name.c_str();
    if (pciPath != nullptr) *pciPath = nic.pciPath.empty() ? nullptr : nic.pciPath.c_str();
    return ncclSuccess;
  });
}

ncclResult_t collListen(int dev, void* handle, void** listenComm) {
  return guarded("collnet listen", [&] {
    checkDevice(dev, "collnet listen");
    if (handle == nullptr || listenComm == nullptr)
      invalid("collnet listen: handle or listenComm is null");
    *listenComm = nullptr;
    auto l = std::make_unique<ListenComm>();
    // A fresh random job token and this host's advertised address, as makeUniqueId does; the
    // server takes the job size from the first rank that connects.
    l->server = bootstrap::RootServer::start(bootstrap::localAdvertiseAddress(), 0,
                                             bootstrap::randomToken(),
                                             /*nranks=*/0, core::Config::get().timeout);
    const bootstrap::RootAddress address = l->server->address();
    l->id = bootstrap::encodeUniqueId(address);
    static_assert(UniqueId::kBytes == NCCL_NET_HANDLE_MAXSIZE);
    std::memcpy(handle, l->id.bytes.data(), UniqueId::kBytes);
    SHARC_INFO("collnet listen: rendezvous server on " << address.toString());
    *listenComm = l.release();
    return ncclSuccess;
  });
}

ncclResult_t collConnect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
  return guarded("collnet connect", [&] {
    const std::string where =
        "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": collnet connect: ";
    if (collComm == nullptr) invalid(where + "collComm is null");
    *collComm = nullptr;
    if (nranks < 1) invalid(where + "nranks must be >= 1");
    if (rank < 0 || rank >= nranks)
      invalid(where + "rank out of range (expected 0.." + std::to_string(nranks - 1) + ")");
    if (handles == nullptr || handles[0] == nullptr)
      invalid(where + "handles or handles[0] (rank 0's listen handle) is null");
    ListenComm& l = listenOf(listenComm, "collnet connect");
    UniqueId id;
    std::memcpy(id.bytes.data(), handles[0], UniqueId::kBytes);
    // Fails (InvalidArgument) on a malformed handle before any connection is attempted.
    const bootstrap::RootAddress root = bootstrap::decodeUniqueId(id);
    if (l.server) {
      // The server handles[0] names serves the job and ends by itself once the communicator
      // is up (or the timeout passed); another rank's server serves: stop ours.
      if (id.bytes == l.id.bytes) l.server->detach();
      l.server.reset();
    }
    SHARC_INFO(where << "joining through " << root.toString());
    auto c = std::make_unique<CollComm>();
    c->comm = Communicator::create(id, nranks, rank);
    c->rank = rank;
    c->nranks = nranks;
    SHARC_INFO(where << "communicator up over provider " << c->comm->provider());
    *collComm = c.release();
    return ncclSuccess;
  });
}

ncclResult_t collCloseListen(void* listenComm) {
  return guarded("collnet closeListen", [&] {
    ListenComm& l = listenOf(listenComm, "collnet closeListen");
    l.magic = 0;
    delete &l;  // stops the server if this rank still owns one
    return ncclSuccess;
  });
}

ncclResult_t collCloseColl(void* collComm) {
  return guarded("collnet closeColl", [&] {
    CollComm& c = commOf(collComm, "collnet closeColl");
    c.magic = 0;
    std::unique_ptr<CollComm> owned(&c);
    {
      std::lock_guard<std::mutex> lock(c.mu);
      if (!c.regions.empty())
        SHARC_INFO(c.where("closeColl")
                   << c.regions.size() << " registration(s) never deregistered: freed");
      for (MemRegion* r : c.regions) {
        r->magic = 0;
        delete r;
      }
      c.regions.clear();
    }
    const int pending = c.inFlight->load();
    if (pending > 0)  // NCCL is aborting: no closing barrier, the peers learn it now
      c.comm->abort(c.where("closeColl") + std::to_string(pending) +
                    " operation(s) still in flight (NCCL is aborting)");
    c.comm->destroy(kClosingWait);  // no barrier after an abort or a failure
    return ncclSuccess;
  });
}

// ---- capabilities and memory --------------------------------------------------------------

ncclResult_t collReduceSupport(int dataType, int redOp, int* supported) {
  return guarded("collnet reduceSupport", [&] {
    if (supported == nullptr) invalid("collnet reduceSupport: supported is null");
    // Every sharc type (NCCL's 0..9) with sum, prod, max, min, avg; not fp8 (10, 11) nor
    // NCCL's PreMulSum and user-defined operators (>= 5).
    *supported = dataType >= 0 && dataType < kNumDataTypes && redOp >= 0 && redOp < kNumRedOps &&
                         isValid(static_cast<DataType>(dataType)) &&
                         isValid(static_cast<RedOp>(redOp))
                     ? 1
                     : 0;
    return ncclSuccess;
  });
}

namespace {

ncclResult_t registerHost(const char* call, void* collComm, void* data, size_t size, int type,
                          void** mhandle) {
  if (mhandle == nullptr) invalid(std::string(call) + ": mhandle is null");
  *mhandle = nullptr;
  CollComm& c = commOf(collComm, call);
  if (type != NCCL_PTR_HOST) c.fail(Result::InvalidArgument, call, hostRegistrationError(type));
  if (data == nullptr && size > 0)
    c.fail(Result::InvalidArgument, call, "data is null with size " + std::to_string(size));
  if (reinterpret_cast<uintptr_t>(data) > UINTPTR_MAX - size)
    c.fail(Result::InvalidArgument, call, "data + size wraps around the address space");
  auto r = std::make_unique<MemRegion>();
  r->owner = &c;
  r->base = reinterpret_cast<uintptr_t>(data);
  r->size = size;
  std::lock_guard<std::mutex> lock(c.mu);
  c.regions.insert(r.get());
  *mhandle = r.release();
  return ncclSuccess;
}

}  // namespace

ncclResult_t collRegMr(void* collComm, void* data, size_t size, int type, void** mhandle) {
  return guarded("collnet regMr",
                 [&] { return registerHost("regMr", collComm, data, size, type, mhandle); });
}

ncclResult_t collRegMrDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset,
                             int fd, void** mhandle) {
  (void)offset;
  (void)fd;  // a host registration needs no file descriptor
  return guarded("collnet regMrDmaBuf",
                 [&] { return registerHost("regMrDmaBuf", collComm, data, size, type, mhandle); });
}

ncclResult_t collDeregMr(void* collComm, void* mhandle) {
  return guarded("collnet deregMr", [&] {
    CollComm& c = commOf(collComm, "collnet deregMr");
    auto* r = static_cast<MemRegion*>(mhandle);
    std::lock_guard<std::mutex> lock(c.mu);
    if (r == nullptr || c.regions.erase(r) == 0)
      c.fail(Result::InvalidArgument, "deregMr",
             "mhandle is not a live registration of this communicator");
    r->magic = 0;
    delete r;
    return ncclSuccess;
  });
}

// ---- collectives ---------------------------------------------------------------------------

ncclResult_t collIallreduce(void* collComm, void* sendData, void* recvData, size_t count,
                            int dataType, int redOp, void* sendMhandle, void* recvMhandle,
                            void** request) {
  return guarded("collnet iallreduce", [&] {
    if (request == nullptr) invalid("collnet iallreduce: request is null");
    *request = nullptr;
    CollComm& c = commOf(collComm, "collnet iallreduce");
    const size_t elem = collnet::elementSize(dataType);
    int supported = 0;
    collReduceSupport(dataType, redOp, &supported);
    if (!supported)
      c.fail(Result::InvalidArgument, "iallreduce",
             "data type " + std::to_string(dataType) + " with op " + std::to_string(redOp) +
                 " is not supported (reduceSupport says 0; expected types 0.." +
                 std::to_string(kNumDataTypes - 1) + ", ops 0.." + std::to_string(kNumRedOps - 1) +
                 ")");
    if (count > SIZE_MAX / elem)
      c.fail(Result::InvalidArgument, "iallreduce",
             "count " + std::to_string(count) + " overflows");
    const size_t bytes = count * elem;
    c.checkRegion(sendMhandle, sendData, bytes, "iallreduce", "sendData");
    c.checkRegion(recvMhandle, recvData, bytes, "iallreduce", "recvData");
    auto req = std::make_unique<CollRequest>();
    req->bytes = bytes;
    req->engine = c.comm->iallReduce(sendData, recvData, count, static_cast<DataType>(dataType),
                                     static_cast<RedOp>(redOp));
    return post(c, std::move(req), request);
  });
}

ncclResult_t collIallgather(void* collComm, void* sendData, int nRecvParts, const Sge* recvParts,
                            size_t bytesPerRank, size_t windowOffset, size_t windowBytes,
                            void* sendMhandle, void** request) {
  return guarded("collnet iallgather", [&] {
    if (request == nullptr) invalid("collnet iallgather: request is null");
    *request = nullptr;
    CollComm& c = commOf(collComm, "collnet iallgather");
    return post(c,
                collnet::postAllGather(c, sendData, nRecvParts, recvParts, bytesPerRank,
                                       windowOffset, windowBytes, sendMhandle),
                request);
  });
}

ncclResult_t collIreducescatter(void* collComm, int nSendParts, const Sge* sendParts,
                                void* recvData, size_t bytesPerRank, size_t windowOffset,
                                size_t windowBytes, int dataType, int redOp, void* recvMhandle,
                                void** request) {
  return guarded("collnet ireducescatter", [&] {
    if (request == nullptr) invalid("collnet ireducescatter: request is null");
    *request = nullptr;
    CollComm& c = commOf(collComm, "collnet ireducescatter");
    return post(c,
                collnet::postReduceScatter(c, nSendParts, sendParts, recvData, bytesPerRank,
                                           windowOffset, windowBytes, dataType, redOp, recvMhandle),
                request);
  });
}

ncclResult_t collIflush(void* collComm, void* data, int size, void* mhandle, void** request) {
  (void)data;
  (void)size;
  (void)mhandle;
  return guarded("collnet iflush", [&] {
    if (request == nullptr) invalid("collnet iflush: request is null");
    commOf(collComm, "collnet iflush");
    *request = nullptr;  // host memory: nothing to flush, nothing to wait for
    return ncclSuccess;
  });
}

// *size reports the bytes this call wrote on this rank: count * element size for AllReduce,
// windowBytes for AllGather (the receive parts), this rank's share of the window for
// ReduceScatter (recvData).
ncclResult_t collTest(void* request, int* done, int* size) {
  return guarded("collnet test", [&] {
    auto* req = static_cast<CollRequest*>(request);
    if (req == nullptr || req->magic != CollRequest::kMagic)
      invalid("collnet test: request is null or not a pending CollNet request");
    if (done == nullptr) invalid("collnet test: done is null");
    *done = 0;
    bool complete = false;
    try {
      complete = !req->engine || req->engine.test();
      if (complete && req->finish) req->finish();
    } catch (...) {
      freeRequest(req);  // a failed request is reported once, then gone
      throw;
    }
    if (!complete) return ncclSuccess;
    *done = 1;
    if (size != nullptr) *size = static_cast<int>(std::min<size_t>(req->bytes, INT_MAX));
    freeRequest(req);
    return ncclSuccess;
  });
}

}  // namespace sharc::nccl
