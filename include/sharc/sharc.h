/** \file
 * sharc's C API, shaped like NCCL's: a unique id exchanged by the caller, one communicator
 * per rank, and collectives on host memory. No C++ exception crosses this API: every call
 * returns a sharcResult_t, and sharcGetLastError() describes the last failure of the thread.
 */
#ifndef SHARC_SHARC_H_
#define SHARC_SHARC_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARC_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[SHARC_UNIQUE_ID_BYTES];
} sharcUniqueId;

typedef struct sharcComm* sharcComm_t;

/* In C++ the enums below get int as their fixed underlying type: a C caller may pass any int
 * (sharc rejects the unknown ones with sharcInvalidArgument), and without a fixed type a C++
 * enum whose value lies outside its enumerators' range is undefined behaviour (UBSan: "load
 * of value 77, which is not a valid value for type 'sharcDataType_t'"). */
#ifdef __cplusplus
#define SHARC_ENUM_BASE : int
#else
#define SHARC_ENUM_BASE
#endif

/** Result codes (values equal sharc::Result). */
typedef enum SHARC_ENUM_BASE {
  sharcSuccess = 0,
  sharcUnhandledSystemError = 1,
  sharcSystemError = 2,
  sharcInternalError = 3,
  sharcInvalidArgument = 4,
  sharcInvalidUsage = 5,
  sharcRemoteError = 6,
  sharcInProgress = 7,
  sharcTimeout = 8,
  sharcNumResults = 9
} sharcResult_t;

/** Element types (values equal NCCL's ncclDataType_t). */
typedef enum SHARC_ENUM_BASE {
  sharcInt8 = 0,
  sharcChar = 0,
  sharcUint8 = 1,
  sharcInt32 = 2,
  sharcInt = 2,
  sharcUint32 = 3,
  sharcInt64 = 4,
  sharcUint64 = 5,
  sharcFloat16 = 6,
  sharcHalf = 6,
  sharcFloat32 = 7,
  sharcFloat = 7,
  sharcFloat64 = 8,
  sharcDouble = 8,
  sharcBfloat16 = 9,
  sharcNumTypes = 10
} sharcDataType_t;

/** Reduction operators (values equal NCCL's ncclRedOp_t). */
typedef enum SHARC_ENUM_BASE {
  sharcSum = 0,
  sharcProd = 1,
  sharcMax = 2,
  sharcMin = 3,
  sharcAvg = 4,
  sharcNumOps = 5
} sharcRedOp_t;
#undef SHARC_ENUM_BASE

/** Library version as MAJOR*10000 + MINOR*100 + PATCH. */
sharcResult_t sharcGetVersion(int* version);
/** Creates an id on the calling process (which serves the rendezvous until the job is up). */
sharcResult_t sharcGetUniqueId(sharcUniqueId* uniqueId);
/** Collective over nranks processes: joins the job named by commId as rank. */
sharcResult_t sharcCommInitRank(sharcComm_t* comm, int nranks, sharcUniqueId commId, int rank);
/** Joins the job described by the environment (SHARC_ROOT..., torchrun's, Open MPI's). */
sharcResult_t sharcCommInitFromEnv(sharcComm_t* comm);
/** Collective over comm: ranks with the same color form *newcomm, ordered by key; a color
 *  of SHARC_SPLIT_NOCOLOR (any negative) gives *newcomm = NULL. */
#define SHARC_SPLIT_NOCOLOR (-1)
sharcResult_t sharcCommSplit(sharcComm_t comm, int color, int key, sharcComm_t* newcomm);
/** Frees the communicator (after a best-effort closing barrier with the other ranks; none
 *  after sharcCommAbort). */
sharcResult_t sharcCommDestroy(sharcComm_t comm);
/** Aborts the communicator, like NCCL's ncclCommAbort but without freeing it: every pending
 *  and later operation of comm (and of the communicators split from it) fails on this rank
 *  within about 100 ms, and the other ranks are told, so that theirs fail too instead of
 *  waiting for their timeout. Callable from any thread at any time, also while another thread
 *  is blocked in a call on comm (that call then returns an error naming the abort). Returns
 *  at once; aborting twice is harmless. sharcCommDestroy must still be called to free comm:
 *  after an abort it does not wait for the other ranks. */
sharcResult_t sharcCommAbort(sharcComm_t comm);
/** Writes this process's flight record (the last SHARC_TRACE_ENTRIES calls of comm's world:
 *  comm, the communicator it was split from and every split, with their state and, for calls
 *  in progress, the peer each waits on) as JSON to dir (NULL or "": SHARC_TRACE_DIR), in
 *  sharc-trace-<world key>-rank<world rank>.json; `sharc-trace DIR` analyses the records of
 *  all ranks. sharcInvalidArgument when no directory is given or set. */
sharcResult_t sharcCommDumpTrace(sharcComm_t comm, const char* dir);
sharcResult_t sharcCommCount(const sharcComm_t comm, int* count);
sharcResult_t sharcCommUserRank(const sharcComm_t comm, int* rank);

/** Blocking collectives with NCCL's buffer semantics (in-place forms included). */
sharcResult_t sharcAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             sharcDataType_t datatype, sharcComm_t comm);
sharcResult_t sharcReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 sharcDataType_t datatype, sharcRedOp_t op, sharcComm_t comm);
sharcResult_t sharcAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             sharcDataType_t datatype, sharcRedOp_t op, sharcComm_t comm);
sharcResult_t sharcBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             sharcDataType_t datatype, int root, sharcComm_t comm);
sharcResult_t sharcBarrier(sharcComm_t comm);

/** Host memory the node's other ranks can map (like ncclMemAlloc): collectives on one host
 *  copy between such buffers in user space. Free it with sharcMemFree. */
sharcResult_t sharcMemAlloc(void** ptr, size_t size);
sharcResult_t sharcMemFree(void* ptr);

/** Short description of a result code. */
const char* sharcGetErrorString(sharcResult_t result);
/** Message of the last failed call on this thread (names the rank, the call, the peer). */
const char* sharcGetLastError(sharcComm_t comm);

#ifdef __cplusplus
}
#endif

#endif  // SHARC_SHARC_H_
