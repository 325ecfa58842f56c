// A device's memory registrations: host memory always; CUDA memory (NCCL_PTR_CUDA, and as a
// DMA-BUF with NCCL_PTR_DMABUF) where the provider has FI_HMEM and CUDA is up in the process;
// and the flush read that orders a NIC's writes into GPU memory before NCCL reads them.
#include <dlfcn.h>
#include <rdma/fabric.h>

#include <algorithm>
#include <sharc/cuda.hpp>

#include "core/log.hpp"
#include "net_device.hpp"

namespace sharc::nccl {
namespace {

const char* typeName(int type) {
  return type == NCCL_PTR_HOST ? "NCCL_PTR_HOST" : type == NCCL_PTR_CUDA ? "NCCL_PTR_CUDA" : "?";
}

// Whether this process has loaded the CUDA driver. A process with CUDA memory to register
// has; asking CUDA's runtime anything in one that has not would load and initialise it.
bool cudaDriverLoaded() {
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) {
    (void)dlerror();  // leave no error behind for the process's own dlerror()
    return false;
  }
  dlclose(handle);
  return true;
}

}  // namespace

void NetDevice::decideDeviceMemory() {
  const std::string provider = "provider " + endpoint_->providerName();
  std::string why;
  if (!hmem_) {
    endpoint_->supportsHmem(why);
    cudaRefusal_ = why;
    return;
  }
  if (!cudaDriverLoaded()) {
    cudaRefusal_ = provider + " has FI_HMEM, but this process has not loaded CUDA";
    return;
  }
  if (!cudaAvailable(&why)) {
    cudaRefusal_ = provider + " has FI_HMEM, but CUDA cannot be used here: " + why;
    return;
  }
#if FI_VERSION_LT(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 18))
  // Before 1.18 a provider cannot be told to make no CUDA calls of its own, and one made on
  // NCCL's proxy thread (a cudaMemcpy behind a send) can wait on a kernel waiting on it.
  cudaRefusal_ = provider + " has FI_HMEM, but libfabric " + std::to_string(FI_MAJOR_VERSION) +
                 "." + std::to_string(FI_MINOR_VERSION) +
                 " cannot forbid it CUDA calls of its own (FI_OPT_CUDA_API_PERMITTED: 1.18)";
#else
  properties_.ptrSupport |= NCCL_PTR_CUDA;
  if (endpoint_->supportsDmabuf()) properties_.ptrSupport |= NCCL_PTR_DMABUF;
#endif
}

int NetDevice::ptrSupport() {
  std::call_once(deviceMemoryDecided_, [this] { decideDeviceMemory(); });
  return properties_.ptrSupport;
}

MemoryRegion* NetDevice::registerRegion(const void* data, size_t size, int type, const char* call,
                                        int dmabufFd, uint64_t dmabufOffset) {
  const std::string where = std::string(call) + ": " + std::to_string(size) + " bytes of " +
                            typeName(type) + " memory on device " + properties_.name;
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA)
    throw Error(Result::InvalidArgument,
                std::string(call) + ": memory type " + std::to_string(type) +
                    ", expected NCCL_PTR_HOST or NCCL_PTR_CUDA (ptrSupport " +
                    std::to_string(ptrSupport()) + ")");
  if (type == NCCL_PTR_CUDA && !(ptrSupport() & NCCL_PTR_CUDA))
    throw Error(Result::InvalidArgument,
                where + " refused (ptrSupport has no NCCL_PTR_CUDA): " + cudaRefusal_);
  if (dmabufFd >= 0 && !(ptrSupport() & NCCL_PTR_DMABUF))
    throw Error(Result::InvalidArgument,
                where + " as DMA-BUF refused (ptrSupport has no NCCL_PTR_DMABUF): " +
                    (cudaRefusal_.empty() ? "provider " + endpoint_->providerName() +
                                                " takes no DMA-BUF (libfabric 1.20's FI_MR_DMABUF)"
                                          : cudaRefusal_));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const auto key = std::make_pair(begin, begin + size);
  auto it = regions_.find(key);
  if (it != regions_.end()) {
    if (it->second->type != type)
      throw Error(Result::InvalidArgument, where + ": the range is registered as " +
                                               typeName(it->second->type) + " already");
    ++it->second->references;
    return it->second.get();
  }
  auto region = std::make_unique<MemoryRegion>();
  if (hmem_ && size > 0) {
    // FI_HMEM devices register every buffer with the provider (host memory as FI_HMEM_SYSTEM),
    // and its transfers carry the registration's descriptor.
    transport::MemoryRegistration m;
    m.buf = data;
    m.len = size;
    if (type == NCCL_PTR_CUDA) {
      m.kind = transport::MemoryRegistration::Kind::Cuda;
      m.cudaDevice = memoryDevice(data);
      if (m.cudaDevice < 0)
        throw Error(Result::InvalidArgument, where + ": CUDA does not know this address");
    }
    m.dmabufFd = dmabufFd;
    m.dmabufOffset = dmabufOffset;
    bool ok = endpoint_->registerMemory(m, region->key);
    if (!ok && dmabufFd >= 0) {  // the provider may still take the address range
      SHARC_INFO("NCCL plugin: " << where << ": DMA-BUF registration failed ("
                                 << endpoint_->lastError() << "); registering the address range");
      m.dmabufFd = -1;
      ok = endpoint_->registerMemory(m, region->key);
    }
    if (!ok) throw Error(Result::SystemError, where + " failed: " + endpoint_->lastError());
    region->withProvider = true;
  } else if (!endpoint_->prepareRegion(data, size)) {
    throw Error(Result::SystemError, where + " failed: " + endpoint_->lastError());
  }
  region->type = type;
  region->begin = begin;
  region->end = begin + size;
  region->references = 1;
  MemoryRegion* raw = region.get();
  regions_[key] = std::move(region);
  return raw;
}

