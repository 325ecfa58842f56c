// The device path of CommunicatorImpl (docs/gpu.md): a call's schedule runs on device buffers,
// its reductions and copies on a device queue; each link carries device memory itself where
// the endpoint's transport to that rank has FI_HMEM, and stages each message through host
// memory where not. The links are decided once per communicator and named in the log.
#include <algorithm>
#include <sstream>

#include "core/collective.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "runtime/communicator_impl.hpp"

namespace sharc::detail {
namespace {

// "0-2,5" for the ranks whose flag equals `want` (the log's rank lists).
std::string rankList(const std::vector<uint8_t>& flags, bool want, int self) {
  std::string out;
  const int n = static_cast<int>(flags.size());
  for (int r = 0; r < n;) {
    if (r == self || (flags[r] != 0) != want) {
      ++r;
      continue;
    }
    int end = r;
    while (end + 1 < n && end + 1 != self && (flags[end + 1] != 0) == want) ++end;
    out +=
        (out.empty() ? "" : ",") + std::to_string(r) + (end > r ? "-" + std::to_string(end) : "");
    r = end + 1;
  }
  return out;
}

}  // namespace

void CommunicatorImpl::decideDeviceLinks(DeviceResources& dev) const {
  CommState& c = *state_;
  if (!c.directLinks.empty()) return;
  transport::Endpoint& ep = c.engine->endpoint();
  c.directLinks.assign(static_cast<size_t>(c.size), 0);
  c.stagedLinks.assign(static_cast<size_t>(c.size), 0);
  std::string stagedWhy;
  int direct = 0, staged = 0;
  for (int r = 0; r < c.size; ++r) {
    if (r == c.rank) continue;
    std::string why;
    if (ep.hmemTo(c.peers[static_cast<size_t>(r)], why)) {
      c.directLinks[static_cast<size_t>(r)] = 1;
      ++direct;
    } else {
      ++staged;
      if (stagedWhy.empty()) stagedWhy = why;
    }
  }
  // A provider may offer FI_HMEM yet not register this kind of memory (a libfabric built
  // without CUDA): one registration of device scratch says, before any link relies on it.
  if (direct > 0 && dev.registrations() != nullptr) {
    core::QueueMemory probe = dev.scratch.acquire(4096);
    const std::string err = dev.registrations()->ensure(probe.data());
    dev.scratch.release(std::move(probe));
    if (!err.empty()) {
      std::fill(c.directLinks.begin(), c.directLinks.end(), 0);
      staged += direct;
      direct = 0;
      stagedWhy = err;
    }
  }
  c.devicePath = staged == 0 ? "device-direct" : direct == 0 ? "device-staged" : "device-mixed";
  std::ostringstream os;
  os << "device path (" << dev.queue().name() << " queue): ";
  if (direct > 0)
    os << "direct to ranks " << rankList(c.directLinks, true, c.rank) << " over "
       << ep.providerName() << " (FI_HMEM)";
  if (direct > 0 && staged > 0) os << "; ";
  if (staged > 0)
    os << "staged through host memory to ranks " << rankList(c.directLinks, false, c.rank) << " ("
       << stagedWhy << ")";
  c.deviceLinksNote = os.str();
  SHARC_INFO("rank " << c.rank << ": " << c.deviceLinksNote);
  c.deviceCall = algo::deviceCallRates(tunerParams(), dev.queue().deviceIsHost());
  for (int r = 0; r < c.size; ++r) {
    if (r == c.rank || c.directLinks[static_cast<size_t>(r)] != 0) continue;
    const bool sameNode =
        c.nodes.size() != c.size ||
        c.nodes.nodeOf[static_cast<size_t>(r)] == c.nodes.nodeOf[static_cast<size_t>(c.rank)];
    (sameNode ? c.deviceCall.stagedLocal : c.deviceCall.stagedFabric) = true;
  }
}

void CommunicatorImpl::useDevice(algo::ScheduleContext& ctx, DeviceResources& dev,
                                 CollectiveKind kind, const void* send, void* recv, size_t count,
                                 DataType type, int root) {
  CommState& c = *state_;
  decideDeviceLinks(dev);
  ctx.pids = nullptr;  // no single-copy reads of peers' memory: the CPU must not touch it
  ctx.device = &dev.queue();
  ctx.deviceScratch = &dev.scratch;
  ctx.staging = &dev.staging;
  ctx.directLinks = &c.directLinks;
  if (count == 0 || c.devicePath == std::string_view("device-staged")) return;
  // The call's buffers are registered where a link carries them directly.
  const bool readsSend = kind != CollectiveKind::Broadcast || root == c.rank;
  (void)type;
  for (const void* p : {readsSend ? send : nullptr, static_cast<const void*>(recv)}) {
    if (p == nullptr || dev.registrations() == nullptr) continue;
    const std::string err = dev.registrations()->ensure(p);
    if (err.empty()) continue;
    SHARC_WARN("rank " << c.rank << ": " << core::collectiveName(kind)
                       << ": every link of this call is staged: " << err);
    ctx.directLinks = &c.stagedLinks;
    return;
  }
}

void CommunicatorImpl::registerScratch(const algo::Schedule& schedule, DeviceResources& dev) {
  if (schedule.context().directLinks != &state_->directLinks || dev.registrations() == nullptr ||
      state_->devicePath == std::string_view("device-staged"))
    return;
  for (const auto& [p, bytes] : schedule.deviceScratchRanges()) {
    (void)bytes;
    const std::string err = dev.registrations()->ensure(p);
    if (!err.empty())
      throw Error(Result::SystemError,
                  schedule.describe() + ": device scratch: " + err +
                      " (SHARC_DEVICE_PATH=staged stages every call through host memory)");
  }
}

std::string CommunicatorImpl::dataPath() const {
  if (core::Config::get().devicePath != core::DevicePath::Host || state_->size == 1) return "host";
  std::lock_guard<std::mutex> lock(state_->engine->mu);
  return state_->deviceLinksNote.empty()
             ? "device path (host queue): links decided at the first call"
             : state_->deviceLinksNote;
}

}  // namespace sharc::detail
