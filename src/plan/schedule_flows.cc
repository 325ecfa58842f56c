#include "schedule_flows.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <utility>

namespace sharc::plan {

void SimFlows::add(SimFlow f, double now) {
  f.rate = 0;
  f.since = now;
  uint32_t slot;
  if (free_.empty()) {
    slot = static_cast<uint32_t>(pool_.size());
    pool_.push_back(f);
    alive_.push_back(1);
    gen_.push_back(0);
  } else {
    slot = free_.back();
    free_.pop_back();
    pool_[slot] = f;
    alive_[slot] = 1;
  }
  ++live_;
  dirty_ = true;
}

void SimFlows::updateIfDue(double now) {
  if (dirty_) update(now);
}

double SimFlows::next() {
  double t = std::numeric_limits<double>::infinity();
  while (!due_.empty()) {
    const Due& d = due_.front();
    if (alive_[d.slot] && gen_[d.slot] == d.gen) {
      t = d.t;
      break;
    }
    std::pop_heap(due_.begin(), due_.end(), std::greater<>());
    due_.pop_back();
  }
  return t;
}

bool SimFlows::popFinished(double now, uint32_t& msg) {
  while (!due_.empty()) {
    const Due d = due_.front();
    const bool valid = alive_[d.slot] && gen_[d.slot] == d.gen;
    if (valid) {
      const double rate = pool_[d.slot].rate;
      // The last byte has left (within rounding: the exact replay's tolerance).
      if ((d.t - now) * rate > std::max(1e-6, rate * 1e-9)) return false;
    }
    std::pop_heap(due_.begin(), due_.end(), std::greater<>());
    due_.pop_back();
    if (!valid) continue;
    alive_[d.slot] = 0;
    ++gen_[d.slot];
    free_.push_back(d.slot);
    --live_;
    dirty_ = true;
    msg = pool_[d.slot].msg;
    return true;
  }
  return false;
}

// Max-min fair rates by progressive filling: the link with the smallest fair share fixes
// the rate of its flows; what they take (rate x weight) is removed from their other links;
// repeat. Each flow is first charged what it moved at its old rate.
void SimFlows::update(double now) {
  ++updates_;
  dirty_ = false;
  // Only the links some flow crosses are set up (a group's links may be a few of many).
  const size_t res = capacity.size();
  if (stamp_.size() < res) {
    stamp_.resize(res, 0);
    left_.resize(res);
    weights_.resize(res);
    count_.resize(res);
    total_.resize(res);
    begin_.resize(res);
  }
  used_.clear();
  for (size_t i = 0; i < pool_.size(); ++i) {
    if (!alive_[i]) continue;
    SimFlow& f = pool_[i];
    f.remaining = std::max(0.0, f.remaining - f.rate * (now - f.since));
    f.since = now;
    f.rate = 0;
    for (int j = 0; j < f.links; ++j) {
      const auto l = static_cast<uint32_t>(f.res[j]);
      if (stamp_[l] != updates_) {
        stamp_[l] = updates_;
        left_[l] = capacity[l];
        weights_[l] = 0;
        count_[l] = 0;
        used_.push_back(l);
      }
      ++count_[l];
      weights_[l] += f.weight[j];
    }
  }
  uint32_t at = 0;
  for (uint32_t l : used_) {
    begin_[l] = at;
    total_[l] = count_[l];
    at += count_[l];
  }
  members_.resize(at);
  for (uint32_t l : used_) total_[l] = 0;
  for (uint32_t i = 0; i < pool_.size(); ++i)
    if (alive_[i])
      for (int j = 0; j < pool_[i].links; ++j) {
        const auto l = static_cast<uint32_t>(pool_[i].res[j]);
        members_[begin_[l] + total_[l]++] = i;
      }
  using Share = std::pair<double, uint32_t>;
  std::priority_queue<Share, std::vector<Share>, std::greater<>> heap;
  for (uint32_t l : used_) heap.push({left_[l] / weights_[l], l});
  // A link's share only grows as flows fixed at a smaller one leave it, so an entry that is
  // out of date is below the link's share: taken again at its share when it comes up.
  while (!heap.empty()) {
    const auto [share, l] = heap.top();
    heap.pop();
    if (count_[l] == 0) continue;
    if (const double now = left_[l] / weights_[l]; share != now) {
      heap.push({now, l});
      continue;
    }
    count_[l] = 0;
    for (uint32_t m = begin_[l]; m < begin_[l] + total_[l]; ++m) {
      SimFlow& f = pool_[members_[m]];
      if (f.rate > 0) continue;
      f.rate = share;
      for (int j = 0; j < f.links; ++j) {
        const auto other = static_cast<uint32_t>(f.res[j]);
        if (other == l || count_[other] == 0) continue;
        left_[other] = std::max(0.0, left_[other] - share * f.weight[j]);
        weights_[other] = std::max(1e-12, weights_[other] - f.weight[j]);
        --count_[other];
      }
    }
  }
  due_.clear();
  for (uint32_t i = 0; i < pool_.size(); ++i)
    if (alive_[i] && pool_[i].rate > 0)
      due_.push_back({now + pool_[i].remaining / pool_[i].rate, i, gen_[i]});
  std::make_heap(due_.begin(), due_.end(), std::greater<>());
}

}  // namespace sharc::plan
