#include "report.hpp"

#include <cmath>
#include <cstdarg>
#include <memory>

namespace sharc::perf {

double busBandwidth(CollectiveKind c, int nranks, size_t bytes, double timeUs) {
  if (!(timeUs > 0)) return 0;
  const double algBw = static_cast<double>(bytes) / 1.0e3 / timeUs;
  const double n = nranks;
  switch (c) {
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter: return algBw * (n - 1) / n;
    case CollectiveKind::AllReduce: return algBw * 2 * (n - 1) / n;
    default: break;
  }
  return 0;
}

void computeBandwidth(CollectiveKind c, int nranks, size_t bytes, Measure& m) {
  m.algBw = m.timeUs > 0 ? static_cast<double>(bytes) / 1.0e3 / m.timeUs : 0;
  m.busBw = busBandwidth(c, nranks, bytes, m.timeUs);
}

Reporter::Reporter(const Options& options, bool print, std::FILE* out)
    : options_(options), print_(print), out_(out) {}

std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string timeStr(double us) {
  if (us >= 10000.0) return format("%7.0f", us);
  if (us >= 100.0) return format("%7.1f", us);
  return format("%7.2f", us);
}

namespace {

std::string measureCols(const Measure& m) {
  std::string wrong = m.wrong < 0 ? "N/A" : format("%lld", m.wrong);
  return format("  %7s  %6.2f  %6.2f  %5s", timeStr(m.timeUs).c_str(), m.algBw, m.busBw,
                wrong.c_str());
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      out += format("\\u%04x", ch);
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

std::string jsonNumber(double v) {
  return std::isfinite(v) ? format("%.6g", v) : "null";
}

std::string jsonMeasure(const Measure& m) {
  return "{\"time_us\": " + jsonNumber(m.timeUs) + ", \"mean_us\": " + jsonNumber(m.meanUs) +
         ", \"median_us\": " + jsonNumber(m.medianUs) + ", \"algbw_gbps\": " + jsonNumber(m.algBw) +
         ", \"busbw_gbps\": " + jsonNumber(m.busBw) +
         ", \"wrong\": " + (m.wrong < 0 ? std::string("null") : std::to_string(m.wrong)) + "}";
}

}  // namespace

void Reporter::header(const RunInfo& info) {
  info_ = info;
  if (!print_) return;
  std::string step =
      options_.stepFactor > 1
          ? format("%llu(factor)", static_cast<unsigned long long>(options_.stepFactor))
          : format("%zu(bytes)", options_.stepBytes);
  std::fprintf(out_,
               "# sharc-perf %s: nranks %d minBytes %zu maxBytes %zu step: %s warmup iters: %d "
               "iters: %d validation: %d\n#\n",
               core::collectiveToolName(options_.collective), info.nranks, options_.minBytes,
               options_.maxBytes, step.c_str(), options_.warmup, options_.iters,
               options_.check ? 1 : 0);
  std::fprintf(out_, "# Using provider %s, launch %s\n", info.provider.c_str(),
               info.launch.c_str());
  for (const auto& line : info.rankLines) std::fprintf(out_, "#  %s\n", line.c_str());
  std::fprintf(out_, "#\n");
  // Optional groups, always in this order: mpi baseline, memcpy baseline, tuner plan.
  const bool base = options_.mpiBaseline, mem = options_.memcpyBaseline, plan = options_.explain;
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s", "", "", "", "", "");
  std::fprintf(out_, "           out-of-place                       in-place         ");
  if (base) std::fprintf(out_, "  %-17s", "   mpi baseline");
  if (mem) std::fprintf(out_, "  %-17s", " memcpy baseline");
  if (plan) std::fprintf(out_, "  %-38s", "             tuner");
  std::fprintf(out_, "\n");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  std::fprintf(out_, " %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out_, " %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
  if (base) std::fprintf(out_, "  %9s  %6s", "mpi busbw", "ratio");
  if (mem) std::fprintf(out_, "  %9s  %6s", "memcpy bw", "ratio");
  if (plan) std::fprintf(out_, "  %-18s  %9s  %7s", "algorithm", "predicted", "ratio");
  std::fprintf(out_, "\n");
  std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  std::fprintf(out_, " %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  std::fprintf(out_, " %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  if (base) std::fprintf(out_, "  %9s  %6s", "(GB/s)", "");
  if (mem) std::fprintf(out_, "  %9s  %6s", "(GB/s)", "");
  if (plan) std::fprintf(out_, "  %-18s  %9s  %7s", "", "(us)", "meas/pr");
  std::fprintf(out_, "\n");
  std::fflush(out_);
}

void Reporter::row(const Row& r) {
  rows_.push_back(r);
  if (!print_) return;
  std::string line = format("%12zu  %12zu  %8s  %6s  %6d", r.bytes, r.count, typeName(r.type),
                            r.op ? redOpName(*r.op) : "none", r.root);
  line += measureCols(r.outOfPlace);
  line += measureCols(r.inPlace);
  if (r.baseline) {
    if (r.baseline->available && r.baseline->busBw > 0)
      line += format("  %9.2f  %6.2f", r.baseline->busBw, r.outOfPlace.busBw / r.baseline->busBw);
    else
      line += format("  %9s  %6s", "-", "-");
  }
  if (r.memcpy) {
    if (r.memcpy->gbps > 0)
      line += format("  %9.2f  %6.2f", r.memcpy->gbps, r.outOfPlace.busBw / r.memcpy->gbps);
    else
      line += format("  %9s  %6s", "-", "-");
  }
  if (r.plan)
    line += format("  %-18s  %9s  %7.2f", r.plan->algorithm.c_str(),
                   timeStr(r.plan->predictedUs).c_str(),
                   r.plan->predictedUs > 0 ? r.outOfPlace.timeUs / r.plan->predictedUs : 0.0);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

long long Reporter::totalWrong() const {
  long long total = 0;
  for (const auto& r : rows_)
    total += std::max(r.outOfPlace.wrong, 0LL) + std::max(r.inPlace.wrong, 0LL);
  return total;
}

double Reporter::avgBusBw() const {
  double sum = 0;
  for (const auto& r : rows_) sum += r.outOfPlace.busBw + r.inPlace.busBw;
  return rows_.empty() ? 0 : sum / (2.0 * static_cast<double>(rows_.size()));
}

void Reporter::footer() {
  if (!print_) return;
  const long long wrong = totalWrong();
  std::fprintf(out_, "# Out of bounds values : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
  std::fprintf(out_, "# Avg bus bandwidth    : %g \n", avgBusBw());
  if (!rows_.empty() && rows_.back().plan && !rows_.back().plan->path.empty())
    std::fprintf(out_, "# Data path            : %s\n", rows_.back().plan->path.c_str());
  std::fprintf(out_, "#\n");
  std::fflush(out_);
}

bool Reporter::writeJson(const std::string& path) const {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) return false;
  std::string s = "{\n";
  s += "  \"tool\": \"sharc-perf\",\n";
  s += "  \"collective\": " + jsonString(core::collectiveToolName(options_.collective)) + ",\n";
  s += "  \"nranks\": " + std::to_string(info_.nranks) + ",\n";
  s += "  \"provider\": " + jsonString(info_.provider) + ",\n";
  s += "  \"launch\": " + jsonString(info_.launch) + ",\n";
  s += "  \"iters\": " + std::to_string(options_.iters) + ",\n";
  s += "  \"warmup_iters\": " + std::to_string(options_.warmup) + ",\n";
  s += std::string("  \"check\": ") + (options_.check ? "true" : "false") + ",\n";
  s += "  \"rows\": [";
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    s += i ? ",\n    {" : "\n    {";
    s += "\"size\": " + std::to_string(r.bytes) + ", \"count\": " + std::to_string(r.count);
    s += ", \"type\": " + jsonString(typeName(r.type));
    s += ", \"redop\": " + jsonString(r.op ? redOpName(*r.op) : "none");
    s += ", \"root\": " + std::to_string(r.root);
    s += ",\n     \"out_of_place\": " + jsonMeasure(r.outOfPlace);
    s += ",\n     \"in_place\": " + jsonMeasure(r.inPlace);
    if (r.baseline) {
      const auto& b = *r.baseline;
      if (b.available)
        s += ",\n     \"mpi\": {\"time_us\": " + jsonNumber(b.timeUs) +
             ", \"busbw_gbps\": " + jsonNumber(b.busBw) + ", \"ratio\": " +
             (b.busBw > 0 ? jsonNumber(r.outOfPlace.busBw / b.busBw) : std::string("null")) + "}";
      else
        s += ",\n     \"mpi\": null";
    }
    if (r.memcpy) {
      const auto& m = *r.memcpy;
      s += ",\n     \"memcpy\": {\"bytes\": " + std::to_string(m.bytes) +
           ", \"time_us\": " + jsonNumber(m.timeUs) + ", \"gbps\": " + jsonNumber(m.gbps) +
           ", \"ratio\": " +
           (m.gbps > 0 ? jsonNumber(r.outOfPlace.busBw / m.gbps) : std::string("null")) + "}";
    }
    if (r.plan) {
      const auto& p = *r.plan;
      s += ",\n     \"plan\": {\"algorithm\": " + jsonString(p.algorithm) +
           ", \"chunk_bytes\": " + std::to_string(p.chunkBytes) +
           ", \"predicted_us\": " + jsonNumber(p.predictedUs) + ", \"ratio\": " +
           (p.predictedUs > 0 ? jsonNumber(r.outOfPlace.timeUs / p.predictedUs)
                              : std::string("null")) +
           ", \"breakdown\": " + jsonString(p.breakdown) + "}";
    }
    s += "}";
  }
  s += rows_.empty() ? "],\n" : "\n  ],\n";
  s += "  \"avg_busbw_gbps\": " + jsonNumber(avgBusBw()) + ",\n";
  s += "  \"out_of_bounds\": " + std::to_string(totalWrong()) + ",\n";
  s += std::string("  \"ok\": ") + (totalWrong() ? "false" : "true") + "\n}\n";
  if (std::fwrite(s.data(), 1, s.size(), f.get()) != s.size()) return false;
  return std::fflush(f.get()) == 0;
}

}  // namespace sharc::perf
