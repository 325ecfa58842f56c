// sharc-plan: the planner (include/sharc/plan.hpp, plan_fsdp.hpp) on the command line.
//   sharc-plan collective  predicted time, busbw and algorithm per node count and size, with
//                          the physical bound (and --plot FILE.png through matplotlib)
//   sharc-plan fsdp        the ranked (hybrid_shard_degree, tensor_parallel_degree) table
//   sharc-plan backtest    the cost model against published NCCL runs
//   sharc-plan simulate    the model beside a replay of the engine's schedules (up to 8,192 ranks)
//   sharc-plan cluster     a cluster (a profile) as a cluster file that loads back the same
// This file: main, the shared option handling and `collective`; sharc_plan_fsdp.cc the rest.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "cluster_model.hpp"
#include "nccl_backtest.hpp"
#include "sharc/error.hpp"
#include "sharc/plan_fsdp.hpp"
#include "sharc_plan_cli.hpp"

extern char** environ;

namespace sharc::plan::cli {
namespace {

const char kUsage[] =
    "usage: sharc-plan collective|fsdp|backtest|simulate|cluster [options]   (sharc-plan --help)\n";

const char kHelp[] =
    "sharc-plan: sharc's cost model (the tuner's) for clusters you do not have.\n"
    "\n"
    "sharc-plan collective CLUSTER --collective all_gather|reduce_scatter|all_reduce\n"
    "    [--nodes 1,2,4,...] [-b 1M] [-e 16G] [-f 2] [--algorithm NAME] [--path both]\n"
    "    [--json] [--plot F.png]\n"
    "  per node count and size: predicted time, bus bandwidth (nccl-tests' busbw), the\n"
    "  tuner's algorithm and chunk, the physical bound's busbw and the share of it reached,\n"
    "  and NCCL's busbw: published where the backtest carries a run of that shape, else\n"
    "  sharc's backtested model of NCCL (marked *), with sharc's busbw over it (x_nccl).\n"
    "  --path     direct|staged|both: the data path of GPU buffers, device-direct (NICs and\n"
    "             NVLink on HBM) or staged (through pinned host memory over PCIe); both side\n"
    "             by side (the default where the cluster has a PCIe rate, else direct)\n"
    "  --nodes    node counts (default 1,2,4,...,1024)   -b/-e/-f  sizes as nccl-tests\n"
    "             (AllGather output, ReduceScatter input, AllReduce vector; K/M/G/T = 2^10..)\n"
    "  --algorithm ring|recursive_doubling|bruck|hierarchical|direct  force one\n"
    "  --plot F.png  busbw against size, one line per node count, the bound dashed\n"
    "             (runs sharc_plan_plot.py under /usr/bin/python3 with matplotlib)\n"
    "\n"
    "sharc-plan fsdp CLUSTER --nodes N (--model NAME | --params P --layers L --hidden H\n"
    "    --seq S --vocab V [--batch B] [--param-bytes 2] [--tied]) [--gpu-memory GiB] [--json]\n"
    "  every valid (hybrid_shard_degree, tensor_parallel_degree) as sharc.torch builds the\n"
    "  mesh: memory per GPU and communication per step, ranked; the first line is the\n"
    "  recommendation. --batch is the micro-batch per GPU (default 1).\n"
    "\n"
    "sharc-plan backtest [--json]\n"
    "  the model of NCCL's AllReduce and AllGather against published nccl-tests runs over\n"
    "  EFA, with the error of each point; exit 1 if a point is outside its bound.\n"
    "\n"
    "sharc-plan simulate CLUSTER [--collective all_gather] [--nodes 2,4,8] [-b 1M] [-e 256M]\n"
    "    [-f 4] [--algorithm NAME] [--fabric] [--json]\n"
    "  the model's time beside a replay of every rank's real schedule over the same links\n"
    "  (same algorithm and chunk), and the model's error; at most 8,192 ranks and 80 million\n"
    "  operations in all (1,024 p5 nodes: hierarchical_bruck to 1 GiB, minutes per size).\n"
    "  --fabric   also rank 0's messages to other nodes: when the first started (lead_us),\n"
    "             how long at least one was moving (busy_us), and the gaps between (idle_us)\n"
    "\n"
    "sharc-plan cluster CLUSTER\n"
    "  the cluster as a cluster file (every key): edit a number of a profile, then pass the\n"
    "  file to --cluster-file; unedited, it predicts exactly what the profile does.\n"
    "\n"
    "CLUSTER: --cluster NAME (a built-in profile) | --cluster-file F (`key = value` lines of\n"
    "  the Cluster fields) | --calibration F (a sharc-perf --calibrate file) | --this-host\n"
    "  (this process's tuner parameters: defaults + SHARC_TUNER_FILE; 1 rank per node);\n"
    "  [--ranks-per-node L] overrides the ranks per node, [--gpu-memory GiB] the memory.\n";

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Where sharc_plan_plot.py lies: next to the executable (build tree), or in
// ../share/sharc of it (install tree).
std::string plotScript() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string dir = ".";
  if (n > 0) {
    exe[n] = '\0';
    dir = exe;
    dir = dir.substr(0, dir.find_last_of('/'));
  }
  for (const std::string& p :
       {dir + "/sharc_plan_plot.py", dir + "/../share/sharc/sharc_plan_plot.py"})
    if (access(p.c_str(), R_OK) == 0) return p;
  throw Error(Result::SystemError, "--plot needs sharc_plan_plot.py next to " + dir + " or in " +
                                       dir + "/../share/sharc");
}

// Runs /usr/bin/python3 SCRIPT JSON PNG; waits at most 300 s.
int runPlot(const std::string& json, const std::string& png) {
  const std::string script = plotScript();
  char tmpl[] = "/tmp/sharc-plan-XXXXXX.json";
  const int fd = mkstemps(tmpl, 5);
  if (fd < 0) throw Error(Result::SystemError, "cannot create a temporary file");
  if (write(fd, json.data(), json.size()) != static_cast<ssize_t>(json.size())) {
    close(fd);
    unlink(tmpl);
    throw Error(Result::SystemError, std::string("cannot write ") + tmpl);
  }
  close(fd);
  const char* python = "/usr/bin/python3";
  std::vector<std::string> args = {python, script, tmpl, png};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, python, nullptr, nullptr, argv.data(), environ) != 0) {
    unlink(tmpl);
    throw Error(Result::SystemError, "--plot cannot run /usr/bin/python3");
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      unlink(tmpl);
      std::fprintf(stderr, "sharc-plan: the plot script ran past 300 s and was stopped\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  unlink(tmpl);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "sharc-plan: %s %s failed (exit %d): is python3-matplotlib installed?\n",
                 python, script.c_str(), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return WIFEXITED(status) && WEXITSTATUS(status) == 77 ? 77 : 1;
  }
  return 0;
}

}  // namespace

