// The cost model: the cost of the flat schedules' steps (cost_model.hpp: "Links", "One step",
// "Ring", "Log-step").
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "cost_model.hpp"
#include "patterns.hpp"

namespace sharc::algo::model {

double Model::ringCrossWire(double x) const {
  std::vector<int> out(static_cast<size_t>(nodes_), 0), in(static_cast<size_t>(nodes_), 0);
  int most = 0;
  for (int r = 0; r < n_; ++r) {
    const int q = ringSendPeer(r, n_);
    if (node_[r] == node_[q]) continue;
    most = std::max({most, ++out[node_[r]], ++in[node_[q]]});
  }
  double load = most * x;
  if (n_ == 2 && most > 0) load = std::max(load, duplexLoad(x));  // a 2-rank ring exchanges
  return most > 0 ? std::max(load * bf_, x * bfRank_) * railScale(x) : load * bf_;
}

double Model::ringChain(double wireLocal, double wireCross, double red, bool reduce) const {
  bool even = n_ % nodes_ == 0 && maxLocal_ * nodes_ == n_;
  for (int r = 0; r < n_ && even; ++r) even = node_[r] == r / maxLocal_;
  const int width = even ? maxLocal_ : n_;
  const auto crossIn = [&](int i) {  // the edge into position i from the one before it
    return even ? (i == 0 && nodes_ > 1) : node_[i] != node_[(i + n_ - 1) % n_];
  };
  const double s = p_.stepUs, aL = localLatency(), aF = p_.fabric.alphaUs;
  std::vector<double> post(static_cast<size_t>(width), s), done(static_cast<size_t>(width));
  std::vector<double> delivered(static_cast<size_t>(width), 0), nextPost(post);
  for (int k = 0; k < n_ - 1; ++k) {
    for (int i = 0; i < width; ++i) {
      const int from = (i + width - 1) % width;
      const bool cross = crossIn(i);
      const double arrival = post[from] + (cross ? wireCross + aF : wireLocal + aL);
      // the receive of step k is posted once this rank's send of step k-1 was delivered
      done[i] = std::max(arrival, reduce && k >= 2 ? delivered[i] : 0.0) + (reduce ? red : 0);
    }
    for (int i = 0; i < width; ++i) {
      const bool crossOut = crossIn((i + 1) % width);
      delivered[i] = post[i] + (crossOut ? wireCross + aF : wireLocal + aL);
      nextPost[i] = done[i] + s;
    }
    std::swap(post, nextPost);
  }
  return *std::max_element(done.begin(), done.end());
}

double Model::ringChainAlpha(bool reduce) const {
  int cross = 0;
  for (int r = 0; r < n_; ++r) cross += node_[r] != node_[ringSendPeer(r, n_)] ? 1 : 0;
  const int fabricHops = std::min(cross, n_ - 1);
  double chain = fabricHops * p_.fabric.alphaUs + (n_ - 1 - fabricHops) * localLatency();
  if (reduce && cross > 0 && n_ > 2)
    chain = std::max(chain, ((n_ - 2) / 2 + 1) * (p_.fabric.alphaUs + p_.stepUs) -
                                (n_ - 1) * p_.stepUs + localLatency());
  return chain;
}

void Model::step(Cost& k, const StepPeers& peers, double x, bool reduce, bool chunked,
                 bool fill) const {
  bool anyLocal = false, anyCross = false, exchange = false;
  std::vector<double> out(static_cast<size_t>(nodes_), 0), in(static_cast<size_t>(nodes_), 0);
  std::vector<double> rankIn(static_cast<size_t>(n_), 0);  // what each rank's NICs take in
  for (int r = 0; r < n_; ++r) {
    const int q = peers.to(r);
    // r^d on a group that is not a power of two: no partner there
    if (q == r || q < 0 || q >= n_) continue;
    if (node_[r] == node_[q]) {
      anyLocal = true;
    } else {
      anyCross = true;
      exchange = exchange || peers.to(q) == r;
      out[node_[r]] += x;
      in[node_[q]] += x;
      rankIn[q] += x;
    }
  }
  double load = 0;
  for (int i = 0; i < nodes_; ++i) load = std::max({load, out[i], in[i]});
  // see cost_model.hpp, half-duplex turns
  if (exchange) load = std::max(load, chunked ? chunkedDuplexLoad(x) : duplexLoad(x));
  // The busiest rank's own NICs: one message out (x), and what it takes in.
  const double rankLoad =
      anyCross ? std::max(x, *std::max_element(rankIn.begin(), rankIn.end())) : 0.0;
  const double message = chunked ? std::min(x, static_cast<double>(chunk_)) : x;
  const double cross = std::max(load * bf_, rankLoad * bfRank_) * railScale(message);
  const double wire = std::max(anyLocal ? o_ * x * localPerByte(x) : 0.0, cross);
  k.latency += (anyCross ? p_.fabric.alphaUs : localLatency()) + p_.stepUs;
  const bool copied = !chunked && !p_.dmaTransfers;  // the receive copy beyond one chunk
  k.transfer += wire + (copied ? o_ * std::max(0.0, x - static_cast<double>(chunk_)) * c_ : 0.0);
  if (reduce) k.reduce += o_ * x * g_;
  if (chunked && fill)
    pipeline(k, x, anyCross ? std::max(cross / std::max(x, 1.0), bl_) : o_ * localPerByte(x),
             reduce);
  k.fabric = k.fabric || anyCross;
  ++k.steps;
}

// Processor sharing on one node's NICs: the messages of `senders` (x bytes each, posted at
// their sender's t + s) share its rate equally, each at most at its rank's own NICs' rate;
// done[sender] = when each one's last byte is out, `free` when the NICs are idle again.
void Model::share(std::span<int> senders, const std::vector<double>& t, double x,
                  std::vector<double>& done, double& free,
                  std::vector<std::pair<double, int>>& active) const {
  if (senders.empty()) return;
  const auto start = [&](int r) { return t[static_cast<size_t>(r)] + p_.stepUs; };
  std::sort(senders.begin(), senders.end(), [&](int a, int b) { return start(a) < start(b); });
  active.clear();  // bytes left, sender
  double now = start(senders[0]);
  // What is still on the NIC from earlier steps goes first, as a whole: the messages that
  // finish last, the ones a chain waits for, are late by all of it.
  const double backlog = std::max(0.0, free - now);
  size_t next = 0;
  while (next < senders.size() || !active.empty()) {
    if (active.empty()) now = std::max(now, start(senders[next]));
    while (next < senders.size() && start(senders[next]) <= now)
      active.push_back({x, senders[next++]});
    const double k = static_cast<double>(active.size());
    double least = active[0].first;
    for (const auto& f : active) least = std::min(least, f.first);
    const double perByte = std::max(bf_ * k, bfRank_) * railScale(x);  // us per byte of one
    const double ends = now + least * perByte;
    const double arrives = next < senders.size() ? start(senders[next]) : ends;
    const double until = std::min(ends, arrives);
    const double moved = (until - now) / perByte;
    now = until;
    for (size_t i = 0; i < active.size();) {
      active[i].first -= moved;
      if (active[i].first <= 1e-9 * x) {
        done[static_cast<size_t>(active[i].second)] = now + backlog;
        active[i] = active.back();
        active.pop_back();
      } else {
        ++i;
      }
    }
  }
  // The node's NICs' own work (a rank held to its share leaves the rest of them free).
  free = std::max(free, start(senders[0])) +
         static_cast<double>(senders.size()) * x * bf_ * railScale(x);
}

void Model::logSteps(Cost& k, const std::vector<LogStep>& steps) const {
  const auto n = static_cast<size_t>(n_);
  const bool rankNics = bfRank_ > bf_;
  // The chain depends on when each rank's own NICs finish its messages, and those on the
  // chain's start times: one after the other first, then twice shared fairly from the start
  // times of the pass before.
  std::vector<std::vector<double>> startAt(steps.size(), std::vector<double>(n, -1));
  std::vector<std::vector<double>> outEnd, inEnd;
  std::vector<double> t, lat, post, red;
  LogScratch scratch;
  const int passes = rankNics ? 3 : 1;
  for (int pass = 0; pass < passes; ++pass) {
    const bool fair = pass > 0;
    if (fair) fairShares(steps, startAt, outEnd, inEnd, scratch);
    k.steps -= pass > 0 ? static_cast<int>(steps.size()) : 0;
    logPass(k, steps, fair ? &outEnd : nullptr, fair ? &inEnd : nullptr, startAt, t, lat, post, red,
            scratch);
  }
  const auto last = static_cast<size_t>(std::max_element(t.begin(), t.end()) - t.begin());
  k.latency += lat[last] + post[last];
  k.reduce += red[last];
  k.transfer += t[last] - lat[last] - post[last] - red[last];
}

// Fair sharing of one link (us per byte `perByte`) among the k messages (start, bytes) of
// `msgs`: s.end[i] = when message i's last byte is through.
void Model::fairEnds(const std::pair<double, double>* msgs, size_t k, double perByte,
                     LogScratch& s) {
  std::vector<double>&end = s.end, &left = s.left;
  std::vector<size_t>&order = s.order, &active = s.fair;
  end.assign(k, 0);
  left.resize(k);
  order.resize(k);
  active.clear();
  for (size_t i = 0; i < k; ++i) order[i] = i, left[i] = msgs[i].second;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return msgs[a].first < msgs[b].first; });
  double now = 0;
  size_t next = 0;
  while (next < k || !active.empty()) {
    if (active.empty()) now = std::max(now, msgs[order[next]].first);
    while (next < k && msgs[order[next]].first <= now) active.push_back(order[next++]);
    const double each = perByte * static_cast<double>(active.size());  // us per byte
    double least = std::numeric_limits<double>::infinity();
    for (size_t a : active) least = std::min(least, left[a]);
    double until = now + least * each;
    if (next < k) until = std::min(until, msgs[order[next]].first);
    const double moved = (until - now) / each;
    now = until;
    for (size_t i = 0; i < active.size();) {
      left[active[i]] -= moved;
      if (left[active[i]] <= 1e-9 * msgs[active[i]].second) {
        end[active[i]] = now;
        active[i] = active.back();
        active.pop_back();
      } else {
        ++i;
      }
    }
  }
}

