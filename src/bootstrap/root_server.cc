// The rendezvous server: one thread polls the listening socket, connections still in the
// handshake ("pending") and the connections of joined ranks ("members"). See protocol.hpp for
// the wire format.
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <list>
#include <memory>
#include <sharc/error.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"
#include "core/log.hpp"

namespace sharc::bootstrap {
namespace {

using net::Clock;
using net::Deadline;
using net::Fd;
namespace proto = protocol;
using std::chrono::milliseconds;

constexpr size_t kMaxPending = 1024;        // handshakes in flight; more are refused
constexpr size_t kReadBudget = 256 * 1024;  // bytes read per connection per poll round
constexpr milliseconds kHandshakeLimit{2000};
constexpr milliseconds kAbortDrain{2000};  // time given to ranks to read an abort notice
constexpr milliseconds kStopDrain{500};

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

struct Pending {
  Fd fd;
  std::string peer;
  Deadline deadline;
  std::array<char, proto::kHelloBytes> buf{};
  size_t got = 0;
};

struct Member {
  Fd fd;
  std::string peer;
  bool joined = false;
  bool left = false;
  // Input: {u32 length, bytes} of the current round.
  std::array<char, 4> lenBuf{};
  size_t lenGot = 0;
  std::string blob;
  size_t blobGot = 0;
  bool blobReady = false;
  // Output: shared frames (a round's result is the same for everyone). A list, not a deque:
  // an empty std::deque allocates ~600 bytes, which a hello announcing 2^20 ranks multiplied
  // into 0.6 GB before any of them joined (found by tests/fuzz/fuzz_root_server.cc).
  std::list<std::shared_ptr<const std::string>> out;
  size_t outOff = 0;
  bool writeShut = false;

  bool hasInput() const { return blobReady || lenGot > 0; }
};

enum class Phase { Serving, Draining, Done };

class Server {
 public:
  Server(Fd listenFd, Fd wakeFd, uint64_t token, int nranks, milliseconds timeout, std::string name)
      : listen_(std::move(listenFd)),
        wake_(std::move(wakeFd)),
        token_(token),
        nranks_(nranks > 0 ? nranks : 0),
        // Clamped so that deadline arithmetic cannot overflow the steady clock.
        timeout_(std::clamp(timeout, milliseconds(1), milliseconds(100LL * 365 * 86400000))),
        handshakeLimit_(std::min(kHandshakeLimit, timeout_)),
        name_(std::move(name)) {
    members_.resize(static_cast<size_t>(nranks_));
  }

  void run() noexcept {
    try {
      loop();
    } catch (const std::exception& e) {
      SHARC_WARN(name_ << ": bootstrap root server stopped: " << e.what());
    } catch (...) {
      SHARC_WARN(name_ << ": bootstrap root server stopped by an unknown exception");
    }
    listen_.reset();
    pending_.clear();
    members_.clear();
  }

  void requestStop() noexcept {
    stop_.store(true);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t rc = ::write(wake_.get(), &one, sizeof(one));
  }

 private:
  enum class Kind { Wake, Listen, Pending, Member };
  struct Slot {
    Kind kind;
    size_t index;
    int fd;  // guards against a slot whose connection was replaced in the same round
  };

  void loop() {
    lastProgress_ = Clock::now();
    while (phase_ != Phase::Done) {
      std::vector<pollfd> fds;
      std::vector<Slot> slots;
      auto add = [&](int fd, short events, Kind kind, size_t index) {
        fds.push_back(pollfd{fd, events, 0});
        slots.push_back(Slot{kind, index, fd});
      };
      add(wake_.get(), POLLIN, Kind::Wake, 0);
      if (phase_ == Phase::Serving && listen_ && Clock::now() >= acceptPausedUntil_) {
        add(listen_.get(), POLLIN, Kind::Listen, 0);
      }
      for (size_t i = 0; i < pending_.size(); ++i)
        add(pending_[i].fd.get(), POLLIN, Kind::Pending, i);
      for (size_t r = 0; r < members_.size(); ++r) {
        const Member& m = members_[r];
        if (m.fd) add(m.fd.get(), POLLIN | (m.out.empty() ? 0 : POLLOUT), Kind::Member, r);
      }
      const int rc = ::poll(fds.data(), fds.size(), waitMs());
      if (rc < 0 && errno != EINTR) {
        throw Error(Result::SystemError, "poll failed: " + net::errnoString(errno));
      }
      for (size_t i = 0; rc > 0 && i < fds.size(); ++i) {
        if (fds[i].revents != 0) handle(slots[i], fds[i].revents);
      }
      std::erase_if(pending_, [](const Pending& p) { return !p.fd; });
      checkDeadlines();
    }
  }

