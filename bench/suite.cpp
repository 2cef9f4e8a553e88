// The benchmark suite behind `custream bench` (docs/performance.md): declares every case family
// (no driver work), prepares the selected cases and estimates their time, runs them one after
// another (raw, custream and raw again in rotating rounds inside each, harness.hpp) showing
// per-case progress and the time left, then prints the table and writes the CSV.
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

/// Rounds on a running stream after a parked case's judged ones (RunLimits::running_rounds).
constexpr int kRunningRounds = 21;

/// Seconds of measurement a case gets at most on the CPU emulator (unless --rounds is given).
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

int rounds_for(const Case& c, const SuiteOptions& options) {
  if (options.quick) return 3;
  if (options.rounds > 0) return options.rounds;
  return c.rounds;
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
  /// The case's timed batches, whenever its plan changes (more rounds for resolution).
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
  Result r;
  r.name = c.name;
  r.raw_label = c.raw_label;
  r.target = c.target.text();
  r.target_short = c.target.short_text();
  r.error = error;
  return r;
}

const char* verdict_text(const Result& r) {
  if (!r.error.empty()) return "ERROR";
  if (!r.skipped.empty()) return "skipped";
  switch (r.verdict) {
    case Verdict::pass:
      return "pass";
    case Verdict::unresolved:
      return "unresolved";
    case Verdict::not_judged:
      return "not judged";
    case Verdict::fail:
      break;
  }
  return "FAIL";
}