// Each rank's own NICs, out and in, shared fairly among its crossing messages of every step,
// started when the last pass said: how long each took, per step and sender.
void Model::fairShares(const std::vector<LogStep>& steps,
                       const std::vector<std::vector<double>>& startAt,
                       std::vector<std::vector<double>>& outTook,
                       std::vector<std::vector<double>>& inTook, LogScratch& s) const {
  const auto n = static_cast<size_t>(n_);
  outTook.assign(steps.size(), std::vector<double>(n, 0));
  inTook = outTook;
  // Each rank's messages out and in, in step then sender order, packed rank after rank.
  s.outFirst.assign(n + 1, 0);
  s.inFirst.assign(n + 1, 0);
  for (size_t i = 0; i < steps.size(); ++i)
    for (int r = 0; r < n_; ++r) {
      if (startAt[i][static_cast<size_t>(r)] < 0) continue;
      ++s.outFirst[static_cast<size_t>(r) + 1];
      ++s.inFirst[static_cast<size_t>(steps[i].peers.to(r)) + 1];
    }
  for (size_t r = 0; r < n; ++r) {
    s.outFirst[r + 1] += s.outFirst[r];
    s.inFirst[r + 1] += s.inFirst[r];
  }
  s.outMsg.resize(s.outFirst[n]);
  s.outId.resize(s.outFirst[n]);
  s.inMsg.resize(s.inFirst[n]);
  s.inId.resize(s.inFirst[n]);
  s.outNext = s.outFirst;
  s.inNext = s.inFirst;
  for (size_t i = 0; i < steps.size(); ++i)
    for (int r = 0; r < n_; ++r) {
      const double at = startAt[i][static_cast<size_t>(r)];
      if (at < 0) continue;
      const auto q = static_cast<size_t>(steps[i].peers.to(r));
      const double bytes = steps[i].x * railScale(steps[i].x);  // at the rank's rate
      const size_t o = s.outNext[static_cast<size_t>(r)]++, e = s.inNext[q]++;
      s.outMsg[o] = {at, bytes};
      s.outId[o] = {i, r};
      s.inMsg[e] = {at, bytes};
      s.inId[e] = {i, r};
    }
  for (size_t r = 0; r < n; ++r) {
    const size_t o0 = s.outFirst[r], e0 = s.inFirst[r];
    fairEnds(s.outMsg.data() + o0, s.outFirst[r + 1] - o0, bfRank_, s);
    for (size_t j = 0; j < s.end.size(); ++j)
      outTook[s.outId[o0 + j].first][static_cast<size_t>(s.outId[o0 + j].second)] =
          s.end[j] - s.outMsg[o0 + j].first;
    fairEnds(s.inMsg.data() + e0, s.inFirst[r + 1] - e0, bfRank_, s);
    for (size_t j = 0; j < s.end.size(); ++j)
      inTook[s.inId[e0 + j].first][static_cast<size_t>(s.inId[e0 + j].second)] =
          s.end[j] - s.inMsg[e0 + j].first;
  }
}

