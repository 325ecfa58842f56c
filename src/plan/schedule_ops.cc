#include "schedule_ops.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "cluster_model.hpp"
#include "sharc/error.hpp"

namespace sharc::plan {

// Address space for the builders' pointer arithmetic: reserved, never touched.
class SimBuilder::Reservation {
 public:
  explicit Reservation(size_t bytes) : size_(std::max<size_t>(bytes, 4096)) {
    ptr_ = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ptr_ == MAP_FAILED)
      throw Error(Result::SystemError,
                  "simulate: cannot reserve " + std::to_string(size_) + " bytes of address space");
  }
  ~Reservation() { munmap(ptr_, size_); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  std::byte* at(size_t offset) const { return static_cast<std::byte*>(ptr_) + offset; }

 private:
  size_t size_;
  void* ptr_;
};

size_t simCountPerRank(Collective c, size_t bytes, int n) {
  return c == Collective::AllReduce ? bytes / kSimElem : bytes / static_cast<size_t>(n) / kSimElem;
}

SimBuilder::SimBuilder(const algo::NodeMap& map, Collective c, size_t bytes, algo::Algorithm a,
                       size_t chunkBytes)
    : map_(map), c_(c), a_(a) {
  const int n = map.size();
  const size_t count = simCountPerRank(c, bytes, n);
  const size_t block = count * kSimElem;
  const size_t sendBytes = c == Collective::ReduceScatter ? block * n : block;
  const size_t recvBytes = c == Collective::AllGather ? block * n : block;
  buffers_ = std::make_unique<Reservation>(sendBytes + recvBytes);
  args_.send = buffers_->at(0);
  args_.recv = buffers_->at(sendBytes);
  args_.count = count;
  args_.chunkBytes = chunkBytes;
  sendBytes_ = sendBytes;
  recvBytes_ = recvBytes;
}

SimBuilder::~SimBuilder() = default;

std::unique_ptr<algo::Schedule> SimBuilder::schedule(int rank) {
  algo::ScheduleContext ctx;
  ctx.scratch = &pool_;
  ctx.nodes = &map_;
  ctx.rank = rank;
  ctx.size = map_.size();
  ctx.commId = 1;
  ctx.seq = 1;
  ctx.type = DataType::Float32;
  ctx.op = RedOp::Sum;
  ctx.kind = c_;
  ctx.count = args_.count;
  ctx.algorithm = algo::algorithmName(a_);
  ctx.deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
  ctx.send = args_.send;
  ctx.recv = args_.recv;
  ctx.sendBytes = sendBytes_;
  ctx.recvBytes = recvBytes_;
  auto s = std::make_unique<algo::Schedule>(std::move(ctx));
  switch (c_) {
    case Collective::AllGather: algo::buildAllGather(*s, a_, args_); break;
    case Collective::ReduceScatter: algo::buildReduceScatter(*s, a_, args_); break;
    case Collective::AllReduce: algo::buildAllReduce(*s, a_, args_); break;
    default: break;
  }
  return s;
}

size_t SimBuilder::build(int rank, std::vector<algo::Schedule::OpInfo>* ops) {
  const std::unique_ptr<algo::Schedule> s = schedule(rank);
  if (ops == nullptr) return s->opCount();
  *ops = s->describeOps();
  return ops->size();
}

// Builds each rank's schedule in turn (one at a time: scratch is only reserved memory, but a
// schedule's operations are not small), keeping only what the replay needs.
SimOps buildSimOps(const algo::NodeMap& map, Collective c, size_t bytes, algo::Algorithm a,
                   size_t chunkBytes) {
  SimBuilder builder(map, c, bytes, a, chunkBytes);
  SimOps ops;
  ops.depBegin.push_back(0);
  std::vector<algo::Schedule::OpInfo> info;
  for (int r = 0; r < map.size(); ++r) {
    builder.build(r, &info);
    const auto first = static_cast<uint32_t>(ops.kind.size());
    ops.base.push_back(first);
    ops.pending.resize(first + info.size(), 0);
    for (const auto& op : info) {
      if (op.kind == algo::Schedule::OpKind::RemoteRead ||
          op.kind == algo::Schedule::OpKind::RemoteWrite)
        throw Error(Result::InvalidArgument,
                    "simulate: single-copy algorithms run on one host only, not over a fabric");
      ops.kind.push_back(op.kind);
      ops.peer.push_back(op.peer);
      ops.slot.push_back(op.slot);
      ops.bytes.push_back(static_cast<double>(op.bytes));
      for (auto d : op.dependents) {
        ops.deps.push_back(first + d);
        ++ops.pending[first + d];
      }
      ops.depBegin.push_back(static_cast<uint32_t>(ops.deps.size()));
    }
  }
  ops.base.push_back(static_cast<uint32_t>(ops.kind.size()));
  return ops;
}

}  // namespace sharc::plan
