// Writes the seed corpora of the fuzz targets (corpus/<target>/) from real examples produced
// by sharc's own code: encoded ids and handles, the bytes a real root server sends and a
// real client sends, the slots a real ShmEndpoint writes, a real shared allocation's
// description, the tuner's own parameter text and environment settings of docs/environment.md.
// Usage: fuzz_make_seeds DIR (tools/fuzz.sh --seed runs it on tests/fuzz/corpus).
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sharc/error.hpp>
#include <string>
#include <vector>

#include "algorithms/tuner.hpp"
#include "bootstrap/bootstrap.hpp"
#include "bootstrap/protocol.hpp"
#include "bootstrap/socket.hpp"
#include "core/config.hpp"
#include "fuzz_common.hpp"
#include "net_handle.hpp"
#include "transport/shared_buffers.hpp"
#include "transport/shm_endpoint.hpp"
#include "transport/shm_segment.hpp"

namespace {

namespace fs = std::filesystem;
namespace proto = sharc::bootstrap::protocol;
namespace net = sharc::bootstrap::net;
using sharc::fuzz::broken;

fs::path root;

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary | std::ios::trunc) << bytes;
}

std::string u16(size_t v) {
  return std::string{static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff)};
}
std::string u64(uint64_t v) {
  std::string s;
  proto::putU64(s, v);
  return s;
}
std::string blobFrame(const std::string& blob) {
  std::string s;
  proto::putU32(s, static_cast<uint32_t>(blob.size()));
  return s + blob;
}

void uniqueIds() {
  for (const auto& [name, host] : {std::pair{"ipv4", "127.0.0.1"}, std::pair{"ipv6", "::1"}}) {
    const sharc::UniqueId id =
        sharc::bootstrap::encodeUniqueId({host, 29500, sharc::fuzz::kRootToken});
    write("unique_id", name, std::string(id.bytes.data(), id.bytes.size()));
  }
}

