// The cluster the planner's tests use: a p5-like node written out here, so that the tests do
// not depend on the built-in profiles' figures.
#pragma once

#include "sharc/plan.hpp"

namespace sharc::plan {

inline Cluster testCluster(int ranksPerNode = 8) {
  Cluster c;
  c.name = "test";
  c.ranksPerNode = ranksPerNode;
  c.memoryBytes = 80.0 * (1u << 30);
  c.localAlphaUs = 2;
  c.localGBps = 300;
  c.fabricAlphaUs = 5;
  c.fabricGBps = 400;
  c.rails = 32;
  c.copyGBps = 1500;
  c.reduceGBps = 1000;
  c.stepUs = 0.5;
  c.efficiency = 0.8;
  return c;
}

}  // namespace sharc::plan
