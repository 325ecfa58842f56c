// The flight record of one process and world as JSON (README "Flight records" documents
// every field), and its dump to a directory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/config.hpp"
#include "runtime/communicator_impl.hpp"

namespace sharc::detail {
namespace {

void key(std::string& out, const char* name) {
  out += '"';
  out += name;
  out += "\":";
}

template <class T>
void number(std::string& out, const char* name, T value) {
  key(out, name);
  out += std::to_string(value);
  out += ',';
}

void text(std::string& out, const char* name, const std::string& value) {
  key(out, name);
  appendJsonString(out, value);
  out += ',';
}

}  // namespace

TraceProgress traceProgress(const RequestState& r) {
  const algo::Schedule::Progress p = r.schedule->progress();
  TraceProgress t;
  t.valid = true;
  t.opsDone = p.opsDone;
  t.opsTotal = p.opsTotal;
  t.waitingFor = p.waitingFor;
  t.peer = p.peer;
  t.peerWorldRank = p.peer >= 0 ? static_cast<int>(r.comm->peers[p.peer]) : -1;
  t.bytesReceived = p.bytesReceived;
  t.bytesExpected = p.bytesExpected;
  return t;
}

namespace {

void communicatorJson(std::string& out, const Engine& engine, const CommState& c) {
  out += '{';
  number(out, "id", c.id);
  key(out, "parent");
  out += c.parentId < 0 ? "null," : std::to_string(c.parentId) + ",";
  number(out, "rank", c.rank);
  number(out, "size", c.size);
  key(out, "world_ranks");
  out += '[';
  for (size_t i = 0; i < c.peers.size(); ++i) out += (i ? "," : "") + std::to_string(c.peers[i]);
  out += "],";
  text(out, "state", !c.aborted ? "ok" : c.userAborted ? "aborted" : "failed");
  text(out, "error", c.aborted ? c.abortMessage : std::string());
  number(out, "timeout_ms", c.timeout.load().count());
  number(out, "calls", c.calls);
  number(out, "last_completed_seq", c.recorder.lastCompletedSeq());
  number(out, "last_completed_ns", c.recorder.lastCompletedNs());
  key(out, "entries");
  out += '[';
  bool first = true;
  for (const TraceEntry* e : c.recorder.entries()) {
    if (!first) out += ',';
    first = false;
    const RequestState* r =
        e->state == TraceState::Started ? engine.activeRequest(&c, e->id) : nullptr;
    if (r == nullptr) {
      appendEntryJson(out, *e);
      continue;
    }
    const TraceProgress p = traceProgress(*r);
    appendEntryJson(out, *e, &p, &r->probeNote);
  }
  out += "]}";
}

}  // namespace

std::string Engine::traceJson(const std::string& reason, const std::string& message) const {
  std::string out;
  out.reserve(4096);
  out += "{\"format\":\"sharc-trace\",\"version\":1,";
  text(out, "reason", reason);
  text(out, "message", message);
  number(out, "time_ns", wallClockNs());
  text(out, "host",
       world.rank < static_cast<int>(world.hosts.size()) ? world.hosts[world.rank] : std::string());
  number(out, "pid", static_cast<int64_t>(getpid()));
  key(out, "world");
  out += '{';
  text(out, "key", world.key);
  number(out, "rank", world.rank);
  number(out, "size", world.size);
  key(out, "hosts");
  out += '[';
  for (size_t i = 0; i < world.hosts.size(); ++i) {
    if (i) out += ',';
    appendJsonString(out, world.hosts[i]);
  }
  out += "],";
  key(out, "pids");
  out += '[';
  for (size_t i = 0; i < world.pids.size(); ++i)
    out += (i ? "," : "") + std::to_string(world.pids[i]);
  out += "]},";
  number(out, "stall_probe_ms", core::Config::get().stallProbe.count());
  key(out, "communicators");
  out += '[';
  for (size_t i = 0; i < comms.size(); ++i) {
    if (i) out += ',';
    communicatorJson(out, *this, *comms[i]);
  }
  out += "]}\n";
  return out;
}

std::string Engine::writeTrace(const std::string& dir, const std::string& reason,
                               const std::string& message) const {
  if (dir.empty())
    throw Error(Result::InvalidArgument,
                "rank " + std::to_string(world.rank) +
                    ": dump trace: no directory (pass one, or set SHARC_TRACE_DIR)");
  mkdir(dir.c_str(), 0700);  // may exist already
  const std::string path =
      dir + "/sharc-trace-" + world.key + "-rank" + std::to_string(world.rank) + ".json";
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const std::string json = traceJson(reason, message);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < json.size();) {
    const ssize_t n = ::write(fd, json.data() + done, json.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(Result::SystemError, "rank " + std::to_string(world.rank) + ": cannot write " +
                                         path + ": " + std::strerror(ok ? errno : err));
  }
  return path;
}

}  // namespace sharc::detail
