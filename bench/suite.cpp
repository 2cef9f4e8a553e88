// The benchmark suite behind `custream bench` (docs/performance.md): declares every case family
// (no driver work), prepares the selected cases and estimates their time, runs them one after
// another (raw and custream interleaved A B B A inside each, harness.hpp) showing per-case
// progress and the time left, then prints the table and writes the CSV.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"

namespace custream_bench {
namespace {

/// Seconds of measurement a case gets at most on the CPU emulator (unless --pairs is given).
constexpr double kEmulatorCaseSeconds = 2.0;

std::string csv_text(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

/// "%.1f" below 100,000 ns, "%.0f" above: 8 columns hold up to 0.1 s.
std::string ns_text(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ns < 1e5 ? "%.1f" : "%.0f", ns);
  return buf;
}

/// A ratio in 5 columns.
std::string ratio_text(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ratio < 10 ? "%.3f" : ratio < 100 ? "%.2f" : "%.0f", ratio);
  return buf;
}

/// `text` broken at spaces into lines of at most `width` columns; continuation lines indented.
void print_wrapped(const std::string& text, std::size_t width) {
  std::size_t start = 0;
  std::string indent;
  while (start < text.size()) {
    const std::size_t room = width - indent.size();
    std::size_t end = text.size();
    if (end - start > room) {
      end = text.rfind(' ', start + room);
      if (end == std::string::npos || end <= start) end = text.find(' ', start + room);
      if (end == std::string::npos) end = text.size();
    }
    std::printf("%s%s\n", indent.c_str(), text.substr(start, end - start).c_str());
    start = end;
    while (start < text.size() && text[start] == ' ') ++start;
    indent = "  ";
  }
}

std::string duration_text(double s) {
  char buf[64];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.0f s", std::ceil(s));
  } else if (s < 3600) {
    const int m = static_cast<int>(s) / 60;
    std::snprintf(buf, sizeof buf, "%d min %d s", m, static_cast<int>(s) - 60 * m);
  } else {
    const int h = static_cast<int>(s) / 3600;
    std::snprintf(buf, sizeof buf, "%d h %d min", h, (static_cast<int>(s) - 3600 * h) / 60);
  }
  return buf;
}

int pairs_for(const Case& c, const SuiteOptions& options) {
  if (options.quick) return 3;
  if (options.pairs > 0) return options.pairs;
  return c.pairs;
}

/// Per-case progress on stderr with an estimate of the time left: on a terminal one line
/// redrawn in place; otherwise a line when a case starts and one every 10 s within a case.
class ProgressLine {
 public:
  /// `estimate`: seconds each case is expected to take (0: it does not run).
  /// `start`: when the suite started (the total time at the end counts from it).
  ProgressLine(const std::vector<Case>& cases, std::vector<double> estimate,
               Clock::time_point start)
      : cases_(cases), estimate_(std::move(estimate)), start_(start) {
    tty_ = isatty(fileno(stderr)) != 0;
    winsize ws{};
    if (tty_ && ioctl(fileno(stderr), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) width_ = ws.ws_col;
  }

  void start_case(std::size_t i, int planned_batches) {
    index_ = i;
    case_start_ = last_line_ = Clock::now();
    case_done_ = 0;
    case_planned_ = planned_batches;
    show(true);
  }
  /// The case's timed batches, once its pairs are known (capped runs).
  void planned(int batches) { case_planned_ = batches; }
  void batch() {
    ++case_done_;
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_line_).count();
    if ((tty_ && since >= 0.25) || (!tty_ && since >= 10)) {
      last_line_ = now;
      show(false);
    }
  }
  void finish() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "custream bench: %zu case%s in %.1f s\n", cases_.size(),
                 cases_.size() == 1 ? "" : "s", seconds_since(start_));
    std::fflush(stderr);
  }

 private:
  static double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }

  /// Seconds left: the current case at its own pace, the later ones by their estimates.
  double left() const {
    const double elapsed = seconds_since(case_start_);
    double now = std::max(0.0, estimate_[index_] - elapsed);
    if (case_done_ >= 2 && case_planned_ > 0) {
      now = std::max(0, case_planned_ - case_done_) * elapsed / case_done_;
    }
    double later = 0;
    for (std::size_t j = index_ + 1; j < cases_.size(); ++j) later += estimate_[j];
    return now + later;
  }

  void show(bool starting) {
    char head[32];
    std::snprintf(head, sizeof head, "[%zu/%zu] ", index_ + 1, cases_.size());
    std::string line = head + cases_[index_].name;
    if (!starting && case_planned_ > 0) {
      const int percent = std::min(99, 100 * case_done_ / case_planned_);
      line += (tty_ ? "  " : ": ") + std::to_string(percent) + "%";
    }
    const double s = left();
    line += (tty_ ? "  " : ", ") +
            (s < 1 ? std::string("under 1 s") : "about " + duration_text(s)) + " left";
    if (tty_) {
      if (line.size() >= width_) line.resize(width_ - 1);
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

  const std::vector<Case>& cases_;
  std::vector<double> estimate_;
  Clock::time_point start_, case_start_, last_line_;
  bool tty_ = false;
  std::size_t width_ = 100;
  std::size_t index_ = 0;
  int case_done_ = 0, case_planned_ = 0;
};

Result error_result(const Case& c, const std::string& error) {
  return Result{
      c.name, c.raw_label, c.target.text(), c.target.short_text(), 0, 0, false, {}, {}, error, 0};
}

}  // namespace

