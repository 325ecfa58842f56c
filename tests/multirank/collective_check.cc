#include "collective_check.hpp"

#include <cstring>
#include <sstream>
#include <vector>

#include "reference.hpp"

namespace sharc::testing {

const char* collName(Coll c) {
  switch (c) {
    case Coll::AllGather: return "allGather";
    case Coll::ReduceScatter: return "reduceScatter";
    case Coll::AllReduce: return "allReduce";
    case Coll::Broadcast: return "broadcast";
    default: break;
  }
  return "?";
}

std::string runAndCheck(Communicator& comm, Coll coll, DataType type, RedOp op, size_t count,
                        bool inPlace, int root) {
  const int n = comm.size(), r = comm.rank();
  const size_t elem = dataTypeSize(type);
  const size_t sendCount = coll == Coll::ReduceScatter ? count * n : count;
  const size_t recvCount = coll == Coll::AllGather ? count * n : count;
  // Guard bytes around the receive buffer catch writes out of bounds.
  constexpr size_t kGuard = 64;
  std::vector<unsigned char> recvStore(recvCount * elem + 2 * kGuard, 0xA5);
  unsigned char* recv = recvStore.data() + kGuard;
  std::vector<unsigned char> sendStore(sendCount * elem + 1);
  void* send = sendStore.data();
  const RedOp fillOp = (coll == Coll::AllGather || coll == Coll::Broadcast) ? RedOp::Sum : op;

  if (inPlace) {
    // In-place forms: the input lives inside the receive buffer (or is the same buffer).
    if (coll == Coll::AllGather) {
      send = recv + static_cast<size_t>(r) * count * elem;
      fillInput(send, type, fillOp, r, 0, count);
    } else if (coll == Coll::ReduceScatter) {
      recvStore.assign(sendCount * elem + 2 * kGuard, 0xA5);
      send = recvStore.data() + kGuard;
      fillInput(send, type, fillOp, r, 0, sendCount);
      recv = static_cast<unsigned char*>(send) + static_cast<size_t>(r) * count * elem;
    } else {
      send = recv;
      fillInput(send, type, fillOp, r, 0, count);
    }
  } else {
    fillInput(send, type, fillOp, r, 0, sendCount);
  }

  switch (coll) {
    case Coll::AllGather: comm.allGather(send, recv, count, type); break;
    case Coll::ReduceScatter: comm.reduceScatter(send, recv, count, type, op); break;
    case Coll::AllReduce: comm.allReduce(send, recv, count, type, op); break;
    case Coll::Broadcast: comm.broadcast(send, recv, count, type, root); break;
    default: break;
  }

  std::ostringstream errors;
  int bad = 0;
  for (size_t k = 0; k < recvCount; ++k) {
    double expected;
    if (coll == Coll::AllGather) {
      expected = inputValue(type, RedOp::Sum, static_cast<int>(k / count), k % count);
    } else if (coll == Coll::Broadcast) {
      expected = inputValue(type, RedOp::Sum, root, k);
    } else if (coll == Coll::ReduceScatter) {
      expected = expectedReduce(type, op, n, static_cast<size_t>(r) * count + k);
    } else {
      expected = expectedReduce(type, op, n, k);
    }
    const double got = loadElement(recv, type, k);
    if (!matches(got, expected, type, op) && bad++ < 5)
      errors << describeMismatch(k, got, expected) << "; ";
  }
  if (!inPlace || coll == Coll::AllGather || coll == Coll::AllReduce || coll == Coll::Broadcast) {
    for (size_t g = 0; g < kGuard; ++g) {
      if (recvStore[g] != 0xA5 || recvStore[kGuard + recvCount * elem + g] != 0xA5) {
        errors << "write outside the receive buffer; ";
        ++bad;
        break;
      }
    }
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os << collName(coll) << "(" << dataTypeName(type) << ", " << redOpName(op) << ", count " << count
     << (inPlace ? ", in-place" : "") << ") on rank " << r << " of " << n << ": " << bad
     << " wrong: " << errors.str();
  return os.str();
}

}  // namespace sharc::testing