  void handle(const Slot& slot, short revents) {
    switch (slot.kind) {
      case Kind::Wake: {
        uint64_t value = 0;
        [[maybe_unused]] ssize_t n = ::read(wake_.get(), &value, sizeof(value));
        if (stop_.load()) {
          // Destroying the server between rounds of a complete job, or before anyone joined
          // (an id that was never used), is routine, not a failure.
          bool between = (joined_ == nranks_ && round_ > 0) || joined_ == 0;
          for (const Member& m : members_) between = between && !m.hasInput();
          abort("the root server was shut down (RootServer destroyed)", kStopDrain, between);
          drainDeadline_ = std::min(drainDeadline_, Clock::now() + kStopDrain);
        }
        break;
      }
      case Kind::Listen:
        if (listen_) acceptAll();
        break;
      case Kind::Pending:
        if (slot.index < pending_.size() && pending_[slot.index].fd.get() == slot.fd) {
          readHello(pending_[slot.index]);
        }
        break;
      case Kind::Member: {
        if (slot.index >= members_.size() || members_[slot.index].fd.get() != slot.fd) break;
        const int rank = static_cast<int>(slot.index);
        if (revents & (POLLIN | POLLHUP | POLLERR)) readMember(rank);
        if ((revents & POLLOUT) && members_[slot.index].fd) writeMember(rank);
        break;
      }
    }
  }

  int waitMs() const {
    Deadline next = Deadline::max();
    for (const Pending& p : pending_) next = std::min(next, p.deadline);
    if (phase_ == Phase::Serving) next = std::min(next, lastProgress_ + timeout_);
    if (phase_ == Phase::Draining) next = std::min(next, drainDeadline_);
    if (acceptPausedUntil_ > Clock::now()) next = std::min(next, acceptPausedUntil_);
    return next == Deadline::max() ? -1 : net::remainingMs(next);
  }

  void acceptAll() {
    for (;;) {
      Fd fd = net::acceptNow(listen_.get());
      if (!fd) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // The listener stays readable; back off instead of spinning on it.
          SHARC_WARN(name_ << ": accept failed: " << net::errnoString(errno)
                           << "; pausing accepts for 100 ms");
          acceptPausedUntil_ = Clock::now() + milliseconds(100);
        }
        return;  // EAGAIN: nothing more pending; other errors concern one connection only
      }
      const std::string peer = net::peerAddress(fd.get()).toString();
      if (pending_.size() >= kMaxPending) {
        SHARC_WARN(name_ << ": refusing connection from " << peer << ": " << kMaxPending
                         << " handshakes already in progress");
        continue;
      }
      Pending p;
      p.fd = std::move(fd);
      p.peer = peer;
      p.deadline = Clock::now() + handshakeLimit_;
      pending_.push_back(std::move(p));
    }
  }

