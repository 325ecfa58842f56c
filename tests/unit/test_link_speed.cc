// The fabric link a host describes: NIC line rates from a fake sysfs tree, summed over rails,
// and SHARC_NIC_MBITS (an emulated link's shaped rate) in their place.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sharc/error.hpp>
#include <string>

#include "core/config.hpp"
#include "topology/link_speed.hpp"

namespace sharc::topo {
namespace {

namespace fs = std::filesystem;

class FakeSys : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sharc-sysfs-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    write("class/net/eth0/speed", "25000\n");
    write("class/net/eth1/speed", "25000\n");
    write("class/net/down0/speed", "-1\n");            // what a link without carrier says
    for (const char* nic : {"eth0", "eth1", "down0"})  // on a bus (sysfs links the device)
      fs::create_directories(root_ + "/class/net/" + nic + "/device");
    write("class/net/veth0/speed", "10000\n");  // virtual: no device, a made-up rate
    write("class/infiniband/rdmap16s27/ports/1/rate", "100 Gb/sec (4X EDR)\n");
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(root_ + "/" + rel).parent_path());
    std::ofstream(root_ + "/" + rel) << text;
  }
  std::string root_;
};

TEST_F(FakeSys, EthernetAndRdmaRates) {
  EXPECT_EQ(nicMbits("eth0", root_), 25000);
  EXPECT_EQ(nicMbits("rdmap16s27", root_), 100000);
  EXPECT_EQ(nicMbits("down0", root_), 0);
  EXPECT_EQ(nicMbits("veth0", root_), 0);
  EXPECT_EQ(nicMbits("nope", root_), 0);
  EXPECT_EQ(nicMbits("../net/eth0", root_), 0);  // a name, not a path
}

TEST_F(FakeSys, RailsSumAndAnUnknownRailMakesTheSumUnknown) {
  const FabricLink two = fabricLink({"eth0", "eth1"}, 0, root_);
  EXPECT_EQ(two.mbits, 50000);
  EXPECT_EQ(two.firstMbits, 25000);
  EXPECT_EQ(two.source, "sysfs");
  EXPECT_EQ(fabricLink({"eth0", "veth0"}, 0, root_).mbits, 0);
  EXPECT_EQ(fabricLink({}, 0, root_).mbits, 0);
}

TEST_F(FakeSys, OverrideWinsPerNic) {
  const FabricLink l = fabricLink({"veth0", "eth1"}, 200, root_);
  EXPECT_EQ(l.mbits, 400);
  EXPECT_EQ(l.firstMbits, 200);
  EXPECT_EQ(l.source, "SHARC_NIC_MBITS");
  EXPECT_EQ(fabricLink({}, 200, root_).mbits, 0);  // no NIC named: nothing to scale
}

// SHARC_NIC_MBITS: a positive rate in Mbit/s, else an error naming the variable.
TEST(NicMbitsVariable, ParsedOrNamedInTheError) {
  ::setenv("SHARC_NIC_MBITS", "200", 1);
  EXPECT_EQ(core::Config::load().nicMbits, 200);
  for (const char* bad : {"fast", "0", "-5", "100mbit"}) {
    ::setenv("SHARC_NIC_MBITS", bad, 1);
    try {
      core::Config::load();
      ADD_FAILURE() << "accepted SHARC_NIC_MBITS='" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("SHARC_NIC_MBITS"), std::string::npos) << e.what();
    }
  }
  ::unsetenv("SHARC_NIC_MBITS");
  EXPECT_EQ(core::Config::load().nicMbits, 0);
}

}  // namespace
}  // namespace sharc::topo