void NetDevice::deregisterRegion(MemoryRegion* region) {
  const auto key = std::make_pair(region->begin, region->end);
  auto it = regions_.find(key);
  if (it == regions_.end() || it->second.get() != region)
    throw Error(Result::InvalidArgument, "deregMr: not a registration of this device");
  if (--region->references > 0) return;
  const auto* data = reinterpret_cast<const void*>(region->begin);
  if (region->withProvider)
    endpoint_->releaseMemory(data, region->end - region->begin);
  else
    endpoint_->releaseRegion(data, region->end - region->begin);
  region->magic = 0;
  regions_.erase(it);
}

void NetDevice::checkRegion(const void* mhandle, const void* data, size_t size,
                            const char* call) const {
  if (mhandle == nullptr) return;
  const auto* region = static_cast<const MemoryRegion*>(mhandle);
  const auto begin = reinterpret_cast<uintptr_t>(data);
  auto it = regions_.find(std::make_pair(region->begin, region->end));
  if (it == regions_.end() || it->second.get() != region || region->magic != MemoryRegion::kMagic)
    throw Error(Result::InvalidArgument,
                std::string(call) + ": mhandle is not a live registration of this device");
  if (begin < region->begin || begin + size > region->end)
    throw Error(Result::InvalidArgument, std::string(call) + ": buffer of " + std::to_string(size) +
                                             " bytes lies outside its mhandle's registration");
}

bool NetDevice::flushNeeded(const MemoryRegion& region) const {
  return flushReads_ && region.type == NCCL_PTR_CUDA && region.withProvider;
}

uint32_t NetDevice::selfPeer() {
  if (!selfPeer_) selfPeer_ = peer(endpoint_->localAddress(), localIdentity());
  return *selfPeer_;
}

void NetDevice::postFlushRead(const MemoryRegion& region, uintptr_t addr, size_t bytes,
                              transport::Transfer& t) {
  bytes = std::clamp<size_t>(bytes, 1, sizeof(flushTarget_));
  if (!flushTargetRegistered_) {
    transport::MemoryRegistration m;
    m.buf = flushTarget_;
    m.len = sizeof(flushTarget_);
    uint64_t unused = 0;
    if (!endpoint_->registerMemory(m, unused))
      throw Error(Result::SystemError,
                  "iflush: registering the flush buffer failed: " + endpoint_->lastError());
    flushTargetRegistered_ = true;
  }
  const uint32_t self = selfPeer();
  // The read goes through the NIC to the GPU buffer: PCIe lets no read pass the writes
  // before it, so when it completes the received bytes are in GPU memory (aws-ofi-nccl's
  // flush). A busy provider is given a few seconds: a NULL request would mean "done".
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    const transport::PostStatus st =
        endpoint_->postRead(self, flushTarget_, bytes, addr, region.begin, region.key, t);
    if (st == transport::PostStatus::Posted) return;
    if (st != transport::PostStatus::Retry || std::chrono::steady_clock::now() > deadline)
      throw Error(Result::SystemError,
                  "iflush: posting the flush read failed: " +
                      (st == transport::PostStatus::Retry ? std::string("provider busy for 5 s")
                                                          : endpoint_->lastError()));
    progress();
  }
}

}  // namespace sharc::nccl
