#include "soak_check.hpp"

#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "reference.hpp"

namespace sharc::soak {

using testing::expectedReduce;
using testing::fillInput;
using testing::inputValue;
using testing::loadElement;
using testing::matches;

const char* collName(Coll c) {
  switch (c) {
    case Coll::AllGather: return "AllGather";
    case Coll::ReduceScatter: return "ReduceScatter";
    case Coll::AllReduce: return "AllReduce";
    case Coll::Broadcast: return "Broadcast";
    case Coll::Barrier: return "Barrier";
    default: break;
  }
  return "?";
}

Buffers::Buffers() : send(kCapacity + 2 * kGuard, 0), recv(kCapacity + 2 * kGuard, 0xA5) {}

namespace {

std::string describe(const Communicator& comm, const Call& c, long seq, const std::string& where) {
  std::ostringstream os;
  os << "rank " << comm.rank() << ": call #" << seq << " " << collName(c.coll) << "("
     << dataTypeName(c.type) << ", " << redOpName(c.op) << ", count " << c.count << ", inputs from "
     << c.first << (c.inPlace ? ", in-place" : "") << (c.polled ? ", polled" : "");
  if (c.coll == Coll::Broadcast) os << ", root " << c.root;
  os << ") on " << where << " (rank " << comm.rank() << " of " << comm.size() << ")";
  return os.str();
}

void complete(Request req, bool polled) {
  if (!polled) {
    req.wait();
    return;
  }
  // test() throws the operation's failure, its own timeout included: no endless loop.
  while (!req.test()) {
  }
}

}  // namespace

void runAndCheck(Communicator& comm, const Call& c, Buffers& b, long seq,
                 const std::string& where) {
  const int n = comm.size(), r = comm.rank();
  const size_t elem = dataTypeSize(c.type);
  const size_t sendCount = c.coll == Coll::ReduceScatter ? c.count * n : c.count;
  const size_t recvCount = c.coll == Coll::AllGather ? c.count * n : c.count;
  if (std::max(sendCount, recvCount) * elem > Buffers::kCapacity)
    throw std::logic_error(describe(comm, c, seq, where) + ": larger than the soak's buffers");
  if (c.coll == Coll::Barrier) {
    complete(comm.ibarrier(), c.polled);
    return;
  }
  const RedOp fillOp = (c.coll == Coll::AllGather || c.coll == Coll::Broadcast) ? RedOp::Sum : c.op;
  unsigned char* recvStore = b.recv.data();
  size_t storeBytes = recvCount * elem;
  unsigned char* recv = recvStore + Buffers::kGuard;
  const void* send = b.send.data();
  if (c.inPlace && c.coll == Coll::ReduceScatter) storeBytes = sendCount * elem;
  std::memset(recvStore, 0xA5, storeBytes + 2 * Buffers::kGuard);

  if (c.inPlace) {
    switch (c.coll) {
      case Coll::AllGather:
        send = recv + static_cast<size_t>(r) * c.count * elem;
        fillInput(recv + static_cast<size_t>(r) * c.count * elem, c.type, fillOp, r, c.first,
                  c.count);
        break;
      case Coll::ReduceScatter:
        fillInput(recv, c.type, fillOp, r, c.first, sendCount);
        send = recv;
        recv += static_cast<size_t>(r) * c.count * elem;
        break;
      default:
        if (c.coll != Coll::Broadcast || r == c.root)
          fillInput(recv, c.type, fillOp, r, c.first, c.count);
        send = recv;
    }
  } else if (c.coll != Coll::Broadcast || r == c.root) {
    fillInput(b.send.data(), c.type, fillOp, r, c.first, sendCount);
  }

  switch (c.coll) {
    case Coll::AllGather: complete(comm.iallGather(send, recv, c.count, c.type), c.polled); break;
    case Coll::ReduceScatter:
      complete(comm.ireduceScatter(send, recv, c.count, c.type, c.op), c.polled);
      break;
    case Coll::AllReduce:
      complete(comm.iallReduce(send, recv, c.count, c.type, c.op), c.polled);
      break;
    case Coll::Broadcast:
      complete(comm.ibroadcast(send, recv, c.count, c.type, c.root), c.polled);
      break;
    case Coll::Barrier: break;
    default: break;
  }

  // The top byte of element 0 (little endian): ints change by >= 64, floats' exponent flips.
  if (c.corrupt) recv[elem - 1] ^= 0x40;
  std::ostringstream errors;
  size_t bad = 0;
  for (size_t k = 0; k < recvCount; ++k) {
    double expected;
    switch (c.coll) {
      case Coll::AllGather:
        expected =
            inputValue(c.type, RedOp::Sum, static_cast<int>(k / c.count), c.first + k % c.count);
        break;
      case Coll::Broadcast: expected = inputValue(c.type, RedOp::Sum, c.root, c.first + k); break;
      case Coll::ReduceScatter:
        expected = expectedReduce(c.type, c.op, n, c.first + static_cast<size_t>(r) * c.count + k);
        break;
      default: expected = expectedReduce(c.type, c.op, n, c.first + k);
    }
    const double got = loadElement(recv, c.type, k);
    if (!matches(got, expected, c.type, c.op) && bad++ < 3)
      errors << testing::describeMismatch(k, got, expected) << "; ";
  }
  for (size_t g = 0; g < Buffers::kGuard; ++g) {
    if (recvStore[g] != 0xA5 || recvStore[Buffers::kGuard + storeBytes + g] != 0xA5) {
      errors << "a write outside the receive buffer; ";
      ++bad;
      break;
    }
  }
  if (bad > 0)
    throw std::runtime_error(describe(comm, c, seq, where) + ": " + std::to_string(bad) +
                             " wrong: " + errors.str());
}

}  // namespace sharc::soak
