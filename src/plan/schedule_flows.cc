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
  if (dirty_ && now >= last_ + epochUs_) update(now);
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
  return dirty_ ? std::min(t, last_ + epochUs_) : t;
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
  last_ = now;
  const size_t res = capacity.size();
  left_.assign(capacity.begin(), capacity.end());
  count_.assign(res, 0);
  weights_.assign(res, 0.0);
  for (size_t i = 0; i < pool_.size(); ++i) {
    if (!alive_[i]) continue;
    SimFlow& f = pool_[i];
    f.remaining = std::max(0.0, f.remaining - f.rate * (now - f.since));
    f.since = now;
    f.rate = 0;
    for (int j = 0; j < f.links; ++j) {
      ++count_[f.res[j]];
      weights_[f.res[j]] += f.weight[j];
    }
  }
  begin_.assign(res + 1, 0);
  for (size_t i = 0; i < res; ++i) begin_[i + 1] = begin_[i] + count_[i];
  members_.resize(begin_[res]);
  fill_.assign(begin_.begin(), begin_.end() - 1);
  for (uint32_t i = 0; i < pool_.size(); ++i)
    if (alive_[i])
      for (int j = 0; j < pool_[i].links; ++j) members_[fill_[pool_[i].res[j]]++] = i;
  using Share = std::pair<double, uint32_t>;
  std::priority_queue<Share, std::vector<Share>, std::greater<>> heap;
  for (uint32_t i = 0; i < res; ++i)
    if (count_[i] > 0) heap.push({left_[i] / weights_[i], i});
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
    for (uint32_t m = begin_[l]; m < begin_[l + 1]; ++m) {
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
  double shortest = std::numeric_limits<double>::infinity();
  for (uint32_t i = 0; i < pool_.size(); ++i)
    if (alive_[i] && pool_[i].rate > 0) {
      due_.push_back({now + pool_[i].remaining / pool_[i].rate, i, gen_[i]});
      shortest = std::min(shortest, pool_[i].bytes / pool_[i].rate);
    }
  epochUs_ = epoch_ > 0 && shortest < std::numeric_limits<double>::infinity() ? epoch_ * shortest
                                                                                : 0;
  std::make_heap(due_.begin(), due_.end(), std::greater<>());
}

}  // namespace sharc::plan
