// Cross-memory attach helpers: probing, reading, and clear errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "transport/cma.hpp"

namespace sharc::transport {
namespace {

TEST(Cma, ReadsFromAnotherProcess) {
  cmaAllowPeers();
  std::vector<int> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int>(i * 3);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {  // the child keeps its copy of `data` alive until the parent has read it
    char c;
    close(ready[1]);
    (void)!read(ready[0], &c, 1);
    _exit(0);
  }
  close(ready[0]);
  ASSERT_TRUE(cmaProbe(child, cmaProbeAddress()));
  std::vector<int> copy(data.size(), -1);
  EXPECT_EQ(cmaRead(child, reinterpret_cast<uint64_t>(data.data()), copy.data(),
                    copy.size() * sizeof(int)),
            "");
  EXPECT_EQ(copy, data);
  (void)!write(ready[1], "x", 1);
  close(ready[1]);
  waitpid(child, nullptr, 0);
}

TEST(Cma, ErrorsNameTheProcessAndTheCause) {
  char buf[8];
  const std::string err = cmaRead(0x3fffffff, cmaProbeAddress(), buf, sizeof(buf));
  EXPECT_NE(err.find("1073741823"), std::string::npos) << err;
  EXPECT_NE(err.find("process_vm_readv"), std::string::npos) << err;
  EXPECT_FALSE(cmaProbe(0x3fffffff, cmaProbeAddress()));
  // A bad address in a live process (our own) fails cleanly too.
  EXPECT_NE(cmaRead(getpid(), 8, buf, sizeof(buf)), "");
}

}  // namespace
}  // namespace sharc::transport
