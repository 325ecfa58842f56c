// sharc-topo: prints what sharc sees on this host: packages, NUMA nodes, GPUs, NICs and the
// PCIe switches between them, the local rank -> GPU/NIC/CPU placement, and the libfabric
// providers and domains (with the one sharc would choose).
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <sharc/error.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/config.hpp"
#include "topology/nic_mapping.hpp"
#include "topology/topology.hpp"
#include "transport/fabric.hpp"
#include "transport/provider.hpp"

namespace {

using namespace sharc;
using topo::HostTopology;
using topo::PciDevice;
using topo::RankPlacement;

struct Options {
  std::string topoFile;  // --topo
  bool json = false;
  int localRanks = 0;  // 0: launcher's local size, else #GPUs, else 1
};

const char kUsage[] =
    "usage: sharc-topo [--topo FILE] [--local-ranks N] [--json]\n"
    "  --topo FILE       read an hwloc XML topology (lstopo --of xml) instead of this host's;\n"
    "                    same as SHARC_TOPO_FILE\n"
    "  --local-ranks N   ranks per host for the placement table (default: the launcher's\n"
    "                    local size, else the number of GPUs, else 1)\n"
    "  --json            one JSON object instead of text\n";

std::optional<int> parseInt(const char* text) {
  int value = 0;
  const char* end = text + std::strlen(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  // Slurm writes SLURM_NTASKS_PER_NODE as "4" or "4(x2)": the leading number is what counts.
  if (ec != std::errc() || ptr == text) return std::nullopt;
  return value;
}

// The launcher's view of this process: not SHARC_* variables (those are config.cc's), but
// the local rank and size Open MPI, torchrun and Slurm export.
struct LocalLaunch {
  std::string source;  // empty: not launched by one of them
  int localRank = -1;
  int localSize = -1;
  int rank = -1;
  int worldSize = -1;
};

LocalLaunch readLocalLaunch() {
  LocalLaunch out;
  const char* const vars[][3] = {
      {"Open MPI", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"torchrun", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"Slurm", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
  };
  for (const auto& v : vars) {
    const char* rank = std::getenv(v[1]);
    if (rank == nullptr || *rank == '\0') continue;
    out.source = v[0];
    out.localRank = parseInt(rank).value_or(-1);
    if (const char* size = std::getenv(v[2])) out.localSize = parseInt(size).value_or(-1);
    break;
  }
  try {
    if (auto env = core::readLaunchEnv()) {
      out.rank = env->rank;
      out.worldSize = env->worldSize;
    }
  } catch (const Error&) {
    // Incomplete bootstrap variables are the communicator's problem, not this report's.
  }
  return out;
}

struct Provider {
  std::string provider, domain, fabric;
  std::string chosen;  // "multi-host", "single-host", "both" or ""
};

// What sharc's transport would open, in its candidate order with its domain choice:
// {provider, domain, fabric}, all empty when no candidate works.
struct Choice {
  std::string provider, domain, fabric;
  std::string text() const {
    return provider.empty() ? "-" : provider + " (domain " + domain + ", fabric " + fabric + ")";
  }
};

struct FabricReport {
  std::vector<Provider> providers;
  std::string error;
  Choice multiHost, singleHost;
};

Choice sharcChoice(const std::string& configured, bool allLocal) {
  transport::EndpointOptions options;
  options.provider = configured;
  options.allLocal = allLocal;
  for (const std::string& name : transport::providerCandidates(options)) {
    std::string why;
    transport::FiInfoPtr info = transport::queryProvider(name, allLocal, why);
    if (!info || info->domain_attr == nullptr || info->domain_attr->name == nullptr) continue;
    Choice c{name, info->domain_attr->name, ""};
    if (info->fabric_attr != nullptr && info->fabric_attr->name != nullptr)
      c.fabric = info->fabric_attr->name;
    return c;
  }
  return {};
}

FabricReport readFabric() {
  FabricReport report;
  std::string configured;
  try {
    configured = core::Config::get().provider;
  } catch (const Error& e) {
    report.error = e.what();
  }
  report.multiHost = sharcChoice(configured, false);
  report.singleHost = sharcChoice(configured, true);

  transport::FiInfoPtr hints(fi_allocinfo());
  if (!hints) {
    report.error = "fi_allocinfo failed";
    return report;
  }
  // The endpoint kind sharc opens (transport/provider.cc asks for the same).
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  fi_info* raw = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 14), nullptr, nullptr, 0, hints.get(), &raw);
  if (rc != 0) {
    if (rc != -FI_ENODATA) report.error = std::string("fi_getinfo: ") + fi_strerror(-rc);
    return report;
  }
  transport::FiInfoPtr all(raw);
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  for (const fi_info* it = all.get(); it != nullptr; it = it->next) {
    Provider p;
    if (it->fabric_attr != nullptr) {
      if (it->fabric_attr->prov_name != nullptr) p.provider = it->fabric_attr->prov_name;
      if (it->fabric_attr->name != nullptr) p.fabric = it->fabric_attr->name;
    }
    if (it->domain_attr != nullptr && it->domain_attr->name != nullptr)
      p.domain = it->domain_attr->name;
    if (!seen.insert({p.provider, p.domain, p.fabric}).second) continue;
    auto is = [&p](const Choice& c) {
      return p.provider == c.provider && p.domain == c.domain && p.fabric == c.fabric;
    };
    const bool m = is(report.multiHost);
    const bool s = is(report.singleHost);
    p.chosen = m && s ? "both" : m ? "multi-host" : s ? "single-host" : "";
    report.providers.push_back(p);
  }
  return report;
}

std::string join(const std::vector<std::string>& items, const char* sep = ",") {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string joinInts(const std::vector<int>& items) {
  std::vector<std::string> s;
  for (int i : items) s.push_back(std::to_string(i));
  return join(s);
}

std::string nicNames(const HostTopology& host, const std::vector<int>& nics) {
  std::vector<std::string> names;
  for (int n : nics) {
    const PciDevice& nic = host.nics[static_cast<size_t>(n)];
    names.push_back(nic.osDevices.empty() ? nic.busId : nic.osDevices.front());
  }
  return join(names);
}

std::string orDash(const std::string& s) {
  return s.empty() ? "-" : s;
}
std::string numaText(int node) {
  return node < 0 ? "-" : std::to_string(node);
}

void printText(const HostTopology& host, const LocalLaunch& launch,
               const std::vector<RankPlacement>& placements, const FabricReport& fabric) {
  std::printf("host %s (%s)\n", orDash(host.hostName).c_str(),
              host.source == "live" ? "live topology" : ("from " + host.source).c_str());
  if (launch.source.empty()) {
    std::printf("launch: no launcher environment (local ranks from --local-ranks or GPUs)\n");
  } else {
    std::printf("launch: %s, local rank %d of %d", launch.source.c_str(), launch.localRank,
                launch.localSize);
    if (launch.worldSize > 0) {
      std::printf(", rank %d of %d", launch.rank, launch.worldSize);
      if (launch.localSize > 0 && launch.worldSize % launch.localSize == 0)
        std::printf(", %d nodes", launch.worldSize / launch.localSize);
    }
    std::printf("\n");
  }
  std::printf("packages %zu, cores %u, PUs %u\n", host.packages.size(), host.cores, host.pus);
  for (const auto& p : host.packages)
    std::printf("  package %u  cpus %s  %s\n", p.osIndex, p.cpus.c_str(), p.model.c_str());
  std::printf("NUMA nodes %zu\n", host.numaNodes.size());
  for (const auto& n : host.numaNodes) {
    std::printf("  numa %u  cpus %s  memory %.1f GiB  package %s\n", n.osIndex, n.cpus.c_str(),
                static_cast<double>(n.memoryBytes) / (1u << 30), numaText(n.package).c_str());
  }
  std::printf("GPUs %zu\n", host.gpus.size());
  for (size_t i = 0; i < host.gpus.size(); ++i) {
    const PciDevice& g = host.gpus[i];
    std::printf("  gpu %zu  %s  %-24s numa %s  switch %s  [%s]\n", i, g.busId.c_str(),
                g.name.c_str(), numaText(g.numaNode).c_str(), g.switchId.c_str(),
                join(g.osDevices).c_str());
  }
  std::printf("NICs %zu\n", host.nics.size());
  for (size_t i = 0; i < host.nics.size(); ++i) {
    const PciDevice& n = host.nics[i];
    std::printf("  nic %zu  %s  %-12s %04x:%04x  numa %s  switch %s  %s\n", i, n.busId.c_str(),
                orDash(join(n.osDevices)).c_str(), n.vendorId, n.deviceId,
                numaText(n.numaNode).c_str(), n.switchId.c_str(), n.name.c_str());
  }
  std::printf("PCIe switches %zu\n", host.switches.size());
  for (const auto& s : host.switches) {
    std::printf("  switch %s  gpus %s  nics %s\n", s.id.c_str(), orDash(joinInts(s.gpus)).c_str(),
                orDash(joinInts(s.nics)).c_str());
  }
  std::printf("placement for %zu local ranks\n", placements.size());
  std::printf("  %5s %4s  %-12s %4s  %-16s %-16s %s\n", "rank", "gpu", "nics", "numa", "cpus",
              "nic names", "why");
  for (const RankPlacement& p : placements) {
    std::printf("  %5d %4s  %-12s %4s  %-16s %-16s %s%s\n", p.localRank,
                p.gpu < 0 ? "-" : std::to_string(p.gpu).c_str(), orDash(joinInts(p.nics)).c_str(),
                numaText(p.numaNode).c_str(), orDash(p.cpus).c_str(),
                orDash(nicNames(host, p.nics)).c_str(), p.reason.c_str(),
                p.localRank == launch.localRank ? "  <- this process" : "");
  }
  std::printf("libfabric providers (FI_EP_RDM, FI_TAGGED) on this machine%s\n",
              host.source == "live" ? "" : " (not the XML host)");
  if (!fabric.error.empty()) std::printf("  error: %s\n", fabric.error.c_str());
  std::printf("  %-16s %-16s %-24s %s\n", "provider", "domain", "fabric", "sharc's choice");
  for (const Provider& p : fabric.providers) {
    char line[512];
    std::snprintf(line, sizeof line, "  %-16s %-16s %-24s %s", p.provider.c_str(), p.domain.c_str(),
                  p.fabric.c_str(), p.chosen.c_str());
    std::string text = line;
    text.erase(text.find_last_not_of(' ') + 1);
    std::printf("%s\n", text.c_str());
  }
  std::printf("sharc would use: multi-host jobs %s; single-host jobs %s\n",
              fabric.multiHost.text().c_str(), fabric.singleHost.text().c_str());
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string quoteAll(const std::vector<std::string>& items) {
  std::vector<std::string> q;
  for (const auto& s : items) q.push_back(quote(s));
  return "[" + join(q, ", ") + "]";
}

std::string deviceJson(const PciDevice& d) {
  std::ostringstream os;
  char ids[32];
  std::snprintf(ids, sizeof ids, "%04x:%04x", d.vendorId, d.deviceId);
  os << "{\"bus_id\": " << quote(d.busId) << ", \"name\": " << quote(d.name)
     << ", \"pci_id\": " << quote(ids) << ", \"os_devices\": " << quoteAll(d.osDevices)
     << ", \"numa\": " << d.numaNode << ", \"package\": " << d.package
     << ", \"cpus\": " << quote(d.cpus) << ", \"switch\": " << quote(d.switchId)
     << ", \"pci_path\": " << quoteAll(d.pciPath) << "}";
  return os.str();
}

// One JSON object; arrays of objects put one element per line (easy to grep).
void printJson(const HostTopology& host, const LocalLaunch& launch,
               const std::vector<RankPlacement>& placements, const FabricReport& fabric) {
  std::ostringstream os;
  os << "{\n\"host\": " << quote(host.hostName) << ",\n\"source\": " << quote(host.source)
     << ",\n\"launch\": {\"launcher\": " << quote(launch.source)
     << ", \"local_rank\": " << launch.localRank << ", \"local_size\": " << launch.localSize
     << ", \"rank\": " << launch.rank << ", \"world_size\": " << launch.worldSize << "}"
     << ",\n\"cores\": " << host.cores << ",\n\"pus\": " << host.pus << ",\n\"packages\": [";
  const char* sep = "\n  ";
  for (const auto& p : host.packages) {
    os << sep << "{\"os_index\": " << p.osIndex << ", \"cpus\": " << quote(p.cpus)
       << ", \"model\": " << quote(p.model) << "}";
    sep = ",\n  ";
  }
  os << "],\n\"numa_nodes\": [";
  sep = "\n  ";
  for (const auto& n : host.numaNodes) {
    os << sep << "{\"os_index\": " << n.osIndex << ", \"cpus\": " << quote(n.cpus)
       << ", \"memory_bytes\": " << n.memoryBytes << ", \"package\": " << n.package << "}";
    sep = ",\n  ";
  }
  os << "],\n\"gpus\": [";
  sep = "\n  ";
  for (const auto& g : host.gpus) {
    os << sep << deviceJson(g);
    sep = ",\n  ";
  }
  os << "],\n\"nics\": [";
  sep = "\n  ";
  for (const auto& n : host.nics) {
    os << sep << deviceJson(n);
    sep = ",\n  ";
  }
  os << "],\n\"switches\": [";
  sep = "\n  ";
  for (const auto& s : host.switches) {
    os << sep << "{\"id\": " << quote(s.id) << ", \"gpus\": [" << joinInts(s.gpus)
       << "], \"nics\": [" << joinInts(s.nics) << "]}";
    sep = ",\n  ";
  }
  os << "],\n\"placement\": [";
  sep = "\n  ";
  for (const auto& p : placements) {
    os << sep << "{\"local_rank\": " << p.localRank << ", \"gpu\": " << p.gpu << ", \"nics\": ["
       << joinInts(p.nics) << "], \"numa\": " << p.numaNode << ", \"cpus\": " << quote(p.cpus)
       << ", \"reason\": " << quote(p.reason) << "}";
    sep = ",\n  ";
  }
  os << "],\n\"providers\": [";
  sep = "\n  ";
  for (const auto& p : fabric.providers) {
    os << sep << "{\"provider\": " << quote(p.provider) << ", \"domain\": " << quote(p.domain)
       << ", \"fabric\": " << quote(p.fabric) << ", \"chosen\": " << quote(p.chosen) << "}";
    sep = ",\n  ";
  }
  auto choice = [](const Choice& c) {
    return "{\"provider\": " + quote(c.provider) + ", \"domain\": " + quote(c.domain) +
           ", \"fabric\": " + quote(c.fabric) + "}";
  };
  os << "],\n\"choice\": {\"multi_host\": " << choice(fabric.multiHost)
     << ", \"single_host\": " << choice(fabric.singleHost) << "}";
  if (!fabric.error.empty()) os << ",\n\"fabric_error\": " << quote(fabric.error);
  os << "\n}\n";
  std::fputs(os.str().c_str(), stdout);
}

// Returns false (after printing why) when the arguments are wrong.
bool parseArgs(int argc, char** argv, Options& opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) return nullptr;
      return argv[++i];
    };
    if (arg == "--json") {
      opt.json = true;
    } else if (arg == "--topo") {
      const char* v = value();
      if (v == nullptr) {
        std::fprintf(stderr, "sharc-topo: --topo needs a FILE\n%s", kUsage);
        return false;
      }
      opt.topoFile = v;
    } else if (arg == "--local-ranks" || arg == "-N") {
      const char* v = value();
      const std::optional<int> n = v != nullptr ? parseInt(v) : std::nullopt;
      if (!n || *n < 1 || *n > 4096 || std::to_string(*n) != v) {
        std::fprintf(stderr, "sharc-topo: --local-ranks needs an integer in 1..4096\n%s", kUsage);
        return false;
      }
      opt.localRanks = *n;
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "sharc-topo: unknown argument '%s'\n%s", arg.c_str(), kUsage);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parseArgs(argc, argv, opt)) return 2;
  try {
    const HostTopology host =
        opt.topoFile.empty() ? HostTopology::load() : HostTopology::loadXml(opt.topoFile, "--topo");
    const LocalLaunch launch = readLocalLaunch();
    int localRanks = opt.localRanks;
    if (localRanks == 0 && launch.localSize > 0) localRanks = launch.localSize;
    if (localRanks == 0) localRanks = std::max<int>(1, static_cast<int>(host.gpus.size()));
    const std::vector<RankPlacement> placements = topo::placeRanks(host, localRanks);
    const FabricReport fabric = readFabric();
    if (opt.json) {
      printJson(host, launch, placements, fabric);
    } else {
      printText(host, launch, placements, fabric);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sharc-topo: %s\n", e.what());
    return 1;
  }
  return 0;
}