bool report(const std::vector<Result>& results, std::FILE* csv, bool wide) {
  bool all = true;
  std::size_t name_w = 9, target_w = 6;
  for (const Result& r : results) {
    name_w = std::max(name_w, r.name.size());
    target_w = std::max(target_w, r.target_short.size());
  }
  const int nw = static_cast<int>(name_w), tw = static_cast<int>(target_w);
  if (wide) {
    std::printf("\n%-52s %-38s %12s %12s %7s  %-28s %s\n", "operation", "raw driver", "raw ns",
                "custream ns", "ratio", "target", "result");
  } else {
    std::printf("\n%-*s %8s %8s %5s  %-*s  %s\n", nw, "operation", "raw", "custream", "ratio", tw,
                "target", "result");
  }
  for (const Result& r : results) {
    const bool ran = r.skipped.empty() && r.error.empty();
    const char* result = !r.error.empty()     ? "ERROR"
                         : !r.skipped.empty() ? "skipped"
                         : r.pass             ? "pass"
                                              : "FAIL";
    const double ratio = r.raw_ns > 0 ? r.ours_ns / r.raw_ns : 0;
    if (wide && !ran) {
      std::printf("%-52s %-38s %12s %12s %7s  %-28s %s\n", r.name.c_str(), r.raw_label.c_str(), "-",
                  "-", "-", r.target.c_str(), result);
    } else if (wide) {
      std::printf("%-52s %-38s %12.1f %12.1f %7.3f  %-28s %s\n", r.name.c_str(),
                  r.raw_label.c_str(), r.raw_ns, r.ours_ns, ratio, r.target.c_str(), result);
    } else if (!ran) {
      std::printf("%-*s %8s %8s %5s  %-*s  %s\n", nw, r.name.c_str(), "-", "-", "-", tw,
                  r.target_short.c_str(), result);
    } else {
      std::printf("%-*s %8s %8s %5s  %-*s  %s\n", nw, r.name.c_str(), ns_text(r.raw_ns).c_str(),
                  ns_text(r.ours_ns).c_str(), ratio_text(ratio).c_str(), tw, r.target_short.c_str(),
                  result);
    }
    if (ran) all = all && r.pass;
    if (csv) {
      char raw[32] = "", ours[32] = "", ratio_text[32] = "";
      if (ran) {
        std::snprintf(raw, sizeof raw, "%.2f", r.raw_ns);
        std::snprintf(ours, sizeof ours, "%.2f", r.ours_ns);
        std::snprintf(ratio_text, sizeof ratio_text, "%.4f", ratio);
      }
      const char* csv_result = !r.error.empty()     ? "error"
                               : !r.skipped.empty() ? "skipped"
                               : r.pass             ? "pass"
                                                    : "fail";
      const std::string note = !r.error.empty() ? r.error : !r.skipped.empty() ? r.skipped : r.note;
      std::fprintf(csv, "%s,%s,%s,%s,%s,%s,%s,%s\n", csv_text(r.name).c_str(),
                   csv_text(r.raw_label).c_str(), raw, ours, ratio_text, csv_text(r.target).c_str(),
                   csv_result, csv_text(note).c_str());
    }
  }
  if (!wide) {
    std::printf(
        "\nraw, custream: ns per operation (medians of batch means). target: custream <= raw + X\n"
        "(+X), <= X (<=X) or <= R x raw. --wide: the raw driver calls and the targets in words.\n");
  }
  bool notes = false;
  for (const Result& r : results) {
    const char* kind = !r.error.empty() ? "error" : !r.skipped.empty() ? "skipped" : "note";
    const std::string& text = !r.error.empty() ? r.error : !r.skipped.empty() ? r.skipped : r.note;
    if (text.empty()) continue;
    if (!notes) std::printf("\n");
    notes = true;
    const std::string line = std::string(kind) + " " + r.name + ": " + text;
    if (wide) {
      std::printf("%s\n", line.c_str());
    } else {
      print_wrapped(line, 100);
    }
  }
  return all;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  add_stream_cases(cases);
  add_graph_cases(cases);
  return cases;
}

