// Bootstrap client: one TCP connection to the root server (see protocol.hpp).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <sharc/error.hpp>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"
#include "core/log.hpp"

namespace sharc::bootstrap {
namespace {

using net::Deadline;
using net::Fd;
using net::IoResult;
namespace proto = protocol;
using std::chrono::milliseconds;

std::string msText(milliseconds timeout) {
  return std::to_string(timeout.count()) + " ms";
}

class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(Fd fd, RootAddress root, int rank, int nranks, milliseconds timeout)
      : fd_(std::move(fd)),
        root_(std::move(root)),
        rank_(rank),
        nranks_(nranks),
        timeout_(timeout) {}

  int rank() const override { return rank_; }
  int size() const override { return nranks_; }

  std::vector<std::string> allGather(const std::string& blob) override {
    if (broken_) {
      throw Error(broken_->code(),
                  prefix() + "unusable after an earlier failure (" + brokenWhy_ + ")");
    }
    const std::string round = "allGather round " + std::to_string(round_ + 1);
    const Deadline deadline = net::deadlineAfter(timeout_);
    std::string header;
    proto::putU32(header, static_cast<uint32_t>(std::min<size_t>(blob.size(), UINT32_MAX)));
    if (blob.size() > kMaxBlobBytes) {
      // Announce the size anyway: the root then fails the job for every rank at once instead
      // of leaving the others waiting for this blob until they time out.
      net::sendAll(fd_.get(), header.data(), header.size(), deadline);
      fail(Result::InvalidArgument, round + ": blob of " + std::to_string(blob.size()) +
                                        " bytes exceeds the limit of " +
                                        std::to_string(kMaxBlobBytes) + " bytes");
    }
    int err = 0;
    IoResult io = net::sendAll(fd_.get(), header.data(), header.size(), deadline, &err);
    if (io == IoResult::Ok) io = net::sendAll(fd_.get(), blob.data(), blob.size(), deadline, &err);
    if (io != IoResult::Ok) {
      if (io == IoResult::Timeout) {
        fail(Result::Timeout, round + ": timed out after " + msText(timeout_) +
                                  " sending to root " + root_.toString());
      }
      // The root may have closed after sending an abort notice: prefer its explanation.
      readReply(round, net::deadlineAfter(milliseconds(200)), /*afterSendFailure=*/true);
      fail(io == IoResult::Closed ? Result::RemoteError : Result::SystemError,
           round + ": lost the connection to root " + root_.toString() + " (" +
               net::errnoString(err) + ")");
    }
    std::vector<std::string> blobs = readReply(round, deadline, false);
    ++round_;
    return blobs;
  }

 private:
  std::string prefix() const { return "rank " + std::to_string(rank_) + ": bootstrap: "; }

  [[noreturn]] void fail(Result code, const std::string& message) {
    brokenWhy_ = message;
    broken_.emplace(code, prefix() + message);
    fd_.reset();
    throw *broken_;
  }

  // Receives exactly n bytes or fails with a message naming the round and the root.
  void recvOrFail(void* data, size_t n, Deadline deadline, const std::string& round) {
    int err = 0;
    switch (net::recvAll(fd_.get(), data, n, deadline, &err)) {
      case IoResult::Ok: return;
      case IoResult::Timeout:
        fail(Result::Timeout, round + ": timed out after " + msText(timeout_) +
                                  " waiting for the other ranks via root " + root_.toString());
      case IoResult::Closed:
        fail(Result::RemoteError,
             round + ": root " + root_.toString() + " closed the connection" +
                 (err != 0 ? " (" + net::errnoString(err) + ")" : std::string()) +
                 "; another rank failed or the root server stopped");
      case IoResult::Error: break;
    }
    fail(Result::SystemError,
         round + ": receiving from root " + root_.toString() + " failed: " + net::errnoString(err));
  }

  uint32_t recvU32(Deadline deadline, const std::string& round) {
    char buf[4];
    recvOrFail(buf, sizeof(buf), deadline, round);
    return proto::getU32(buf);
  }

  // Reads the root's answer to a round: all blobs, or an abort notice (thrown as RemoteError).
  // After a failed send only an abort notice is looked for; returns empty otherwise.
  std::vector<std::string> readReply(const std::string& round, Deadline deadline,
                                     bool afterSendFailure) {
    char magicBuf[4];
    if (afterSendFailure) {
      if (net::recvAll(fd_.get(), magicBuf, 4, deadline) != IoResult::Ok ||
          proto::getU32(magicBuf) != proto::kAbortMagic) {
        return {};
      }
    } else {
      recvOrFail(magicBuf, 4, deadline, round);
    }
    const uint32_t magic = proto::getU32(magicBuf);
    if (magic == proto::kAbortMagic) {
      const uint32_t length = recvU32(deadline, round);
      if (length > proto::kMaxAbortText) {
        fail(Result::SystemError, round + ": malformed abort notice from root " + root_.toString());
      }
      std::string text(length, '\0');
      recvOrFail(text.data(), length, deadline, round);
      fail(Result::RemoteError, round + " failed: root " + root_.toString() + " reports: " + text);
    }
    if (magic != proto::kRoundMagic) {
      fail(Result::SystemError,
           round + ": protocol error: unexpected frame from root " + root_.toString());
    }
    const uint32_t serverRound = recvU32(deadline, round);
    const uint32_t count = recvU32(deadline, round);
    if (serverRound != round_ || count != static_cast<uint32_t>(nranks_)) {
      fail(Result::SystemError, round + ": protocol error: root " + root_.toString() +
                                    " answered round " + std::to_string(serverRound + 1) +
                                    " with " + std::to_string(count) + " ranks (expected " +
                                    std::to_string(nranks_) + ")");
    }
    std::vector<std::string> blobs(static_cast<size_t>(nranks_));
    for (std::string& b : blobs) {
      const uint32_t length = recvU32(deadline, round);
      if (length > kMaxBlobBytes) {
        fail(Result::SystemError,
             round + ": protocol error: oversized blob from root " + root_.toString());
      }
      b.resize(length);
      recvOrFail(b.data(), length, deadline, round);
    }
    return blobs;
  }

