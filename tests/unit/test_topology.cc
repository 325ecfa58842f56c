// Topology discovery (hwloc, live and XML) and the rank -> NIC placement, against the
// p4d-like and p5-like hosts in tests/data/topo (written by tests/data/topo/gen_topo.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sharc/error.hpp>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "topology/nic_mapping.hpp"
#include "topology/topology.hpp"

namespace sharc::topo {
namespace {

const std::string kDataDir = SHARC_TOPO_DATA_DIR;
// Package p's PUs with the generator's Linux-style numbering (second threads after all firsts).
const char* const kP4dPackageCpus[] = {"0-23,48-71", "24-47,72-95"};
const char* const kP5PackageCpus[] = {"0-47,96-143", "48-95,144-191"};

HostTopology loadData(const char* name) {
  return HostTopology::loadXml(kDataDir + "/" + name, "test");
}

const HostTopology& p4d() {
  static const HostTopology host = loadData("p4d-like.xml");
  return host;
}

const HostTopology& p5() {
  static const HostTopology host = loadData("p5-like.xml");
  return host;
}

TEST(Classify, GpusAndNics) {
  EXPECT_EQ(classifyPci(0x0302, 0x10de, 0x20b0), DeviceKind::Gpu);    // A100 (3D controller)
  EXPECT_EQ(classifyPci(0x0300, 0x10de, 0x1db6), DeviceKind::Gpu);    // VGA NVIDIA
  EXPECT_EQ(classifyPci(0x0300, 0x1234, 0x1111), DeviceKind::Other);  // VGA, not NVIDIA
  EXPECT_EQ(classifyPci(0x0680, 0x10de, 0x1af1), DeviceKind::Other);  // NVSwitch
  EXPECT_EQ(classifyPci(0x0200, 0x1af4, 0x1041), DeviceKind::Nic);    // virtio-net
  EXPECT_EQ(classifyPci(0x0207, 0x15b3, 0x101b), DeviceKind::Nic);    // ConnectX InfiniBand
  EXPECT_EQ(classifyPci(0x0000, 0x1d0f, 0xefa0), DeviceKind::Nic);    // EFA by id alone
  EXPECT_EQ(classifyPci(0x0000, 0x1d0f, 0xefa2), DeviceKind::Nic);
  EXPECT_EQ(classifyPci(0x0108, 0x1d0f, 0xcd01), DeviceKind::Other);  // NVMe
}

TEST(TopologyXml, P4dCounts) {
  const HostTopology& h = p4d();
  EXPECT_EQ(h.hostName, "p4d-like");
  ASSERT_EQ(h.packages.size(), 2u);
  ASSERT_EQ(h.numaNodes.size(), 2u);
  EXPECT_EQ(h.cores, 48u);
  EXPECT_EQ(h.pus, 96u);
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(h.packages[p].cpus, kP4dPackageCpus[p]);
    EXPECT_EQ(h.numaNodes[p].cpus, kP4dPackageCpus[p]);
    EXPECT_EQ(h.numaNodes[p].package, p);
    EXPECT_EQ(h.numaNodes[p].memoryBytes, uint64_t{580} << 30);
  }
  ASSERT_EQ(h.gpus.size(), 8u);  // the NVSwitches and NVMe drives are neither
  ASSERT_EQ(h.nics.size(), 4u);
  ASSERT_EQ(h.switches.size(), 4u);
  EXPECT_EQ(h.gpus[0].busId, "0000:10:1c.0");
  EXPECT_EQ(h.gpus[0].name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(h.gpus[0].osDevices, (std::vector<std::string>{"cuda0", "nvml0"}));
  EXPECT_EQ(h.gpus[7].busId, "0000:a0:1d.0");
  EXPECT_EQ(h.nics[0].busId, "0000:10:1b.0");
  EXPECT_EQ(h.nics[0].vendorId, 0x1d0f);
  EXPECT_EQ(h.nics[0].deviceId, 0xefa0);
  EXPECT_EQ(h.nics[0].osDevices, std::vector<std::string>{"rdmap16s27"});
  EXPECT_EQ(h.nics[3].osDevices, std::vector<std::string>{"rdmap160s27"});
  EXPECT_EQ(h.nics[0].switchId, "0000:0f:00.0");
  EXPECT_EQ(h.nics[0].pciPath, (std::vector<std::string>{"0000:0f:00.0", "host:0000:[0f-10]"}));
  for (const PciSwitch& s : h.switches) {
    EXPECT_EQ(s.gpus.size(), 2u) << s.id;
    EXPECT_EQ(s.nics.size(), 1u) << s.id;
  }
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(h.gpus[i].numaNode, static_cast<int>(i / 4)) << i;
    EXPECT_EQ(h.gpus[i].package, static_cast<int>(i / 4)) << i;
    EXPECT_EQ(h.gpus[i].cpus, kP4dPackageCpus[i / 4]) << i;
  }
}

TEST(TopologyXml, P5Counts) {
  const HostTopology& h = p5();
  ASSERT_EQ(h.packages.size(), 2u);
  ASSERT_EQ(h.numaNodes.size(), 2u);
  EXPECT_EQ(h.cores, 96u);
  EXPECT_EQ(h.pus, 192u);
  ASSERT_EQ(h.gpus.size(), 8u);
  ASSERT_EQ(h.nics.size(), 32u);
  ASSERT_EQ(h.switches.size(), 8u);
  EXPECT_EQ(h.gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h.nics[0].deviceId, 0xefa1);
  // Each device sits on its own downstream port; the switch is the upstream port above.
  EXPECT_EQ(h.gpus[0].pciPath.size(), 3u);
  EXPECT_EQ(h.gpus[0].switchId, h.gpus[0].pciPath[1]);
  for (const PciSwitch& s : h.switches) {
    EXPECT_EQ(s.gpus.size(), 1u) << s.id;
    EXPECT_EQ(s.nics.size(), 4u) << s.id;
  }
}

TEST(NicMapping, P4dGpuPairsShareTheirSwitchNic) {
  const HostTopology& h = p4d();
  const std::vector<RankPlacement> placements = placeRanks(h, 8);
  ASSERT_EQ(placements.size(), 8u);
  std::vector<int> ranksPerNic(h.nics.size(), 0);
  for (int r = 0; r < 8; ++r) {
    const RankPlacement& p = placements[r];
    EXPECT_EQ(p.localRank, r);
    EXPECT_EQ(p.gpu, r);
    ASSERT_EQ(p.nics, std::vector<int>{r / 2}) << "rank " << r;
    const PciDevice& gpu = h.gpus[p.gpu];
    const PciDevice& nic = h.nics[p.nics[0]];
    EXPECT_EQ(nic.switchId, gpu.switchId) << "rank " << r;
    EXPECT_EQ(pciDistance(gpu, nic), 2) << "rank " << r;
    EXPECT_EQ(p.numaNode, r / 4);
    EXPECT_EQ(p.cpus, kP4dPackageCpus[r / 4]) << "rank " << r;
    EXPECT_EQ(p.cpus, h.packages[gpu.package].cpus);
    ++ranksPerNic[p.nics[0]];
  }
  for (int count : ranksPerNic) EXPECT_EQ(count, 2);
  // More ranks than GPUs wrap around (GPU i mod 8) and keep their GPU's NIC.
  EXPECT_EQ(placeRank(h, 9, 16).gpu, 1);
  EXPECT_EQ(placeRank(h, 9, 16).nics, std::vector<int>{0});
}

TEST(NicMapping, P5EachRankGetsItsFourNics) {
  const HostTopology& h = p5();
  std::set<int> seen;
  for (const RankPlacement& p : placeRanks(h, 8)) {
    EXPECT_EQ(p.gpu, p.localRank);
    ASSERT_EQ(p.nics.size(), 4u) << "rank " << p.localRank;
    for (int n : p.nics) {
      EXPECT_TRUE(seen.insert(n).second) << "NIC " << n << " given twice";
      EXPECT_EQ(h.nics[n].switchId, h.gpus[p.gpu].switchId);
      EXPECT_EQ(pciDistance(h.gpus[p.gpu], h.nics[n]), 4);  // GPU and NIC ports: 2 hops each
    }
    EXPECT_EQ(p.cpus, kP5PackageCpus[p.localRank / 4]);
  }
  EXPECT_EQ(seen.size(), 32u);
}

TEST(NicMapping, WithoutGpusRoundRobinPerNumaNode) {
  HostTopology h = p4d();
  h.gpus.clear();
  // 8 ranks: 0-3 on NUMA 0 (NICs 0, 1), 4-7 on NUMA 1 (NICs 2, 3).
  const std::vector<int> expected = {0, 1, 0, 1, 2, 3, 2, 3};
  for (const RankPlacement& p : placeRanks(h, 8)) {
    EXPECT_EQ(p.gpu, -1);
    ASSERT_EQ(p.nics, std::vector<int>{expected[p.localRank]}) << "rank " << p.localRank;
    EXPECT_EQ(p.numaNode, p.localRank / 4);
    EXPECT_EQ(p.cpus, kP4dPackageCpus[p.localRank / 4]);
  }
  // A NUMA node without NICs falls back to all of them.
  for (PciDevice& nic : h.nics) nic.numaNode = 0;
  EXPECT_EQ(placeRank(h, 1, 2).nics, std::vector<int>{0});
  EXPECT_EQ(placeRank(h, 1, 2).numaNode, 1);
  // No NIC at all: still pinned to the NUMA node.
  h.nics.clear();
  const RankPlacement lone = placeRank(h, 0, 1);
  EXPECT_TRUE(lone.nics.empty());
  EXPECT_EQ(lone.cpus, kP4dPackageCpus[0]);
}

TEST(NicMapping, GpusOffTheirNicsSwitchUseTheNumaNodesNics) {
  HostTopology h = p4d();
  h.nics.erase(h.nics.begin());  // GPUs 0 and 1 lose their switch's NIC
  const RankPlacement p = placeRank(h, 0, 8);
  EXPECT_EQ(p.nics, std::vector<int>{0});  // the other NIC of package 0 (was NIC 1)
  EXPECT_EQ(h.nics[0].numaNode, 0);
  EXPECT_THROW(placeRank(h, 8, 8), Error);
}

TEST(TopologyLive, LoadsThisHost) {
  const HostTopology h = HostTopology::loadLive();
  EXPECT_EQ(h.source, "live");
  EXPECT_GE(h.pus, 1u);
  EXPECT_GE(h.numaNodes.size(), 1u);
  EXPECT_FALSE(h.hostName.empty());
  // Whatever the host has, placement must not fail, and pinning near it is harmless.
  const RankPlacement p = placeRank(h, 0, 1);
  EXPECT_TRUE(bindCurrentThreadNear(p.cpus) || p.cpus.empty());
  EXPECT_FALSE(bindCurrentThreadNear("9999999"));  // a CPU this host lacks: a warning only
}

// Loads through the environment variable, as the library does.
HostTopology loadWithEnv(const std::string& path) {
  ::setenv("SHARC_TOPO_FILE", path.c_str(), 1);
  core::Config config;
  try {
    config = core::Config::load();
  } catch (...) {
    ::unsetenv("SHARC_TOPO_FILE");
    throw;
  }
  ::unsetenv("SHARC_TOPO_FILE");
  return HostTopology::load(config);
}

void expectTopoFileError(const std::string& path, const std::string& detail) {
  try {
    loadWithEnv(path);
    ADD_FAILURE() << "expected sharc::Error for " << path;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), Result::InvalidArgument) << what;
    EXPECT_NE(what.find("SHARC_TOPO_FILE"), std::string::npos) << what;
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(detail), std::string::npos) << what;
  }
}

TEST(TopologyEnv, TopoFileSelectsTheXml) {
  const HostTopology h = loadWithEnv(kDataDir + "/p5-like.xml");
  EXPECT_EQ(h.source, kDataDir + "/p5-like.xml");
  EXPECT_EQ(h.nics.size(), 32u);
}

TEST(TopologyEnv, MissingOrGarbageFileIsAClearError) {
  expectTopoFileError("/nonexistent/sharc-topo.xml", "cannot read the file");
  const std::string garbage = ::testing::TempDir() + "sharc-topo-garbage.xml";
  {
    std::ofstream out(garbage);
    out << "this is not <xml at all\n";
  }
  expectTopoFileError(garbage, "not a valid hwloc XML topology");
  std::remove(garbage.c_str());
}

}  // namespace
}  // namespace sharc::topo