std::vector<Case> selected_cases(const SuiteOptions& options) {
  std::vector<Case> selected;
  for (Case& c : all_cases()) {
    if (options.filter.empty() || c.name.find(options.filter) != std::string::npos) {
      selected.push_back(std::move(c));
    }
  }
  return selected;
}

namespace {

int no_match(const SuiteOptions& options) {
  std::fprintf(stderr, "custream bench: no case matches \"%s\" (see custream bench --list)\n",
               options.filter.c_str());
  return 1;
}

}  // namespace

int list_cases(const SuiteOptions& options) {
  const std::vector<Case> cases = selected_cases(options);
  if (cases.empty()) return no_match(options);
  bool kernels = false;
  std::printf("%-52s %5s  %s\n", "case (in the order a run runs them)", "pairs", "target");
  for (const Case& c : cases) {
    std::printf("%-52s %5d  %s%s\n", c.name.c_str(), pairs_for(c, options), c.target.text().c_str(),
                c.needs_kernels ? "  [k]" : "");
    kernels = kernels || c.needs_kernels;
  }
  if (kernels) {
    std::printf(
        "[k]: needs a driver that loads modules (a GPU): skipped on the CPU driver emulator\n");
  }
  if (options.emulator && !options.quick && options.pairs == 0) {
    std::printf(
        "On the CPU driver emulator each case measures for at most about %.0f s: fewer pairs.\n",
        kEmulatorCaseSeconds);
  }
  return 0;
}