  Fd fd_;
  const RootAddress root_;
  const int rank_;
  const int nranks_;
  const milliseconds timeout_;
  uint32_t round_ = 0;
  std::optional<Error> broken_;  // the first failure; later calls repeat it
  std::string brokenWhy_;
};

std::string clientPrefix(int rank) {
  return "rank " + std::to_string(rank) + ": bootstrap: ";
}

void checkClientArgs(int rank, int nranks, milliseconds timeout) {
  const std::string prefix = clientPrefix(rank);
  if (nranks < 1 || nranks > proto::kMaxRanks || rank < 0 || rank >= nranks) {
    throw Error(Result::InvalidArgument, prefix + "invalid rank " + std::to_string(rank) +
                                             " of nranks " + std::to_string(nranks) +
                                             ": expected 0 <= rank < nranks");
  }
  if (timeout.count() <= 0) {
    throw Error(Result::InvalidArgument,
                prefix + "timeout " + msText(timeout) + " is not positive");
  }
}

}  // namespace

std::unique_ptr<Bootstrap> connectToRoot(const RootAddress& root, int rank, int nranks,
                                         std::chrono::milliseconds timeout) {
  checkClientArgs(rank, nranks, timeout);
  const std::string prefix = clientPrefix(rank);
  const std::string where = root.toString();
  const Deadline deadline = net::deadlineAfter(timeout);
  std::string error;
  bool timedOut = false;
  Fd fd = net::connectWithRetry(root.host, root.port, deadline, &error, &timedOut);
  if (!fd) {
    if (timedOut) {
      throw Error(Result::Timeout, prefix + "could not connect to root " + where + " within " +
                                       msText(timeout) + ": " + error);
    }
    throw Error(Result::SystemError, prefix + "could not connect to root " + where + ": " + error);
  }
  return joinRoot(fd.release(), root, rank, nranks, timeout, deadline);
}

std::unique_ptr<Bootstrap> joinRoot(int socket, const RootAddress& root, int rank, int nranks,
                                    std::chrono::milliseconds timeout,
                                    std::chrono::steady_clock::time_point deadline) {
  Fd fd(socket);
  checkClientArgs(rank, nranks, timeout);
  const std::string prefix = clientPrefix(rank);
  const std::string where = root.toString();
  proto::Hello hello;
  hello.token = root.token;
  hello.rank = rank;
  hello.nranks = nranks;
  const std::string bytes = hello.encode();
  int err = 0;
  IoResult io = net::sendAll(fd.get(), bytes.data(), bytes.size(), deadline, &err);
  char reply[8];
  if (io == IoResult::Ok) io = net::recvAll(fd.get(), reply, sizeof(reply), deadline, &err);
  if (io == IoResult::Timeout) {
    throw Error(Result::Timeout,
                prefix + "root " + where + " did not answer the hello within " + msText(timeout));
  }
  if (io == IoResult::Closed) {
    throw Error(Result::SystemError, prefix + "root " + where +
                                         " closed the connection during the handshake (not a "
                                         "sharc bootstrap root, or its job already ended)");
  }
  if (io == IoResult::Error) {
    throw Error(Result::SystemError,
                prefix + "handshake with root " + where + " failed: " + net::errnoString(err));
  }
  const uint32_t magic = proto::getU32(reply);
  const uint32_t value = proto::getU32(reply + 4);
  if (magic == proto::kAbortMagic) {
    std::string text(std::min<size_t>(value, proto::kMaxAbortText), '\0');
    if (net::recvAll(fd.get(), text.data(), text.size(), deadline) != IoResult::Ok) text.clear();
    throw Error(Result::InvalidUsage, prefix + "root " + where + " rejected rank " +
                                          std::to_string(rank) + " of " + std::to_string(nranks) +
                                          ": " + (text.empty() ? "no reason given" : text));
  }
  if (magic != proto::kAckMagic || value != static_cast<uint32_t>(nranks)) {
    throw Error(Result::SystemError,
                prefix + "protocol error: unexpected handshake reply from root " + where);
  }
  SHARC_TRACE(prefix << "joined root " << where << " as rank " << rank << " of " << nranks);
  return std::make_unique<TcpBootstrap>(std::move(fd), root, rank, nranks, timeout);
}

}  // namespace sharc::bootstrap
