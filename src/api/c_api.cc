// The C API: validates handles, forwards to the C++ API and catches every exception.
#include <sharc/sharc.h>

#include <cstring>
#include <mutex>
#include <new>
#include <sharc/communicator.hpp>
#include <sharc/memory.hpp>
#include <string>
#include <unordered_set>

struct sharcComm {
  std::shared_ptr<sharc::Communicator> comm;
};

namespace {

static_assert(static_cast<int>(sharc::DataType::BFloat16) == sharcBfloat16);
static_assert(static_cast<int>(sharc::DataType::Float32) == sharcFloat32);
static_assert(static_cast<int>(sharc::RedOp::Avg) == sharcAvg);
static_assert(static_cast<int>(sharc::Result::Timeout) == sharcTimeout);
static_assert(sizeof(sharcUniqueId) == sharc::UniqueId::kBytes);

thread_local std::string lastError;

// Live handles, so that a destroyed or bogus communicator is an error instead of a crash.
std::mutex liveMutex;
std::unordered_set<const sharcComm*> live;

sharcResult_t fail(sharcResult_t code, std::string message) {
  lastError = std::move(message);
  return code;
}

template <typename F>
sharcResult_t guarded(F&& body) {
  try {
    body();
    return sharcSuccess;
  } catch (const sharc::Error& e) {
    return fail(static_cast<sharcResult_t>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(sharcSystemError, "out of memory");
  } catch (const std::exception& e) {
    return fail(sharcInternalError, e.what());
  } catch (...) {
    return fail(sharcInternalError, "unknown exception");
  }
}

// A reference of its own for the call: sharcCommDestroy on another thread (after
// sharcCommAbort, say) frees the handle but not the communicator a call is still inside.
std::shared_ptr<sharc::Communicator> get(const sharcComm* comm, const char* call) {
  std::lock_guard<std::mutex> lock(liveMutex);
  if (comm == nullptr || live.count(comm) == 0)
    throw sharc::Error(sharc::Result::InvalidUsage,
                       std::string(call) + ": communicator is null or was destroyed");
  return comm->comm;
}

sharcComm_t adopt(std::shared_ptr<sharc::Communicator> c) {
  auto* handle = new sharcComm{std::move(c)};
  std::lock_guard<std::mutex> lock(liveMutex);
  live.insert(handle);
  return handle;
}

void requireOut(const void* p, const char* call) {
  if (p == nullptr)
    throw sharc::Error(sharc::Result::InvalidArgument,
                       std::string(call) + ": output pointer is null");
}

}  // namespace

extern "C" {

sharcResult_t sharcGetVersion(int* version) {
  return guarded([&] {
    requireOut(version, "sharcGetVersion");
    *version = 0 * 10000 + 1 * 100 + 0;
  });
}

sharcResult_t sharcGetUniqueId(sharcUniqueId* uniqueId) {
  return guarded([&] {
    requireOut(uniqueId, "sharcGetUniqueId");
    const sharc::UniqueId id = sharc::makeUniqueId();
    std::memcpy(uniqueId->internal, id.bytes.data(), sizeof(uniqueId->internal));
  });
}

sharcResult_t sharcCommInitRank(sharcComm_t* comm, int nranks, sharcUniqueId commId, int rank) {
  return guarded([&] {
    requireOut(comm, "sharcCommInitRank");
    *comm = nullptr;
    sharc::UniqueId id;
    std::memcpy(id.bytes.data(), commId.internal, sizeof(commId.internal));
    *comm = adopt(sharc::Communicator::create(id, nranks, rank));
  });
}

sharcResult_t sharcCommInitFromEnv(sharcComm_t* comm) {
  return guarded([&] {
    requireOut(comm, "sharcCommInitFromEnv");
    *comm = nullptr;
    *comm = adopt(sharc::Communicator::createFromEnvironment());
  });
}

sharcResult_t sharcCommSplit(sharcComm_t comm, int color, int key, sharcComm_t* newcomm) {
  return guarded([&] {
    requireOut(newcomm, "sharcCommSplit");
    *newcomm = nullptr;
    auto child = get(comm, "sharcCommSplit")->split(color, key);
    if (child) *newcomm = adopt(std::move(child));
  });
}

sharcResult_t sharcCommDestroy(sharcComm_t comm) {
  return guarded([&] {
    {
      std::lock_guard<std::mutex> lock(liveMutex);
      if (comm == nullptr || live.erase(comm) == 0)
        throw sharc::Error(sharc::Result::InvalidUsage,
                           "sharcCommDestroy: communicator is null or was destroyed");
    }
    comm->comm->destroy();
    delete comm;
  });
}

sharcResult_t sharcCommAbort(sharcComm_t comm) {
  return guarded([&] { get(comm, "sharcCommAbort")->abort("aborted by sharcCommAbort"); });
}

sharcResult_t sharcCommDumpTrace(sharcComm_t comm, const char* dir) {
  return guarded([&] { get(comm, "sharcCommDumpTrace")->dumpTrace(dir == nullptr ? "" : dir); });
}

sharcResult_t sharcCommCount(const sharcComm_t comm, int* count) {
  return guarded([&] {
    requireOut(count, "sharcCommCount");
    *count = get(comm, "sharcCommCount")->size();
  });
}

sharcResult_t sharcCommUserRank(const sharcComm_t comm, int* rank) {
  return guarded([&] {
    requireOut(rank, "sharcCommUserRank");
    *rank = get(comm, "sharcCommUserRank")->rank();
  });
}

sharcResult_t sharcAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             sharcDataType_t datatype, sharcComm_t comm) {
  return guarded([&] {
    get(comm, "sharcAllGather")
        ->allGather(sendbuff, recvbuff, sendcount, static_cast<sharc::DataType>(datatype));
  });
}

sharcResult_t sharcReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 sharcDataType_t datatype, sharcRedOp_t op, sharcComm_t comm) {
  return guarded([&] {
    get(comm, "sharcReduceScatter")
        ->reduceScatter(sendbuff, recvbuff, recvcount, static_cast<sharc::DataType>(datatype),
                        static_cast<sharc::RedOp>(op));
  });
}

sharcResult_t sharcAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             sharcDataType_t datatype, sharcRedOp_t op, sharcComm_t comm) {
  return guarded([&] {
    get(comm, "sharcAllReduce")
        ->allReduce(sendbuff, recvbuff, count, static_cast<sharc::DataType>(datatype),
                    static_cast<sharc::RedOp>(op));
  });
}

sharcResult_t sharcBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             sharcDataType_t datatype, int root, sharcComm_t comm) {
  return guarded([&] {
    get(comm, "sharcBroadcast")
        ->broadcast(sendbuff, recvbuff, count, static_cast<sharc::DataType>(datatype), root);
  });
}

sharcResult_t sharcBarrier(sharcComm_t comm) {
  return guarded([&] { get(comm, "sharcBarrier")->barrier(); });
}

sharcResult_t sharcMemAlloc(void** ptr, size_t size) {
  return guarded([&] {
    if (ptr == nullptr)
      throw sharc::Error(sharc::Result::InvalidArgument, "sharcMemAlloc: ptr is null");
    *ptr = sharc::allocShared(size);
  });
}

sharcResult_t sharcMemFree(void* ptr) {
  return guarded([&] { sharc::freeShared(ptr); });
}

const char* sharcGetErrorString(sharcResult_t result) {
  if (result < sharcSuccess || result >= sharcNumResults) return "unknown result code";
  return sharc::resultString(static_cast<sharc::Result>(result));
}

const char* sharcGetLastError(sharcComm_t) {
  return lastError.c_str();
}

}  // extern "C"
