// CommState: a communicator's tag space and control channel (abort notices; stall probes are
// in stall_probe.cc).
#include "runtime/comm_state.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/config.hpp"
#include "core/log.hpp"
#include "runtime/request_state.hpp"

namespace sharc::detail {
namespace {
// Control messages carry their sender's rank in their first kRankBytes bytes and kControlRank
// in the tag's rank field, so that the control receive need not ignore the rank bits (see
// postControlRecv).
constexpr size_t kRankBytes = sizeof(uint32_t);
constexpr uint32_t kControlRank = 0;
}  // namespace

CommState::CommState(std::shared_ptr<Engine> e, uint32_t commId, int r, std::vector<uint32_t> p,
                     std::vector<int32_t> pidList, algo::NodeMap n, std::chrono::milliseconds t,
                     algo::AlgorithmOverride a)
    : engine(std::move(e)),
      id(commId),
      rank(r),
      size(static_cast<int>(p.size())),
      peers(std::move(p)),
      pids(std::move(pidList)),
      nodes(std::move(n)),
      timeout(t),
      algos(a),
      recorder(core::Config::get().traceEntries) {
  controlRecv_.owner = this;
}

CommState::~CommState() = default;

void CommState::start() {
  engine->usedCommIds.set(id);
  engine->comms.push_back(this);
  postControlRecv();
  if (!controlPosted_)
    SHARC_WARN("rank " << rank
                       << ": could not post the control receive; peers' failures "
                          "will surface as timeouts");
}

void CommState::postControlRecv() {
  // Every sender's control message matches with the signature ignored alone, as in every
  // other receive: libfabric's shm provider before 1.19 matches a receive against messages
  // that came before it with the ignore mask of whichever receive last used the queue entry,
  // so a wider mask here (any rank, any sequence) let later receives take another rank's
  // message, and the receive meant for it never completed.
  const uint64_t tag =
      algo::tag::make(algo::tag::base(id, 0, 0), kControlRank, algo::tag::kControlSlot);
  if (engine->endpoint().postRecv(transport::kAnyPeer, tag, algo::tag::kSigMask, controlBuf_,
                                  sizeof(controlBuf_) - 1,
                                  controlRecv_) == transport::PostStatus::Posted) {
    ++posted_;
    controlPosted_ = true;
  }
}

void CommState::sendControl(int peer, std::string bytes) {
  reapControlSends();
  controlSends_.emplace_back();
  ControlSend& s = controlSends_.back();
  s.transfer.owner = this;
  const auto from = static_cast<uint32_t>(rank);
  s.bytes.assign(reinterpret_cast<const char*>(&from), kRankBytes);
  s.bytes += bytes;
  s.peer = peer;
  ++unposted_;
  postControlSend(std::prev(controlSends_.end()));
}

void CommState::postControlSend(std::list<ControlSend>::iterator s) {
  const uint64_t tag =
      algo::tag::make(algo::tag::base(id, 0, 0), kControlRank, algo::tag::kControlSlot);
  const auto st = engine->endpoint().postSend(peers[s->peer], tag, s->bytes.data(), s->bytes.size(),
                                              s->transfer);
  if (st == transport::PostStatus::Retry) {
    // The provider cannot take it yet (over tcp: the connection to a peer this rank has not
    // talked to is being made). A lost abort notice would leave that peer to its timeout.
    engine->controlPending(this);
    return;
  }
  --unposted_;
  if (st == transport::PostStatus::Posted) {
    s->posted = true;
    ++posted_;
    return;
  }
  if (st == transport::PostStatus::Failed)
    SHARC_INFO("rank " << rank << ": control message to rank " << s->peer
                       << " not sent: " << engine->endpoint().lastError());
  s->done = true;  // completed at once (injected), or could not be sent
}

std::string CommState::controlState() const {
  return std::to_string(posted_ - (controlPosted_ ? 1 : 0)) + " control sends in flight, " +
         std::to_string(unposted_) + " not yet posted, control receive " +
         (controlPosted_ ? "still posted" : "closed");
}

void CommState::reapControlSends() {
  std::erase_if(controlSends_, [](const ControlSend& s) { return s.done; });
}

void CommState::retryControlSends() {
  if (unposted_ == 0) return;
  for (auto it = controlSends_.begin(); it != controlSends_.end(); ++it)
    if (!it->posted && !it->done) postControlSend(it);
}

void CommState::abort(const std::string& reason, Result code) {
  if (aborted) return;
  aborted = true;
  abortCode = code;
  abortMessage = "communicator aborted by this rank: " + reason;
  const std::string notice = "A" + reason.substr(0, sizeof(controlBuf_) - 3 - kRankBytes);
  for (int peer = 0; peer < size; ++peer)
    if (peer != rank) sendControl(peer, notice);
  engine->failActive(this, Result::RemoteError, abortMessage);
}

void CommState::close() {
  if (controlPosted_) engine->endpoint().cancel(controlRecv_);
  // An aborted communicator's id stays taken on this endpoint: messages of its failed
  // operations may still wait here unmatched, and a communicator reusing the id (its sequences
  // start again at 1) would take them for its own.
  if (!aborted) engine->usedCommIds.reset(id);
  std::erase(engine->comms, this);
}

void CommState::onTransferDone(transport::Transfer& t, size_t bytes, uint64_t) {
  --posted_;
  if (&t != &controlRecv_) {  // a control message we sent
    for (ControlSend& s : controlSends_)
      if (&s.transfer == &t) s.done = true;
    return;
  }
  controlPosted_ = false;
  // Handled after polling (a completion callback must not post or write files).
  // A message too short to name its sender is dropped (serviceControl posts the receive
  // again).
  bytes = std::min(bytes, sizeof(controlBuf_) - 1);
  if (bytes >= kRankBytes) {
    uint32_t from = 0;
    std::memcpy(&from, controlBuf_, kRankBytes);
    inbox_.emplace_back(static_cast<int>(from),
                        std::string(controlBuf_ + kRankBytes, bytes - kRankBytes));
  }
  engine->controlPending(this);
}

void CommState::serviceControl() {
  std::vector<std::pair<int, std::string>> inbox;
  inbox.swap(inbox_);
  for (auto& [from, msg] : inbox) {
    const char type = msg.empty() ? 'A' : msg[0];
    const std::string body = msg.empty() ? msg : msg.substr(1);
    if (type == 'Q') {
      answerProbe(from, body);
    } else if (type == 'R') {
      readReply(from, body);
    } else if (!aborted) {  // 'A': a peer's failure or abort
      aborted = true;
      abortCode = Result::RemoteError;
      abortMessage = "rank " + std::to_string(from) + " aborted the communicator: " + body;
      SHARC_WARN("rank " << rank << ": " << abortMessage);
      engine->failActive(this, Result::RemoteError, abortMessage);
      if (!dumped) {
        dumped = true;
        engine->requestDump("peer-failure", abortMessage);
      }
    }
  }
  if (!aborted && !controlPosted_) postControlRecv();
  retryControlSends();
}

void CommState::onTransferError(transport::Transfer& t, Result, const std::string& message) {
  --posted_;
  if (&t == &controlRecv_) {
    controlPosted_ = false;
    if (message != "canceled")
      SHARC_WARN("rank " << rank << ": control receive failed: " << message);
    return;
  }
  for (ControlSend& s : controlSends_)
    if (&s.transfer == &t) s.done = true;
}

}  // namespace sharc::detail
