// symbol_check <libnccl-net-sharc.so>: loads the plugin as NCCL does (dlopen RTLD_NOW |
// RTLD_LOCAL) in a process with no CUDA, checks that every plugin struct resolves and is named
// "sharc", that the symbols stay local to the handle, and that neither loading nor
// initializing the v11 net plugin nor reading its properties maps libcuda / libcudart (the
// plugin asks CUDA about device memory only in a process that has loaded it), and that the
// properties say host memory only. Prints PASS or FAIL; exit 0 or 1.
#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "nccl_abi.h"

namespace {

std::vector<std::string> failures;

void check(bool ok, const std::string& what) {
  if (!ok) {
    failures.push_back(what);
    std::fprintf(stderr, "symbol_check: FAILED: %s\n", what.c_str());
  }
}

void logger(ncclDebugLogLevel level, unsigned long, const char* file, int line, const char* fmt,
            ...) {
  char text[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  std::fprintf(stderr, "NCCL(%d) %s:%d %s\n", static_cast<int>(level), file ? file : "?", line,
               text);
}

// The CUDA libraries mapped into this process ("" if none).
std::string cudaMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line))
    if (line.find("libcuda.so") != std::string::npos ||
        line.find("libcudart.so") != std::string::npos ||
        line.find("libnccl.so") != std::string::npos)
      found += line + "\n";
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <libnccl-net-sharc.so>\n", argv[0]);
    return 2;
  }
  check(cudaMappings().empty(), "CUDA already mapped before loading (test environment?)");
  void* dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    std::printf("FAIL: symbol_check: dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  for (const char* kind : {"ncclNetPlugin_v", "ncclCollNetPlugin_v"})
    for (int v = 8; v <= 11; ++v) {
      const std::string symbol = kind + std::to_string(v);
      // Every plugin struct starts with `const char* name`.
      const auto* plugin = static_cast<const char* const*>(dlsym(dl, symbol.c_str()));
      check(plugin != nullptr, symbol + " does not resolve");
      if (plugin)
        check(*plugin && std::strcmp(*plugin, "sharc") == 0,
              symbol + ".name is '" + (*plugin ? *plugin : "(null)") + "', expected 'sharc'");
      // RTLD_LOCAL: nothing leaks into the global namespace other plugins resolve against.
      check(dlsym(RTLD_DEFAULT, symbol.c_str()) == nullptr, symbol + " visible globally");
    }
  std::string mapped = cudaMappings();
  check(mapped.empty(), "CUDA / NCCL libraries mapped after dlopen:\n" + mapped);

  if (const auto* net = static_cast<const ncclNet_v11_t*>(dlsym(dl, "ncclNetPlugin_v11"))) {
    void* ctx = nullptr;
    ncclNetCommConfig_v11_t config{-1};
    const ncclResult_t init = net->init(&ctx, 0x5eed, &config, logger, nullptr);
    check(init == ncclSuccess, "ncclNetPlugin_v11.init returned " + std::to_string(init));
    if (init == ncclSuccess) {
      int ndev = 0;
      const ncclResult_t devices = net->devices(&ndev);
      check(devices == ncclSuccess && ndev >= 1, "ncclNetPlugin_v11.devices returned " +
                                                     std::to_string(devices) + ", ndev " +
                                                     std::to_string(ndev));
      mapped = cudaMappings();
      check(mapped.empty(), "CUDA / NCCL libraries mapped after init + devices:\n" + mapped);
      for (int dev = 0; dev < ndev; ++dev) {
        ncclNetProperties_v11_t props{};
        check(net->getProperties(dev, &props) == ncclSuccess,
              "ncclNetPlugin_v11.getProperties(" + std::to_string(dev) + ") failed");
        check(props.ptrSupport == NCCL_PTR_HOST,
              "device " + std::to_string(dev) + " reports ptrSupport " +
                  std::to_string(props.ptrSupport) + " in a process without CUDA");
      }
      mapped = cudaMappings();
      check(mapped.empty(), "CUDA / NCCL libraries mapped after getProperties:\n" + mapped);
      check(net->finalize(ctx) == ncclSuccess, "ncclNetPlugin_v11.finalize failed");
    }
  }
  if (dlclose(dl) != 0) {
    const char* why = dlerror();
    check(false, std::string("dlclose failed: ") + (why != nullptr ? why : "?"));
  }

  if (failures.empty()) {
    std::printf("PASS: symbol_check: 8 plugin structs named 'sharc', loaded RTLD_LOCAL, no CUDA\n");
    return 0;
  }
  std::printf("FAIL: symbol_check: %zu problem(s), first: %s\n", failures.size(),
              failures.front().c_str());
  return 1;
}
