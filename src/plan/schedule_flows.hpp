// The replay's links (schedule_sim.cc): the flows on the wire and their max-min fair rates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sharc::plan {

/// One message on the wire: the links it crosses, what it takes of each per byte it moves
/// (1 but on a half-duplex connection or a message striped over fewer rails than the rank has).
struct SimFlow {
  static constexpr int kMaxLinks = 7;
  uint32_t msg = 0;         ///< the replay's message id
  int res[kMaxLinks] = {};  ///< the links it crosses
  int links = 0;
  double weight[kMaxLinks] = {};
  double remaining = 0;  ///< bytes not yet moved, as of `since`
  double rate = 0;       ///< bytes per us since `since` (0 until the next update)
  double since = 0;
};

/// The flows in progress and the links they share, max-min fairly (progressive filling).
///
/// Rates are recomputed, over every flow of the set, whenever a flow starts or ends or a
/// link's capacity changes (at most once per point in time: updateIfDue). The replay keeps
/// flows that share no link in sets of their own, so that a change recomputes only its set.
class SimFlows {
 public:
  /// The links' capacities in bytes per us; the replay may add links and change capacities
  /// (then call touch()).
  std::vector<double> capacity;

  /// Puts `f` on the wire at `now` (rate 0 until the next update).
  void add(SimFlow f, double now);
  /// A capacity changed: rates are stale.
  void touch() { dirty_ = true; }
  bool empty() const { return live_ == 0; }
  /// Recomputes the rates at `now` if they are stale.
  void updateIfDue(double now);
  /// The next time a flow's last byte leaves, as of the last update (infinity if none).
  double next();
  /// Takes every flow whose last byte has left by `now` off the wire and calls done(msg) for
  /// each, earliest first (done may add flows).
  template <class Done>
  void finish(double now, Done&& done) {
    for (uint32_t id; popFinished(now, id);) done(id);
  }
  size_t updates() const { return updates_; }

 private:
  struct Due {
    double t;
    uint32_t slot, gen;
    bool operator>(const Due& o) const { return t != o.t ? t > o.t : slot > o.slot; }
  };
  bool popFinished(double now, uint32_t& msg);
  void update(double now);

  bool dirty_ = false;
  size_t updates_ = 0, live_ = 0;  // updates_ from 1: stamp_ 0 is none
  std::vector<SimFlow> pool_;
  std::vector<uint8_t> alive_;
  std::vector<uint32_t> gen_, free_;
  std::vector<Due> due_;  // min-heap of finish times as of the last update
  std::vector<double> left_, weights_;
  std::vector<uint32_t> count_, total_, begin_, members_, used_;
  std::vector<size_t> stamp_;  // per link: the update that set it up
};

}  // namespace sharc::plan