// One pass through the steps: the longest chain to each rank, each rank's own NICs taken one
// message after the other (outTook null) or as fairShares says.
void Model::logPass(Cost& k, const std::vector<LogStep>& steps,
                    const std::vector<std::vector<double>>* outTook,
                    const std::vector<std::vector<double>>* inTook,
                    std::vector<std::vector<double>>& startAt, std::vector<double>& t,
                    std::vector<double>& lat, std::vector<double>& post, std::vector<double>& red,
                    LogScratch& s) const {
  const auto n = static_cast<size_t>(n_), nodes = static_cast<size_t>(nodes_);
  // Along the longest chain to each rank: total, alphas, posts, reductions.
  t.assign(n, 0), lat.assign(n, 0), post.assign(n, 0), red.assign(n, 0);
  auto &outDone = s.outDone, &inDone = s.inDone;
  outDone.assign(n, 0);
  inDone.assign(n, 0);
  // When each NIC has moved every byte of the steps so far (the chain of short distances runs
  // ahead of the messages that cross).
  auto &outFree = s.outFree, &inFree = s.inFree;
  outFree.assign(nodes, 0);
  inFree.assign(nodes, 0);
  // The same for each rank's own NICs where it drives only its share of the node's.
  const bool rankNics = bfRank_ > bf_;
  auto &rankOutFree = s.rankOutFree, &rankInFree = s.rankInFree;
  rankOutFree.assign(rankNics ? n : 0, 0);
  rankInFree.assign(rankNics ? n : 0, 0);
  for (size_t idx = 0; idx < steps.size(); ++idx) {
    const LogStep& st = steps[idx];
    const StepPeers& peers = st.peers;
    // The crossing senders by the node they leave and the node they enter, in rank order.
    bool exchange = false, anyCross = false;
    s.egressFirst.assign(nodes + 1, 0);
    s.ingressFirst.assign(nodes + 1, 0);
    for (int r = 0; r < n_; ++r) {
      const int q = peers.to(r);
      if (q == r || q < 0 || q >= n_ || node_[r] == node_[q]) continue;
      anyCross = true;
      exchange = exchange || peers.to(q) == r;
      ++s.egressFirst[static_cast<size_t>(node_[r]) + 1];
      ++s.ingressFirst[static_cast<size_t>(node_[q]) + 1];
    }
    for (size_t i = 0; i < nodes; ++i) {
      s.egressFirst[i + 1] += s.egressFirst[i];
      s.ingressFirst[i + 1] += s.ingressFirst[i];
    }
    s.egress.resize(s.egressFirst[nodes]);
    s.ingress.resize(s.ingressFirst[nodes]);
    s.egressNext = s.egressFirst;
    s.ingressNext = s.ingressFirst;
    for (int r = 0; anyCross && r < n_; ++r) {
      const int q = peers.to(r);
      if (q == r || q < 0 || q >= n_ || node_[r] == node_[q]) continue;
      s.egress[s.egressNext[static_cast<size_t>(node_[r])]++] = r;
      s.ingress[s.ingressNext[static_cast<size_t>(node_[q])]++] = r;
    }
    for (size_t i = 0; i < nodes; ++i) {
      const size_t e = s.egressFirst[i], g = s.ingressFirst[i];
      share({s.egress.data() + e, s.egressFirst[i + 1] - e}, t, st.x, outDone, outFree[i],
            s.active);
      share({s.ingress.data() + g, s.ingressFirst[i + 1] - g}, t, st.x, inDone, inFree[i],
            s.active);
    }
    if (rankNics) {
      for (int r = 0; r < n_; ++r) {
        const int q = peers.to(r);
        if (q == r || q < 0 || q >= n_ || node_[r] == node_[q]) continue;
        const auto i = static_cast<size_t>(r);
        const double start = t[i] + p_.stepUs, own = st.x * bfRank_ * railScale(st.x);
        startAt[idx][i] = start;
        double out = start + own, in = start + own;
        if (outTook) {
          out = start + std::max(own, (*outTook)[idx][i]);
          in = start + std::max(own, (*inTook)[idx][i]);
        } else {
          double& o = rankOutFree[i];
          double& e = rankInFree[static_cast<size_t>(q)];
          out = o = std::max(o, start) + own;
          in = e = std::max(e, start) + own;
        }
        outDone[i] = std::max(outDone[i], out);
        inDone[i] = std::max(inDone[i], in);
      }
    }
    const double own =
        std::max((exchange ? duplexLoad(st.x) : st.x) * bf_, st.x * bfRank_) * railScale(st.x);
    // the receive copy beyond one chunk, not where DMA moves the bytes
    const double copy =
        p_.dmaTransfers ? 0.0 : o_ * std::max(0.0, st.x - static_cast<double>(chunk_)) * c_;
    const double reduce = st.reduce ? o_ * st.x * g_ : 0.0;
    const double local = o_ * st.x * localPerByte(st.x);
    s.t0 = t, s.lat0 = lat, s.post0 = post, s.red0 = red;
    const std::vector<double>&t0 = s.t0, &lat0 = s.lat0, &post0 = s.post0, &red0 = s.red0;
    for (int r = 0; r < n_; ++r) {
      const int q = peers.from(r);
      if (q == r || q < 0 || q >= n_) continue;  // no partner this step
      double alpha = localLatency(), sent = t0[q] + p_.stepUs + local;
      if (node_[q] != node_[r]) {
        alpha = p_.fabric.alphaUs;
        sent = std::max({t0[q] + p_.stepUs + own, outDone[q], inDone[q]});
      }
      const double via = sent + alpha + copy;
      if (via > t0[r]) {
        t[r] = via;
        lat[r] = lat0[q] + alpha;
        post[r] = post0[q] + p_.stepUs;
        red[r] = red0[q];
      }
      // AllReduce in place: the reduction overwrites what its send reads, so a rank's sends
      // never overlap
      const int to = peers.to(r);
      if (st.afterSend && to != r && to >= 0 && to < n_) {
        const double mine =
            node_[to] != node_[r]
                ? std::max({t0[r] + p_.stepUs + own, outDone[r], inDone[r]}) + p_.fabric.alphaUs
                : t0[r] + p_.stepUs + local + localLatency();
        t[r] = std::max(t[r], mine);
      }
      t[r] += reduce;
      red[r] += reduce;
    }
    k.fabric = k.fabric || anyCross;
    ++k.steps;
  }
}