std::string Args::get(const std::string& k, const std::string& fallback) const {
  auto it = values.find(k);
  return it == values.end() ? fallback : it->second;
}

Args parseArgs(const std::string& command, int argc, char** argv,
               const std::vector<std::string>& withValue, const std::vector<std::string>& flags) {
  Args a;
  a.command = command;
  for (int i = 0; i < argc; ++i) {
    const std::string opt = argv[i];
    bool takes = false, known = false;
    for (const auto& w : withValue) known = known || (takes = takes || w == opt);
    for (const auto& f : flags) known = known || f == opt;
    if (!known)
      throw UsageError("sharc-plan " + command + ": unknown option '" + opt + "' (valid: " +
                       join(withValue) + (flags.empty() ? "" : ", ") + join(flags) + ")");
    if (takes) {
      if (i + 1 >= argc) throw UsageError("sharc-plan " + command + ": " + opt + " needs a value");
      a.values[opt] = argv[++i];
    } else {
      a.values[opt] = "";
    }
  }
  return a;
}

long long toInt(const std::string& opt, const std::string& text, long long min) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < min)
    throw UsageError(opt + " '" + text + "': expected a whole number >= " + std::to_string(min));
  return v;
}

double toDouble(const std::string& opt, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v <= 0)
    throw UsageError(opt + " '" + text + "': expected a number > 0");
  return v;
}

size_t toBytes(const std::string& opt, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  double scale = 1;
  const std::string unit = end ? end : "";
  if (unit == "K" || unit == "k")
    scale = 1024.0;
  else if (unit == "M" || unit == "m")
    scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    scale = -1;
  if (text.empty() || end == text.c_str() || scale < 0 || !std::isfinite(v) || v < 1 ||
      v * scale > 1e15)
    throw UsageError(opt + " '" + text + "': expected bytes >= 1 with an optional K, M, G or T " +
                     "(e.g. 1M, 16G), at most 1e15");
  return static_cast<size_t>(std::llround(v * scale));
}

