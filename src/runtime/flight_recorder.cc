#include "runtime/flight_recorder.hpp"

#include <time.h>

#include <cstdio>

#include "core/collective.hpp"

namespace sharc::detail {

const char* traceStateName(TraceState s) {
  switch (s) {
    case TraceState::Queued: return "queued";
    case TraceState::Started: return "started";
    case TraceState::Completed: return "completed";
    case TraceState::Failed: return "failed";
  }
  return "unknown";
}

int64_t wallClockNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

TraceEntry& FlightRecorder::add() {
  const uint64_t id = nextId_++;
  if (ring_.size() < capacity_) {
    ring_.emplace_back();
    ring_.back().id = id;
    return ring_.back();
  }
  TraceEntry& e = ring_[(id - 1) % capacity_];
  e = TraceEntry{};
  e.id = id;
  return e;
}

TraceEntry* FlightRecorder::find(uint64_t id) {
  if (id == 0 || id >= nextId_ || nextId_ - id > capacity_) return nullptr;
  TraceEntry& e = ring_[(id - 1) % capacity_];
  return e.id == id ? &e : nullptr;
}

const TraceEntry* FlightRecorder::findSeq(uint64_t seq) const {
  if (seq == 0) return nullptr;
  for (uint64_t id = nextId_ - 1; id >= 1 && nextId_ - id <= capacity_; --id) {
    const TraceEntry& e = ring_[(id - 1) % capacity_];
    if (e.id == id && e.seq == seq) return &e;
    if (e.id == id && e.seq != 0 && e.seq < seq) break;  // entries are in sequence order
  }
  return nullptr;
}

void FlightRecorder::finish(uint64_t id, bool ok, const std::string& error) {
  TraceEntry* e = find(id);
  const int64_t now = wallClockNs();
  if (e == nullptr) return;
  e->state = ok ? TraceState::Completed : TraceState::Failed;
  e->endedNs = now;
  if (!ok) e->error = error;
  if (ok && e->seq > lastCompletedSeq_) {
    lastCompletedSeq_ = e->seq;
    lastCompletedNs_ = now;
  }
}

std::vector<const TraceEntry*> FlightRecorder::entries() const {
  std::vector<const TraceEntry*> out;
  out.reserve(ring_.size());
  const uint64_t first = nextId_ - ring_.size();
  for (uint64_t id = first; id < nextId_; ++id) out.push_back(&ring_[(id - 1) % capacity_]);
  return out;
}

void appendJsonString(std::string& out, const std::string& text) {
  out += '"';
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += ch;  // UTF-8 passes through; other bytes are the writer's responsibility
    }
  }
  out += '"';
}

void appendEntryJson(std::string& out, const TraceEntry& e, const TraceProgress* live,
                     const std::string* liveNote) {
  auto num = [&](const char* key, auto v) {
    out += '"';
    out += key;
    out += "\":";
    out += std::to_string(v);
    out += ',';
  };
  auto str = [&](const char* key, const std::string& v) {
    out += '"';
    out += key;
    out += "\":";
    appendJsonString(out, v);
    out += ',';
  };
  out += '{';
  num("seq", e.seq);
  num("p2p_seq", e.p2pSeq);
  str("collective", core::collectiveName(e.kind));
  str("internal", e.internal);
  str("dtype", dataTypeName(e.type));
  num("count", e.count);
  if (e.hasOp)
    str("op", redOpName(e.op));
  else
    out += "\"op\":null,";
  if (e.root >= 0)
    num("root", e.root);
  else
    out += "\"root\":null,";
  str("algorithm", e.algorithm);
  num("chunk_bytes", e.chunkBytes);
  str("path", e.path);
  out += e.scheduleReused ? "\"schedule_reused\":true," : "\"schedule_reused\":false,";
  str("state", traceStateName(e.state));
  num("queued_ns", e.queuedNs);
  num("started_ns", e.startedNs);
  num("ended_ns", e.endedNs);
  const TraceProgress& p = live ? *live : e.failedAt;
  if (p.valid) {
    out += "\"progress\":{";
    num("ops_done", p.opsDone);
    num("ops_total", p.opsTotal);
    str("waiting_for", p.waitingFor);
    num("peer", p.peer);
    num("peer_world_rank", p.peerWorldRank);
    num("bytes_received", p.bytesReceived);
    out += "\"bytes_expected\":" + std::to_string(p.bytesExpected) + "},";
  }
  const std::string& note = liveNote ? *liveNote : e.probeNote;
  if (!note.empty()) str("stall_probe", note);
  out += "\"error\":";
  appendJsonString(out, e.error);
  out += '}';
}

}  // namespace sharc::detail