/// A/A' as a signed deviation in 6 columns: "+0.12%".
std::string control_text(double control) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f%%", (control - 1) * 100);
  return buf;
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
    std::printf("\n%-52s %-38s %12s %12s %7s %7s %6s  %-36s %s\n", "operation", "raw driver",
                "raw ns", "custream ns", "ratio", "A/A'", "rounds", "target", "result");
  } else {
    std::printf("\n%-*s %8s %8s %5s %6s %-*s %s\n", nw, "operation", "raw", "custream", "ratio",
                "A/A'", tw, "target", "result");
  }
  int unresolved = 0;
  for (const Result& r : results) {
    const bool ran = r.skipped.empty() && r.error.empty();
    const char* result = verdict_text(r);
    if (wide && !ran) {
      std::printf("%-52s %-38s %12s %12s %7s %7s %6s  %-36s %s\n", r.name.c_str(),
                  r.raw_label.c_str(), "-", "-", "-", "-", "-", r.target.c_str(), result);
    } else if (wide) {
      std::printf("%-52s %-38s %12.1f %12.1f %7.4f %7s %6d  %-36s %s\n", r.name.c_str(),
                  r.raw_label.c_str(), r.raw_ns, r.ours_ns, r.ratio,
                  control_text(r.control).c_str(), r.rounds, r.target.c_str(), result);
    } else if (!ran) {
      std::printf("%-*s %8s %8s %5s %6s %-*s %s\n", nw, r.name.c_str(), "-", "-", "-", "-", tw,
                  r.target_short.c_str(), result);
    } else {
      std::printf("%-*s %8s %8s %5s %6s %-*s %s\n", nw, r.name.c_str(), ns_text(r.raw_ns).c_str(),
                  ns_text(r.ours_ns).c_str(), ratio_text(r.ratio).c_str(),
                  control_text(r.control).c_str(), tw, r.target_short.c_str(), result);
    }
    if (ran) {
      all = all && r.verdict != Verdict::fail;
      unresolved += r.verdict == Verdict::unresolved;
    }
    if (csv) {
      char raw[32] = "", ours[32] = "", ratio[32] = "", control[32] = "", rounds[32] = "";
      char running_raw[32] = "", running_ours[32] = "";
      if (ran && r.running_raw_ns > 0) {
        std::snprintf(running_raw, sizeof running_raw, "%.2f", r.running_raw_ns);
        std::snprintf(running_ours, sizeof running_ours, "%.2f", r.running_ours_ns);
      }
      if (ran) {
        std::snprintf(raw, sizeof raw, "%.2f", r.raw_ns);
        std::snprintf(ours, sizeof ours, "%.2f", r.ours_ns);
        std::snprintf(ratio, sizeof ratio, "%.4f", r.ratio);
        std::snprintf(control, sizeof control, "%.4f", r.control);
        std::snprintf(rounds, sizeof rounds, "%d", r.rounds);
      }
      std::string csv_result = verdict_text(r);
      for (char& ch : csv_result) ch = static_cast<char>(std::tolower(ch));
      const std::string note = !r.error.empty() ? r.error : !r.skipped.empty() ? r.skipped : r.note;
      std::fprintf(csv, "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", csv_text(r.name).c_str(),
                   csv_text(r.raw_label).c_str(), raw, ours, ratio, control, rounds,
                   csv_text(r.target).c_str(), csv_result.c_str(), running_raw, running_ours,
                   csv_text(note).c_str());
    }
  }
  if (!wide) {
    std::printf(
        "\nraw, custream: ns per operation (medians of batch means); ratio: median of per-round\n"
        "custream / raw; A/A': raw against itself in the same rounds (the method's error).\n"
        "target: custream <= raw + X (+X), <= X (<=X), <= R x raw, or an overhead <= R x the\n"
        "reference's (+<=Rx ref). --wide: the raw driver calls and the targets in words.\n");
  }
  if (unresolved > 0) {
    std::printf(
        "\n%d row%s unresolved: A/A' off by more than %.1f%% after the time cap: this run\n"
        "cannot judge a 1%% difference there (not a miss); run again on a quieter machine.\n",
        unresolved, unresolved == 1 ? "" : "s", kUnresolvedControl * 100);
  }
  bool notes = false;
  for (const Result& r : results) {
    const char* kind = !r.error.empty() ? "error" : !r.skipped.empty() ? "skipped" : "note";
    std::string text = !r.error.empty() ? r.error : !r.skipped.empty() ? r.skipped : r.note;
    if (r.error.empty() && r.skipped.empty() && r.running_raw_ns > 0) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "%stimed on a parked stream; on a running stream (%d rounds, not judged): "
                    "raw %.1f ns, custream %.1f ns",
                    text.empty() ? "" : "; ", kRunningRounds, r.running_raw_ns, r.running_ours_ns);
      text += buf;
    }
    if (r.error.empty() && r.skipped.empty() && r.reference_ns > 0) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "%sreference: %.1f ns; overhead over raw: custream %+.1f ns, reference "
                    "%+.1f ns",
                    text.empty() ? "" : "; ", r.reference_ns, r.ratio * r.raw_ns - r.raw_ns,
                    r.reference_ns - r.raw_ns);
      text += buf + (" (reference: " + r.reference_label + ")");
    }
    if (r.error.empty() && r.skipped.empty() && r.capped) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "%sstopped by the time cap at %d rounds, resolution %.2f%% (wanted %.2f%%)",
                    text.empty() ? "" : "; ", r.rounds, r.resolution * 100,
                    kWantedResolution * 100);
      text += buf;
    }
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
  add_graph_builder_cases(cases);
  add_graph_program_cases(cases);
  add_context_cases(cases);
  add_library_cases(cases);
  add_completion_cases(cases);
  add_memory_cases(cases);
  return cases;
}