std::string bytesText(double b) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (u < 4 && b >= 1024) b /= 1024, ++u;
  char out[32];
  std::snprintf(out, sizeof out, b == std::floor(b) ? "%.0f%s" : "%.1f%s", b, units[u]);
  return out;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\')
      out += '\\', out += ch;
    else if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      out += b;
    } else
      out += ch;
  }
  return out + "\"";
}

std::string jsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char b[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(b, sizeof b, "%.0f", v);
  else
    std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// The cluster as JSON with a cluster file's keys and values (clusterFileFields), so that
// its fields written as `key = value` lines load back to the same cluster.
std::string clusterJson(const Cluster& c) {
  std::string o = "{";
  for (const ClusterField& f : clusterFileFields(c))
    o += (o.size() > 1 ? ", " : "") + jsonString(f.key) + ": " +
         (f.text ? jsonString(f.value) : f.value);
  return o + "}";
}

int runCluster(const Args& a) {
  std::fputs(clusterFileText(clusterOf(a)).c_str(), stdout);
  return 0;
}

std::string clusterText(const Cluster& c) {
  char b[512];
  std::snprintf(b, sizeof b,
                "%s: %d ranks per node, fabric %.1f GB/s per node (%d rails, %.1f us), "
                "local %.1f GB/s per rank (%.1f us), efficiency %.3f",
                c.name.c_str(), c.ranksPerNode, c.fabricGBps, c.rails, c.fabricAlphaUs, c.localGBps,
                c.localAlphaUs, c.efficiency);
  return b;
}

Cluster clusterOf(const Args& a) {
  const int given =
      a.has("--cluster") + a.has("--cluster-file") + a.has("--calibration") + a.has("--this-host");
  if (given != 1)
    throw UsageError("sharc-plan " + a.command +
                     ": give exactly one of --cluster NAME (valid: " + join(builtinClusterNames()) +
                     "), --cluster-file F, --calibration F, --this-host");
  Cluster c;
  if (a.has("--this-host")) {
    c = thisHostCluster(1, 0);  // ranks and memory from the options below
  } else if (a.has("--cluster")) {
    const std::string name = a.get("--cluster");
    const auto names = builtinClusterNames();
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw UsageError("sharc-plan " + a.command + ": unknown --cluster '" + name +
                       "' (valid: " + join(names) + ")");
    c = builtinCluster(name);
  } else {
    c = loadClusterFile(a.has("--cluster-file") ? a.get("--cluster-file") : a.get("--calibration"));
  }
  if (a.has("--ranks-per-node"))
    c.ranksPerNode = static_cast<int>(toInt("--ranks-per-node", a.get("--ranks-per-node"), 1));
  if (a.has("--gpu-memory"))
    c.memoryBytes = toDouble("--gpu-memory", a.get("--gpu-memory")) * (1u << 30);
  return c;
}

int runCollective(const Args& a) {
  const Cluster cl = clusterOf(a);
  const std::string cname = a.get("--collective");
  Collective coll;
  if (cname == "all_gather")
    coll = Collective::AllGather;
  else if (cname == "reduce_scatter")
    coll = Collective::ReduceScatter;
  else if (cname == "all_reduce")
    coll = Collective::AllReduce;
  else
    throw UsageError("sharc-plan collective: --collective '" + cname +
                     "' (valid: all_gather, reduce_scatter, all_reduce)");
  std::vector<int> nodes;
  {
    std::stringstream ss(a.get("--nodes", "1,2,4,8,16,32,64,128,256,512,1024"));
    for (std::string item; std::getline(ss, item, ',');)
      nodes.push_back(static_cast<int>(toInt("--nodes", item, 1)));
    if (nodes.empty()) throw UsageError("--nodes: expected node counts like 1,2,4");
    for (int n : nodes)
      if (n > 65536) throw UsageError("--nodes: at most 65536 nodes, got " + std::to_string(n));
  }
  const size_t begin = toBytes("-b", a.get("-b", "1M")), end = toBytes("-e", a.get("-e", "16G"));
  const long long factor = toInt("-f", a.get("-f", "2"), 2);
  if (end < begin) throw UsageError("-e must be at least -b");
  const std::string algorithm = a.get("--algorithm");
  const char* algos[] = {"ring",   "recursive_doubling", "bruck",       "hierarchical",
                         "direct", "direct_read",        "direct_write"};
  if (!algorithm.empty() &&
      std::find(std::begin(algos), std::end(algos), algorithm) == std::end(algos))
    throw UsageError("--algorithm '" + algorithm +
                     "' (valid: ring, recursive_doubling, bruck, hierarchical, direct)");

  using algo::model::DataPath;
  const std::string path = a.get("--path", cl.pcieGBps > 0 ? "both" : "direct");
  if (path != "direct" && path != "staged" && path != "both")
    throw UsageError("--path '" + path + "' (valid: direct, staged, both)");
  if (path != "direct" && cl.pcieGBps <= 0)
    throw UsageError("--path " + path + ": cluster '" + cl.name +
                     "' has no PCIe rate for the staged path (cluster file key pcie_gbps)");
  const bool direct = path != "staged", staged = path != "direct";

  // One row per node count and size: the first path shown, the staged one beside it under
  // `both`, and NCCL's busbw: published where the backtest carries the run, else sharc's
  // backtested model of NCCL (gbps 0: neither).
  struct Row {
    Prediction main, staged;
    NcclBusbw nccl;
  };
  std::vector<Row> rows;
  for (int n : nodes)
    for (size_t b = begin; b <= end; b = static_cast<size_t>(b * factor)) {
      Row r;
      r.main = predictPath(cl, n, coll, b, direct ? DataPath::DeviceDirect : DataPath::Staged,
                           algorithm);
      if (direct && staged) r.staged = predictPath(cl, n, coll, b, DataPath::Staged, algorithm);
      r.nccl = ncclBusGBps(cl, n, coll, b);
      rows.push_back(r);
      if (b > end / factor) break;
    }
  const bool both = direct && staged;
  const auto pct = [](const Prediction& p) {
    return p.predictedUs > 0 ? 100.0 * p.boundUs / p.predictedUs : 0;
  };
  std::ostringstream json;
  json << "{\"cluster\": " << clusterJson(cl) << ", \"collective\": " << jsonString(cname)
       << ", \"algorithm\": " << jsonString(algorithm.empty() ? "tuner" : algorithm)
       << ", \"path\": " << jsonString(path) << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Prediction& p = rows[i].main;
    json << (i ? ",\n  " : "\n  ") << "{\"nodes\": " << p.nodes << ", \"ranks\": " << p.ranks
         << ", \"bytes\": " << p.bytes << ", \"algorithm\": " << jsonString(p.algorithm)
         << ", \"chunk_bytes\": " << p.chunkBytes << ", \"time_us\": " << jsonNumber(p.predictedUs)
         << ", \"busbw_gbps\": " << jsonNumber(p.busGBps)
         << ", \"bound_us\": " << jsonNumber(p.boundUs)
         << ", \"bound_busbw_gbps\": " << jsonNumber(p.boundBusGBps)
         << ", \"pct_of_bound\": " << jsonNumber(pct(p));
    if (both) {
      const Prediction& st = rows[i].staged;
      json << ", \"staged_algorithm\": " << jsonString(st.algorithm)
           << ", \"staged_chunk_bytes\": " << st.chunkBytes
           << ", \"staged_time_us\": " << jsonNumber(st.predictedUs)
           << ", \"staged_busbw_gbps\": " << jsonNumber(st.busGBps);
    }
    const NcclBusbw& nc = rows[i].nccl;
    json << ", \"nccl_busbw_gbps\": " << (nc.gbps > 0 ? jsonNumber(nc.gbps) : "null")
         << ", \"nccl_published\": " << (nc.published ? "true" : "false")
         << ", \"nccl_algorithm\": " << (nc.nccl.empty() ? "null" : jsonString(nc.nccl))
         << ", \"x_nccl\": " << (nc.gbps > 0 ? jsonNumber(p.busGBps / nc.gbps) : "null") << "}";
  }
  json << "\n]}\n";
  if (a.has("--json")) {
    std::fputs(json.str().c_str(), stdout);
  } else {
    std::printf("sharc-plan collective %s on %s\n  source: %s\n", cname.c_str(),
                clusterText(cl).c_str(), cl.source.c_str());
    if (staged)
      std::printf(
          "  staged: %.1f GB/s PCIe per GPU, host reductions at %.1f GB/s\n", cl.pcieGBps,
          cl.hostReduceGBps > 0 ? cl.hostReduceGBps : algo::TunerParams::defaults().reduceGbps);
    const char* bw = both ? "direct_bw" : direct ? "busbw" : "staged_bw";
    int last = -1;
    for (const Row& r : rows) {
      const Prediction& p = r.main;
      if (p.nodes != last) {
        std::printf("\n%6s %6s %8s %12s %10s %-18s %6s", "nodes", "ranks", "size", "time_us", bw,
                    "algorithm", "chunk");
        if (both) std::printf(" %12s %10s %-18s", "staged_us", "staged_bw", "staged_algorithm");
        std::printf(" %10s %7s %7s %9s\n", "bound", "%bound", "x_nccl", "nccl_bw");
      }
      last = p.nodes;
      std::printf("%6d %6d %8s %12.1f %10.2f %-18s %6s", p.nodes, p.ranks,
                  bytesText(static_cast<double>(p.bytes)).c_str(), p.predictedUs, p.busGBps,
                  p.algorithm.c_str(), bytesText(static_cast<double>(p.chunkBytes)).c_str());
      if (both)
        std::printf(" %12.1f %10.2f %-18s", r.staged.predictedUs, r.staged.busGBps,
                    r.staged.algorithm.c_str());
      char nccl[32] = "-", ratio[32] = "-";
      if (r.nccl.gbps > 0) {
        std::snprintf(nccl, sizeof nccl, "%.2f%s", r.nccl.gbps, r.nccl.published ? "" : "*");
        std::snprintf(ratio, sizeof ratio, "%.2fx", p.busGBps / r.nccl.gbps);
      }
      std::printf(" %10.2f %6.1f%% %7s %9s\n", p.boundBusGBps, pct(p), ratio, nccl);
    }
    std::printf(
        "\nbusbw, bound and nccl_bw in GB/s (nccl-tests' bus bandwidth); bound: every node "
        "injecting at full link speed (lowerBoundUs); %%bound of the %s path; nccl_bw: NCCL's "
        "published busbw (sharc-plan backtest's sources), * where sharc's backtested model of "
        "NCCL gives it instead, - where neither; x_nccl: the %s path's busbw / nccl_bw\n",
        direct ? "device-direct" : "staged", direct ? "device-direct" : "staged");
  }
  if (a.has("--plot")) {
    const int rc = runPlot(json.str(), a.get("--plot"));
    if (rc != 0) return rc;
    std::fprintf(stderr, "sharc-plan: wrote %s\n", a.get("--plot").c_str());
  }
  return 0;
}

}  // namespace sharc::plan::cli

