#include "gpu_probe.hpp"

#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace sharc::testing {

bool cudaDevicePresent(std::string* why) {
  static std::string reason;
  static const bool present = [] {
    int fds[2];
    if (pipe(fds) != 0) {
      reason = "pipe failed";
      return false;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      int count = 0;
      const cudaError_t status = cudaGetDeviceCount(&count);
      std::string msg = status != cudaSuccess ? std::string(cudaGetErrorName(status)) + ": " +
                                                    cudaGetErrorString(status)
                                              : (count == 0 ? "no CUDA device" : "");
      if (write(fds[1], msg.data(), msg.size()) < 0) _exit(3);
      _exit(status == cudaSuccess && count > 0 ? 0 : 1);
    }
    close(fds[1]);
    char buf[512] = {};
    const ssize_t got = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    reason = got > 0 ? std::string(buf, static_cast<size_t>(got)) : "probe child failed";
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  if (why) *why = reason;
  return present;
}

}  // namespace sharc::testing