  // Closes a handshake connection, optionally telling the client why first.
  void reject(Pending& p, const std::string& why, bool notify) {
    SHARC_WARN(name_ << ": rejected connection from " << p.peer << ": " << why);
    if (notify) {
      const std::string frame = proto::abortFrame("connection rejected by the root: " + why);
      // Best effort: the frame is small and the socket buffer empty.
      [[maybe_unused]] ssize_t n =
          ::send(p.fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    p.fd.reset();
  }

  // Why a hello must be refused ("" when acceptable); *notify: whether to tell the client.
  std::string helloProblem(const proto::Hello& h, bool* notify) const {
    if (h.magic != proto::kHelloMagic) {
      *notify = false;  // not one of ours: say nothing
      return "bad magic (not a sharc bootstrap client)";
    }
    if (h.version != proto::kVersion) {
      return cat("protocol version ", h.version, ", expected ", proto::kVersion);
    }
    if (h.token != token_) return cat("wrong job token (rank ", h.rank, ", a different job?)");
    if (h.nranks < 1 || h.nranks > proto::kMaxRanks) return cat("invalid nranks ", h.nranks);
    if (nranks_ != 0 && h.nranks != nranks_) {
      return cat("nranks ", h.nranks, " differs from the job's ", nranks_);
    }
    if (h.rank < 0 || h.rank >= h.nranks) {
      return cat("rank ", h.rank, " out of range for nranks ", h.nranks);
    }
    if (nranks_ != 0 && members_[static_cast<size_t>(h.rank)].joined) {
      return cat("rank ", h.rank, " is already taken by ",
                 members_[static_cast<size_t>(h.rank)].peer);
    }
    return "";
  }

  void readHello(Pending& p) {
    const ssize_t n = ::recv(p.fd.get(), p.buf.data() + p.got, p.buf.size() - p.got, MSG_DONTWAIT);
    if (n == 0) return reject(p, "closed before sending a complete hello", false);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return reject(p, "receive failed: " + net::errnoString(errno), false);
    }
    p.got += static_cast<size_t>(n);
    if (p.got < p.buf.size()) return;
    const proto::Hello h = proto::Hello::decode(p.buf.data());
    bool notify = true;
    if (const std::string problem = helloProblem(h, &notify); !problem.empty()) {
      return reject(p, problem, notify);
    }
    if (nranks_ == 0) {
      nranks_ = h.nranks;
      members_.resize(static_cast<size_t>(nranks_));
    }
    Member& m = members_[static_cast<size_t>(h.rank)];
    m.fd = std::move(p.fd);
    m.peer = p.peer;
    m.joined = true;
    ++joined_;
    lastProgress_ = Clock::now();
    SHARC_TRACE(name_ << ": rank " << h.rank << " joined from " << m.peer << " (" << joined_
                      << " of " << nranks_ << ")");
    std::string ack;
    proto::putU32(ack, proto::kAckMagic);
    proto::putU32(ack, static_cast<uint32_t>(nranks_));
    m.out.push_back(std::make_shared<const std::string>(std::move(ack)));
    writeMember(h.rank);
  }

  std::string rankName(int rank) const {
    return cat("rank ", rank, " (", members_[static_cast<size_t>(rank)].peer, ")");
  }

  void readMember(int rank) {
    Member& m = members_[static_cast<size_t>(rank)];
    size_t budget = kReadBudget;
    while (m.fd && budget > 0) {
      char scratch[4096];
      char* dst = scratch;
      size_t want = sizeof(scratch);
      const bool discard = phase_ != Phase::Serving || m.blobReady;
      if (!discard && m.lenGot < 4) {
        dst = m.lenBuf.data() + m.lenGot;
        want = 4 - m.lenGot;
      } else if (!discard) {
        dst = m.blob.data() + m.blobGot;
        want = m.blob.size() - m.blobGot;
      }
      const ssize_t n = ::recv(m.fd.get(), dst, std::min(want, budget), MSG_DONTWAIT);
      if (n == 0) return leave(rank, "disconnected");
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return leave(rank, "connection failed (" + net::errnoString(errno) + ")");
      }
      budget -= static_cast<size_t>(n);
      if (phase_ != Phase::Serving) continue;  // draining: input is discarded
      if (m.blobReady) {
        return abort(cat(rankName(rank), " sent data for a new round before round ", round_ + 1,
                         " completed (protocol error)"),
                     kAbortDrain);
      }
      if (m.lenGot < 4) {
        m.lenGot += static_cast<size_t>(n);
        if (m.lenGot < 4) continue;
        const uint32_t length = proto::getU32(m.lenBuf.data());
        if (length > Bootstrap::kMaxBlobBytes) {
          m.fd.reset();
          return abort(cat(rankName(rank), " passed a ", length, "-byte blob to allGather round ",
                           round_ + 1, "; the limit is ", Bootstrap::kMaxBlobBytes, " bytes"),
                       kAbortDrain);
        }
        if (left_ > 0) {
          return abort(
              cat("round ", round_ + 1, " cannot complete: ", departed(), " already left the job"),
              kAbortDrain);
        }
        m.blob.assign(length, '\0');
        m.blobGot = 0;
      } else {
        m.blobGot += static_cast<size_t>(n);
      }
      if (m.blobGot == m.blob.size()) {
        m.blobReady = true;
        lastProgress_ = Clock::now();
        maybeCompleteRound();
      }
    }
  }