int main(int argc, char** argv) {
  using namespace sharc::plan::cli;
  const std::vector<std::string> clusterOpts = {"--cluster", "--cluster-file", "--calibration",
                                                "--ranks-per-node", "--gpu-memory"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), clusterOpts.begin(), clusterOpts.end());
    return extra;
  };
  try {
    if (argc < 2)
      throw UsageError(
          "sharc-plan: give a subcommand: collective, fsdp, backtest, simulate, cluster");
    const std::string cmd = argv[1];
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::fputs(kHelp, stdout);
      return 0;
    }
    for (int i = 2; i < argc; ++i)
      if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
        std::fputs(kHelp, stdout);
        return 0;
      }
    if (cmd == "collective")
      return runCollective(parseArgs(
          cmd, argc - 2, argv + 2,
          with({"--collective", "--nodes", "-b", "-e", "-f", "--algorithm", "--path", "--plot"}),
          {"--json", "--this-host"}));
    if (cmd == "fsdp")
      return runFsdp(parseArgs(cmd, argc - 2, argv + 2,
                               with({"--model", "--nodes", "--params", "--layers", "--hidden",
                                     "--seq", "--batch", "--vocab", "--param-bytes"}),
                               {"--json", "--tied", "--this-host"}));
    if (cmd == "backtest")
      return runBacktestCommand(parseArgs(cmd, argc - 2, argv + 2, {}, {"--json"}));
    if (cmd == "simulate")
      return runSimulate(
          parseArgs(cmd, argc - 2, argv + 2,
                    with({"--collective", "--nodes", "-b", "-e", "-f", "--algorithm"}),
                    {"--json", "--this-host", "--fabric"}));
    if (cmd == "cluster")
      return runCluster(parseArgs(cmd, argc - 2, argv + 2, with({}), {"--this-host"}));
    throw UsageError("sharc-plan: unknown subcommand '" + cmd +
                     "' (valid: collective, fsdp, backtest, simulate, cluster)");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n%s", e.what(), kUsage);
    return 2;
  } catch (const sharc::Error& e) {
    std::fprintf(stderr, "sharc-plan: %s\n", e.what());
    return e.code() == sharc::Result::InvalidArgument ? 2 : 1;
  }
}