int run_suite(const SuiteOptions& options) {
  const std::vector<Case> selected = selected_cases(options);
  if (selected.empty()) return no_match(options);

  // Before any driver work: a run that cannot write its numbers is not started.
  std::FILE* csv = nullptr;
  if (!options.csv.empty()) {
    csv = std::fopen(options.csv.c_str(), "w");
    if (csv == nullptr) {
      std::fprintf(stderr, "custream bench: cannot write %s: %s\n", options.csv.c_str(),
                   std::strerror(errno));
      return 1;
    }
  }

  const auto& info = custream::driver_info();
  custream::Device device(0);
  std::printf("custream bench: driver %d from %s\n", info.version, info.library.c_str());
  std::printf("device 0: %s\n", device.name().c_str());
  const bool capped = options.emulator && !options.quick && options.pairs == 0;
  const double budget_s = capped ? kEmulatorCaseSeconds : 0;
  if (options.emulator) {
    std::printf("on the CPU driver emulator: its numbers say nothing about a GPU\n");
  }
  if (capped) {
    std::printf(
        "capped emulator run: each case measures for at most about %.0f s, with fewer pairs\n"
        "where need be (3 at least); --pairs N lifts the cap\n",
        budget_s);
  }
  if (options.quick) {
    std::printf(
        "quick run: 3 pairs per case, 1 warm-up; a smoke test of the suite, not the method of\n"
        "docs/performance.md (>= 21 pairs): targets are shown, not enforced\n");
  } else {
    std::printf(
        "method (docs/performance.md): raw and custream on the same handles, interleaved\n"
        "A B B A, medians of batch means, one process\n");
  }
  std::fflush(stdout);

  const auto start = Clock::now();
  // Prepare every case (the driver work) and time two batches of its raw variant (the second
  // counts: the first pays for lazy loads) for the time estimate; the warm-ups follow anyway.
  const int warmups = options.quick ? 1 : 3;
  std::vector<Case> cases;
  std::vector<std::string> errors(selected.size());
  std::vector<double> estimate(selected.size(), 0);
  for (std::size_t i = 0; i < selected.size(); ++i) {
    cases.push_back(selected[i]);
    Case& c = cases.back();
    c.pairs = pairs_for(c, options);
    try {
      if (c.prepare) c.prepare(c);
      if (!c.skip.empty()) continue;
      double batch_s = 0;
      for (int k = 0; k < 2; ++k) {
        const auto batch_start = Clock::now();
        time_batch(c.raw, c.iterations, c.between);
        batch_s = std::chrono::duration<double>(Clock::now() - batch_start).count();
      }
      const double measure_s = c.batches(0, c.pairs) * batch_s;
      estimate[i] =
          2 * warmups * batch_s + (budget_s > 0 ? std::min(measure_s, budget_s) : measure_s);
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  }

  ProgressLine line(cases, estimate, start);
  progress().batch = [&line] { line.batch(); };
  progress().planned = [&line](int batches) { line.planned(batches); };
  std::vector<Result> results;
  bool failed = false;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    line.start_case(i, c.batches(warmups, c.pairs));
    try {
      if (!errors[i].empty()) {
        results.push_back(error_result(c, errors[i]));  // its preparation failed
      } else {
        results.push_back(run(c, RunLimits{warmups, budget_s, 3}));
      }
    } catch (const std::exception& e) {
      results.push_back(error_result(c, e.what()));
    }
    failed = failed || !results.back().error.empty();
  }
  progress() = {};
  line.finish();

  if (csv) {
    std::fprintf(csv, "operation,raw_driver,raw_ns,custream_ns,ratio,target,result,note\n");
  }
  const bool all = report(results, csv, options.wide);
  if (capped) {
    int lo = 0, hi = 0;
    for (const Result& r : results) {
      if (r.pairs == 0) continue;
      lo = lo == 0 ? r.pairs : std::min(lo, r.pairs);
      hi = std::max(hi, r.pairs);
    }
    if (hi > 0) {
      std::printf(
          "\ncapped emulator run: the cases ran %d to %d pairs (at most about %.0f s each)\n", lo,
          hi, budget_s);
    }
  }
  if (csv) {
    errno = 0;
    bool written = std::fflush(csv) == 0 && std::ferror(csv) == 0;
    int error = errno;
    if (std::fclose(csv) != 0) {
      written = false;
      if (error == 0) error = errno;
    }
    if (!written) {
      std::fprintf(stderr, "custream bench: cannot write %s: %s\n", options.csv.c_str(),
                   std::strerror(error != 0 ? error : EIO));
      return 1;
    }
    std::printf("\nnumbers written to %s\n", options.csv.c_str());
  }
  if (failed) {
    std::printf("some cases could not run (ERROR above)\n");
    return 1;
  }
  if (options.quick) {
    std::printf("quick run: no case failed to run; targets not enforced\n");
    return 0;
  }
  std::printf("%s\n", all ? "every target met" : "some targets NOT met");
  return all ? 0 : 1;
}

}  // namespace custream_bench