  void writeMember(int rank) {
    Member& m = members_[static_cast<size_t>(rank)];
    while (m.fd && !m.out.empty()) {
      const std::string& frame = *m.out.front();
      const ssize_t n = ::send(m.fd.get(), frame.data() + m.outOff, frame.size() - m.outOff,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        return leave(rank, "connection failed (" + net::errnoString(errno) + ")");
      }
      m.outOff += static_cast<size_t>(n);
      if (m.outOff == frame.size()) {
        m.out.pop_front();
        m.outOff = 0;
      }
    }
    if (m.fd && m.out.empty() && phase_ == Phase::Draining && !m.writeShut) {
      // Everything (ending with the abort notice) is sent: signal EOF, keep reading until
      // the rank closes so that its unread input cannot turn our close into a reset.
      ::shutdown(m.fd.get(), SHUT_WR);
      m.writeShut = true;
    }
  }

  void maybeCompleteRound() {
    if (joined_ < nranks_) return;
    for (const Member& m : members_) {
      if (!m.blobReady) return;
    }
    auto frame = std::make_shared<std::string>();
    size_t total = 12;
    for (const Member& m : members_) total += 4 + m.blob.size();
    frame->reserve(total);
    proto::putU32(*frame, proto::kRoundMagic);
    proto::putU32(*frame, round_);
    proto::putU32(*frame, static_cast<uint32_t>(nranks_));
    for (Member& m : members_) {
      proto::putU32(*frame, static_cast<uint32_t>(m.blob.size()));
      frame->append(m.blob);
      m.blob.clear();
      m.blob.shrink_to_fit();
      m.blobGot = 0;
      m.lenGot = 0;
      m.blobReady = false;
    }
    ++round_;
    lastProgress_ = Clock::now();
    SHARC_TRACE(name_ << ": round " << round_ << " complete (" << frame->size() << " bytes)");
    std::shared_ptr<const std::string> shared = std::move(frame);
    for (size_t r = 0; r < members_.size(); ++r) {
      members_[r].out.push_back(shared);
      writeMember(static_cast<int>(r));
    }
  }

  std::string departed() const {
    std::string out;
    for (size_t r = 0; r < members_.size(); ++r) {
      if (members_[r].left) out += (out.empty() ? "" : ", ") + rankName(static_cast<int>(r));
    }
    return out;
  }

  void leave(int rank, const std::string& how) {
    Member& m = members_[static_cast<size_t>(rank)];
    const bool inputPending = m.hasInput();
    m.fd.reset();
    m.out.clear();
    if (phase_ != Phase::Serving) return;
    m.left = true;
    ++left_;
    const std::string who = rankName(rank) + " " + how;
    if (joined_ < nranks_) {
      return abort(cat(who, " before all ranks joined (", joined_, " of ", nranks_, ")"),
                   kAbortDrain);
    }
    bool roundOpen = inputPending;
    for (const Member& other : members_) roundOpen = roundOpen || other.hasInput();
    if (round_ == 0 || roundOpen) {
      return abort(cat(who, " during allGather round ", round_ + 1), kAbortDrain);
    }
    if (left_ == nranks_) {
      SHARC_TRACE(name_ << ": job finished after " << round_ << " rounds");
      phase_ = Phase::Done;
      return;
    }
    SHARC_TRACE(name_ << ": " << who << " after round " << round_);
  }

  // Fails the job: every connected rank gets its pending results, then the reason.
  void abort(const std::string& reason, milliseconds drain, bool quiet = false) {
    if (phase_ != Phase::Serving) return;
    if (quiet) {
      SHARC_TRACE(name_ << ": stopped after " << round_ << " rounds: " << reason);
    } else {
      SHARC_WARN(name_ << ": bootstrap job aborted: " << reason);
    }
    phase_ = Phase::Draining;
    drainDeadline_ = Clock::now() + drain;
    listen_.reset();
    for (Pending& p : pending_) p.fd.reset();
    auto frame = std::make_shared<const std::string>(proto::abortFrame(reason));
    for (size_t r = 0; r < members_.size(); ++r) {
      if (!members_[r].fd) continue;
      members_[r].out.push_back(frame);
      writeMember(static_cast<int>(r));
    }
  }

  // Reads whatever input is queued, then closes: closing with unread input would send a
  // reset, which can destroy the abort notice before the rank reads it.
  static void closeQuietly(Member& m) {
    char scratch[4096];
    while (::recv(m.fd.get(), scratch, sizeof(scratch), MSG_DONTWAIT) > 0) {
    }
    m.fd.reset();
  }