// What a real root server sends rank 0 of `nranks` over `rounds` rounds (each rank sends the
// round + 1 bytes the fuzz client sends), then, if `abort`, when nobody starts another round
// within the server's timeout (an abort notice).
std::string rootStream(int nranks, int rounds, bool abort) {
  auto server = sharc::bootstrap::RootServer::start(
      "127.0.0.1", 0, sharc::fuzz::kRootToken, nranks,
      abort ? std::chrono::milliseconds(500) : std::chrono::milliseconds(10000));
  const auto at = server->address();
  const auto deadline = net::deadlineAfter(std::chrono::seconds(10));
  std::vector<net::Fd> fds;
  std::string got;
  for (int r = 0; r < nranks; ++r) {
    std::string error;
    bool timedOut = false;
    fds.push_back(net::connectWithRetry(at.host, at.port, deadline, &error, &timedOut));
    proto::Hello h;
    h.token = sharc::fuzz::kRootToken;
    h.rank = r;
    h.nranks = nranks;
    const std::string hello = h.encode();
    if (net::sendAll(fds.back().get(), hello.data(), hello.size(), deadline) != net::IoResult::Ok)
      broken("hello");
  }
  auto recvExactly = [&](int fd, size_t n, std::string* keep) {
    std::string buf(n, '\0');
    if (net::recvAll(fd, buf.data(), n, deadline) != net::IoResult::Ok) broken("recv");
    if (keep) *keep += buf;
  };
  for (int r = 0; r < nranks; ++r) recvExactly(fds[r].get(), 8, r == 0 ? &got : nullptr);
  for (int round = 0; round < rounds; ++round) {
    const std::string blob(static_cast<size_t>(round + 1), 'x');
    for (auto& fd : fds) {
      const std::string f = blobFrame(blob);
      net::sendAll(fd.get(), f.data(), f.size(), deadline);
    }
    for (int r = 0; r < nranks; ++r)
      recvExactly(fds[r].get(), 12 + nranks * (4 + blob.size()), r == 0 ? &got : nullptr);
  }
  if (abort) {
    ::fcntl(fds[0].get(), F_SETFL, 0);  // blocking: wait for the notice and the close
    char buf[4096];
    for (ssize_t n; (n = ::recv(fds[0].get(), buf, sizeof buf, 0)) > 0;)
      got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

void bootstrapClient() {
  // First byte: nranks - 1 (bits 0-1), rank (bits 2-3), rounds - 1 (bits 4-5).
  write("bootstrap_client", "1rank-1round-abort", std::string(1, 0x00) + rootStream(1, 1, true));
  write("bootstrap_client", "2ranks-2rounds-abort", std::string(1, 0x11) + rootStream(2, 2, true));
  write("bootstrap_client", "3ranks-3rounds", std::string(1, 0x22) + rootStream(3, 3, false));
}

void rootServer() {
  // Byte 0: nranks (0: from the first hello); byte 1: connections - 1, bit 4+i: valid hello
  // for connection i; then {u16 length, bytes} per connection.
  auto hello = [](int rank, int nranks) {
    proto::Hello h;
    h.token = sharc::fuzz::kRootToken;
    h.rank = rank;
    h.nranks = nranks;
    return h.encode();
  };
  std::string two = {2, 1};
  for (int r = 0; r < 2; ++r) {
    const std::string c = hello(r, 2) + blobFrame("a") + blobFrame("bb");
    two += u16(c.size()) + c;
  }
  write("root_server", "2ranks-raw-hellos", two);
  const std::string one = blobFrame("x");
  write("root_server", "1rank-auto-hello", std::string{1, 0x10} + u16(one.size()) + one);
  std::string three = {0, 2};
  for (int r = 0; r < 3; ++r) {
    const std::string c = hello(r, 3) + blobFrame(std::string(static_cast<size_t>(r), 'z'));
    three += u16(c.size()) + c;
  }
  write("root_server", "3ranks-from-hello", three);
}

void netHandles() {
  // A tcp provider's endpoint address is a sockaddr_in.
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(40123);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string address(reinterpret_cast<const char*>(&sa), sizeof sa);
  const sharc::nccl::ProcessIdentity who{0x1234567890abcdefull, 4242};
  unsigned char handle[sharc::nccl::kHandleBytes];
  sharc::nccl::encodeHandle({address, 7, who}, handle);
  write("net_handle", "listen-handle",
        std::string(1, 0) + std::string(reinterpret_cast<char*>(handle), sizeof handle));
  write("net_handle", "connect-request",
        std::string(1, 1) + sharc::nccl::encodeConnectRequest({address, 9, who}));
  write("net_handle", "accept-reply", std::string(1, 2) + sharc::nccl::encodeAcceptReply(11));
}

// The slots a real ShmEndpoint (local rank 1) writes for its sends to rank 0, as the fuzz
// target's raw-slot operations (op 0 with every field given), then a matching receive
// (op 4) and progress (op 6).
void shmFifo() {
  using namespace sharc::transport;
  const ShmGeometry g{2, sharc::fuzz::kShmSlots, sharc::fuzz::kShmSlotBytes};
  struct : TransferOwner {
    void onTransferDone(Transfer&, size_t, uint64_t) override {}
    void onTransferError(Transfer&, sharc::Result, const std::string&) override {}
  } owner;
  for (const size_t len : {size_t{100}, size_t{0}, size_t{200}}) {
    ShmSegment seg = ShmSegment::create(g.segmentBytes());
    ShmEndpoint sender(ShmSegment::open(seg.name(), seg.size()), g, 1, {0, 1},
                       {getpid(), getpid()});
    std::vector<char> payload(len, 'p');
    Transfer t{{}, &owner, 0};
    sender.postSend(0, 0x11, payload.data(), len, t);
    const auto* fifo = static_cast<const std::byte*>(seg.data()) + 4096 + 2 * g.fifoBytes();
    const uint64_t tail = *reinterpret_cast<const uint64_t*>(fifo);
    std::string ops;
    for (uint64_t s = 0; s < tail; ++s) {
      const std::byte* slot = fifo + 128 + (s % g.slots) * (64 + g.slotBytes);
      uint64_t tag, total;
      uint32_t bytes, flags;
      std::memcpy(&tag, slot, 8);
      std::memcpy(&total, slot + 8, 8);
      std::memcpy(&bytes, slot + 16, 4);
      std::memcpy(&flags, slot + 20, 4);
      ops += std::string{0, static_cast<char>(0xe0)} + u64(tag) + u64(total);
      ops += std::string(reinterpret_cast<const char*>(&bytes), 4) + static_cast<char>(flags);
    }
    // A receive for tag kTags[0] = 0x11 of 256 + 255 bytes, then progress.
    ops += std::string{4, static_cast<char>(0x80), static_cast<char>(0xff), 6, 6};
    write("shm_fifo", "send-" + std::to_string(len), ops);
  }
  // Well-formed messages queued by the fuzzer's peer, receives posted before and after.
  write("shm_fifo", "queued",
        std::string{4, 0, 100, 1, 0, 100, 6, 1, 1, static_cast<char>(200), 6, 4, 1,
                    static_cast<char>(250), 6, 6});
}

void sharedBuffers() {
  // Six words kept as describeShared wrote them (a real mapping), and the address moved.
  std::string keep;
  for (int w = 0; w < 6; ++w) keep += std::string(1, 0) + u64(0);
  write("shared_buffers", "real-description", keep);
  write("shared_buffers", "address+16", std::string(1, 2) + u64(16) + keep.substr(9));
}

void tunerFiles() {
  write("tuner_file", "defaults", sharc::algo::TunerParams::defaults().toText());
  write("tuner_file", "calibrated",
        "# sharc tuner parameters, measured by sharc-perf --calibrate on 4 ranks\n"
        "step_us = 3.100\n# 16 MiB memcpy, one core\ncopy.gbps = 9.500\n"
        "reduce.gbps = 6.250\nlocal.alpha_us = 1.200\nlocal.gbps = 7.000\n");
  for (const auto& e : fs::directory_iterator(root / "tuner_file")) {
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    sharc::core::parseTunerText(text, e.path().string());  // throws if a seed is not valid
  }
}

void environments() {
  // Records {u8 variable index (fuzz_env.cc's list), u8 length, value}.
  auto rec = [](int var, const std::string& v) {
    return std::string{static_cast<char>(var), static_cast<char>(v.size())} + v;
  };
  write("env", "sharc-root",
        rec(24, "10.0.0.1:29500") + rec(27, "1") + rec(31, "4") + rec(1, "8000") + rec(5, "512K") +
            rec(0, "INFO"));
  write("env", "torchrun", rec(25, "node-0") + rec(26, "29500") + rec(28, "0") + rec(32, "2"));
  write("env", "mpi-ipv6", rec(24, "[::1]:1") + rec(29, "3") + rec(33, "8") + rec(35, "s3cret"));
  write("env", "knobs",
        rec(16, "eth0,eth1") + rec(15, "rotated") + rec(14, "auto") + rec(11, "0") +
            rec(17, "2000") + rec(21, "1500") + rec(6, "4M") + rec(7, "copy.gbps = 9\n"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  root = argv[1];
  ::setenv("SHARC_DEBUG", "NONE", 1);
  uniqueIds();
  bootstrapClient();
  rootServer();
  netHandles();
  shmFifo();
  sharedBuffers();
  tunerFiles();
  environments();
  std::printf("seeds written to %s\n", argv[1]);
  return 0;
}
