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
  double bytes = 0;      ///< the message's bytes
  double remaining = 0;  ///< bytes not yet moved, as of `since`
  double rate = 0;       ///< bytes per us since `since` (0 until the next update)
  double since = 0;
};

/// The flows in progress and the links they share, max-min fairly (progressive filling).
///
/// Rates are recomputed whenever a flow starts or ends, or a link's capacity changes: at once
/// (epoch 0: the exact replay), or at most once per `epoch` x the shortest time a flow on the
/// wire takes at its rate (the fast replay of thousands of ranks: a flow that starts waits
/// for the next update, capacity a flow leaves stays unused until then, so each waits at most
/// that fraction of its own time; schedule_sim.hpp states the error).
class SimFlows {
 public:
  /// The links' capacities in bytes per us; the replay may add links and change capacities
  /// (then call touch()).
  std::vector<double> capacity;

  explicit SimFlows(double epoch = 0) : epoch_(epoch) {}

  /// Puts `f` on the wire at `now` (rate 0 until the next update).
  void add(SimFlow f, double now);
  /// A capacity changed: rates are stale.
  void touch() { dirty_ = true; }
  bool empty() const { return live_ == 0; }
  /// Recomputes the rates at `now` if they are stale and the epoch allows.
  void updateIfDue(double now);
  /// The next time something happens on the wire: a flow's last byte leaves, or a stale
  /// update falls due (infinity if neither).
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

  double epoch_, epochUs_ = 0;  // relative; in us as of the last update
  double last_ = -1e300;  // the last update
  bool dirty_ = false;
  size_t updates_ = 0, live_ = 0;
  std::vector<SimFlow> pool_;
  std::vector<uint8_t> alive_;
  std::vector<uint32_t> gen_, free_;
  std::vector<Due> due_;  // min-heap of finish times as of the last update
  std::vector<double> left_, weights_;
  std::vector<uint32_t> count_, begin_, fill_, members_;
};

}  // namespace sharc::plan
