// Built against an installed sharc: one rank, one AllReduce, through the public headers only.
#include <sharc/sharc.h>

#include <cstdio>
#include <sharc/communicator.hpp>

int main() {
  auto comm = sharc::Communicator::createFromEnvironment();
  double in[3] = {1.5, 2.5, -1}, out[3] = {};
  comm->allReduce(in, out, 3, sharc::DataType::Float64, sharc::RedOp::Sum);
  int version = 0;
  sharcGetVersion(&version);
  std::printf("consumer: size %d, result %g %g %g, version %d\n", comm->size(), out[0], out[1],
              out[2], version);
  return (out[0] == 1.5 && out[1] == 2.5 && out[2] == -1) ? 0 : 1;
}