  std::string timeoutReason() const {
    std::string missing;
    int count = 0;
    for (size_t r = 0; r < members_.size(); ++r) {
      const bool waiting = joined_ < nranks_ ? !members_[r].joined : !members_[r].blobReady;
      if (!waiting || members_[r].left) continue;
      if (++count <= 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (count > 16) missing += ", ... (" + std::to_string(count) + " in all)";
    const std::string ms = cat(timeout_.count(), " ms");
    if (nranks_ == 0) return "no rank joined within " + ms;
    if (joined_ < nranks_) {
      return cat("timed out after ", ms, " waiting for ranks to join (", joined_, " of ", nranks_,
                 " joined; missing: ", missing, ")");
    }
    return cat("no progress for ", ms, " in allGather round ", round_ + 1,
               " (waiting for ranks: ", missing, ")");
  }

  void checkDeadlines() {
    const Deadline now = Clock::now();
    for (Pending& p : pending_) {
      if (p.fd && now >= p.deadline) {
        reject(p, cat("no complete hello within ", handshakeLimit_.count(), " ms"), false);
      }
    }
    std::erase_if(pending_, [](const Pending& p) { return !p.fd; });
    if (phase_ == Phase::Serving && now >= lastProgress_ + timeout_) {
      abort(timeoutReason(), kAbortDrain);
    }
    if (phase_ == Phase::Draining && stop_.load()) {
      // Being destroyed: do not wait for idle ranks to hang up once they have everything.
      for (Member& m : members_) {
        if (m.fd && m.writeShut) closeQuietly(m);
      }
    }
    if (phase_ == Phase::Draining) {
      const bool anyOpen = std::any_of(members_.begin(), members_.end(),
                                       [](const Member& m) { return m.fd.valid(); });
      if (!anyOpen || now >= drainDeadline_) phase_ = Phase::Done;
    }
  }

  Fd listen_;
  Fd wake_;
  const uint64_t token_;
  int nranks_;
  const milliseconds timeout_;
  const milliseconds handshakeLimit_;
  const std::string name_;
  std::atomic<bool> stop_{false};

  Phase phase_ = Phase::Serving;
  std::vector<Pending> pending_;
  std::vector<Member> members_;
  int joined_ = 0;
  int left_ = 0;
  uint32_t round_ = 0;  // completed rounds
  Deadline lastProgress_{};
  Deadline drainDeadline_ = Deadline::max();
  Deadline acceptPausedUntil_{};
};

class RootServerImpl final : public RootServer {
 public:
  RootServerImpl(std::shared_ptr<Server> server, RootAddress address)
      : server_(std::move(server)), address_(std::move(address)) {
    // The thread holds its own reference so that a detached server outlives this object.
    thread_ = std::thread([server = server_] {
      pthread_setname_np(pthread_self(), "sharc-root");  // named for ps, gdb and leak checks
      server->run();
    });
  }
  ~RootServerImpl() override {
    if (thread_.joinable()) {
      server_->requestStop();
      thread_.join();
    }
  }
  RootAddress address() const override { return address_; }
  void detach() override {
    if (thread_.joinable()) thread_.detach();
  }

 private:
  std::shared_ptr<Server> server_;
  RootAddress address_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<RootServer> RootServer::start(const std::string& host, uint16_t port,
                                              uint64_t token, int nranks,
                                              std::chrono::milliseconds timeout) {
  if (nranks > protocol::kMaxRanks) {
    throw Error(Result::InvalidArgument, "RootServer::start: nranks " + std::to_string(nranks) +
                                             " exceeds " + std::to_string(protocol::kMaxRanks));
  }
  Fd listenFd = net::listenOn(host, port);
  Fd wakeFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wakeFd) {
    throw Error(Result::SystemError,
                "bootstrap: RootServer: eventfd failed: " + net::errnoString(errno));
  }
  const net::SockAddr bound = net::localAddress(listenFd.get());
  RootAddress address;
  address.host = bound.host();
  address.port = bound.port();
  address.token = token;
  if (address.host == "0.0.0.0" || address.host == "::") address.host = localAdvertiseAddress();
  auto server = std::make_shared<Server>(std::move(listenFd), std::move(wakeFd), token, nranks,
                                         timeout, "bootstrap root " + address.toString());
  SHARC_TRACE("bootstrap: root server listening on " << address.toString());
  return std::make_unique<RootServerImpl>(std::move(server), std::move(address));
}

}  // namespace sharc::bootstrap