void Model::pipeline(Cost& k, double x, double perByte, bool reduce) const {
  const double chunks = std::ceil(x / static_cast<double>(chunk_));
  if (chunks <= 1) return;  // one message: its transfer is already counted whole
  k.pipeline += (chunks - 1) * p_.stepUs;
  fill_ = std::max(fill_, static_cast<double>(chunk_) * (perByte + (reduce ? o_ * g_ : 0.0)));
}

void Model::singleCopy(Cost& k, int handshakes, double bytes, double reduced) const {
  k.latency += handshakes * (localLatency() + (n_ - 1) * p_.stepUs);
  k.transfer += o_ * bytes * cma_;
  k.reduce += o_ * reduced * g_;
  k.steps += handshakes;
}

void Model::direct(Cost& k, double x) const {
  double load = 0, rankLoad = 0;
  int localPeers = 0;
  for (int r = 0; r < n_; ++r) {
    int here = 0;
    for (int q = 0; q < n_; ++q) here += node_[q] == node_[r] ? 1 : 0;
    load = std::max(load, here * static_cast<double>(n_ - here) * x);
    rankLoad = std::max(rankLoad, static_cast<double>(n_ - here) * x);  // its own NICs
    localPeers = std::max(localPeers, here - 1);
  }
  if (load > 0) load = std::max(load, duplexLoad(x));  // see cost_model.hpp, half-duplex turns
  k.latency += (load > 0 ? p_.fabric.alphaUs : localLatency()) + (n_ - 1) * p_.stepUs;
  const double rails = railScale(std::min(x, static_cast<double>(chunk_)));
  k.transfer += std::max(
      {o_ * localPeers * x * localPerByte(x), load * bf_ * rails, rankLoad * bfRank_ * rails});
  pipeline(k, x, o_ * localPerByte(x), false);
  k.fabric = load > 0;
  ++k.steps;
}

}  // namespace sharc::algo::model