std::vector<Case> selected_cases(const SuiteOptions& options) {
  std::vector<Case> selected;
  for (Case& c : all_cases()) {
    // "=NAME": that case only; otherwise every case whose name contains the text.
    const bool exact = !options.filter.empty() && options.filter[0] == '=';
    if (options.filter.empty() || (exact ? c.name == options.filter.substr(1)
                                         : c.name.find(options.filter) != std::string::npos)) {
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
  std::printf("%-52s %6s  %s\n", "case (in the order a run runs them)", "rounds", "target");
  for (const Case& c : cases) {
    std::printf("%-52s %6d  %s%s\n", c.name.c_str(), rounds_for(c, options),
                c.target.text().c_str(), c.needs_kernels ? "  [k]" : "");
    kernels = kernels || c.needs_kernels;
  }
  if (kernels) {
    std::printf(
        "[k]: launches a kernel: skipped where the driver cannot load modules (on the CPU driver\n"
        "emulator the kernel runs as a no-op)\n");
  }
  if (options.rounds == 0 && !options.quick) {
    std::printf(
        "rounds: the fewest A B A' rounds; more are run until the A/A' resolution is %.2f%%\n"
        "(at most about %.0f s of measurement per case)\n",
        kWantedResolution * 100, options.cap_s);
  }
  if (options.emulator && !options.quick && options.rounds == 0) {
    std::printf(
        "On the CPU driver emulator each case measures for at most about %.0f s: fewer rounds.\n",
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
  const bool capped = options.emulator && !options.quick && options.rounds == 0;
  const double budget_s = capped ? kEmulatorCaseSeconds : 0;
  if (options.emulator) {
    std::printf("on the CPU driver emulator: its numbers say nothing about a GPU\n");
  }
  if (capped) {
    std::printf(
        "capped emulator run: each case measures for at most about %.0f s, with fewer rounds\n"
        "where need be (3 at least); --rounds N lifts the cap\n",
        budget_s);
  }
  if (options.quick) {
    std::printf(
        "quick run: 3 rounds per case, 1 warm-up; a smoke test of the suite, not the method of\n"
        "docs/performance.md (>= 21 rounds): targets are shown, not enforced\n");
  } else {
    std::printf(
        "method (docs/performance.md): raw (A), custream (B) and raw again (A') on the same\n"
        "handles, in rounds whose order rotates, one process; ratios paired per round\n");
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
    c.rounds = rounds_for(c, options);
    try {
      if (c.prepare) c.prepare(c);
      if (!c.skip.empty()) continue;
      double batch_s = 0;
      for (int k = 0; k < 2; ++k) {
        const auto batch_start = Clock::now();
        time_batch(c.raw, c.iterations, c.between);
        batch_s = std::chrono::duration<double>(Clock::now() - batch_start).count();
      }
      const double measure_s = c.rounds * c.variants() * batch_s;
      estimate[i] = warmups * c.variants() * batch_s +
                    (budget_s > 0 ? std::min(measure_s, budget_s) : measure_s);
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
    line.start_case(i, (warmups + c.rounds) * c.variants());
    try {
      if (!errors[i].empty()) {
        results.push_back(error_result(c, errors[i]));  // its preparation failed
      } else {
        RunLimits limits;
        limits.warmups = warmups;
        limits.cap_s = options.cap_s;
        limits.budget_s = budget_s;
        limits.adapt = !options.quick && options.rounds == 0;
        limits.judge = !options.quick;
        limits.running_rounds = kRunningRounds;
        results.push_back(run(c, limits));
      }
    } catch (const std::exception& e) {
      results.push_back(error_result(c, e.what()));
    }
    failed = failed || !results.back().error.empty();
  }
  progress() = {};
  line.finish();

  if (csv) {
    std::fprintf(csv,
                 "operation,raw_driver,raw_ns,custream_ns,ratio,a_a2,rounds,target,result,"
                 "running_raw_ns,running_custream_ns,note\n");
  }
  const bool all = report(results, csv, options.wide);
  if (capped) {
    int lo = 0, hi = 0;
    for (const Result& r : results) {
      if (r.rounds == 0) continue;
      lo = lo == 0 ? r.rounds : std::min(lo, r.rounds);
      hi = std::max(hi, r.rounds);
    }
    if (hi > 0) {
      std::printf(
          "\ncapped emulator run: the cases ran %d to %d rounds (at most about %.0f s each)\n", lo,
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
