// A small benchmark harness that follows docs/performance.md's method: a raw-driver variant and a
// custream variant of one operation, on the same handles, in one process, interleaved A B B A in
// batches; the figure of each is the median of its batch means. The report gives raw, custream, the
// ratio and whether the target holds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace custream_bench {

using Clock = std::chrono::steady_clock;

/// Runs one variant `iterations` times; returns nothing (timing is outside).
using Body = std::function<void(int iterations)>;

/// How a case's result is judged.
struct Target {
  enum class Kind {
    raw_plus,      ///< custream ≤ raw + max(abs_ns, rel × raw)
    raw_plus_abs,  ///< custream ≤ raw + abs_ns
    absolute,      ///< custream ≤ abs_ns (and below raw when raw is given)
    ratio,         ///< custream ≤ rel × raw
  } kind = Kind::raw_plus;
  double abs_ns = 2;
  double rel = 0.01;
  /// In words: "<= raw + max(2 ns, 1%)" (the CSV, --list, the wide table).
  std::string text() const;
  /// In at most 12 columns: "+max(2ns,1%)", "+30ns", "<=3ns", "<=1.02x raw" (the table).
  std::string short_text() const;
  bool holds(double raw_ns, double ours_ns) const;
};

/// One benchmark: an operation done raw and through custream.
///
/// A case is declared without touching the driver (its name, target, pairs and raw label are
/// known without one: `custream bench --list`); the driver work (streams, handles, the bodies)
/// is done by `prepare`, when the suite runs.
struct Case {
  Case(std::string name_, Body raw_, Body ours_, Target target_ = {}, int iterations_ = 256,
       int pairs_ = 25, std::function<void()> between_ = {}, std::string raw_label_ = {})
      : name(std::move(name_)),
        raw(std::move(raw_)),
        ours(std::move(ours_)),
        target(std::move(target_)),
        iterations(iterations_),
        pairs(pairs_),
        between(std::move(between_)),
        raw_label(std::move(raw_label_)) {}

  std::string name;
  Body raw;
  Body ours;
  Target target;
  int iterations = 256;           ///< per batch (≤ 256 for enqueueing operations)
  int pairs = 25;                 ///< A B B A pairs (≥ 21)
  std::function<void()> between;  ///< untimed, after each batch (e.g. synchronize)
  std::string raw_label;          ///< what the raw variant does
  std::string skip;               ///< non-empty: not run, and this says why (e.g. no kernels)
  /// Untimed, after the measurement: extra figures (gets the case as run: its pairs).
  std::function<std::string(const Case&)> note;
  /// A B B A interleaves of the case's pairs that `note` runs (for the time estimate and cap).
  int note_interleaves = 0;
  /// Also time the raw variant against itself (A/A, same method and pairs) and report the
  /// ratio in the note: the method's resolution for this operation.
  bool control = false;
  /// Needs a driver that loads modules (kernels): skipped, saying so, where it cannot (the CPU
  /// emulator). Known without a driver; `prepare` finds out whether it can.
  bool needs_kernels = false;
  /// The driver work, deferred until the case runs: sets raw, ours, between and note (or skip).
  /// Called once, on the copy that runs; may throw (the case could not run). Empty: the case is
  /// complete as declared.
  std::function<void(Case&)> prepare;

  /// Timed batches a run makes with `warmups` warm-up pairs and `pairs_run` pairs.
  int batches(int warmups, int pairs_run) const {
    return 2 * warmups + 2 * pairs_run * (1 + (control ? 1 : 0) + note_interleaves);
  }
};

/// A finished measurement.
struct Result {
  std::string name, raw_label, target, target_short;
  double raw_ns = 0, ours_ns = 0;
  bool pass = false;
  std::string skipped;  ///< why it was not run (empty when it ran)
  std::string note;     ///< extra figures (e.g. first vs repeat launch)
  std::string error;    ///< why it could not run (a driver failure; empty when it ran)
  int pairs = 0;        ///< A B B A pairs it ran
};

/// What the suite hears while a case runs (all untimed).
struct Progress {
  std::function<void()> batch;       ///< after every timed batch
  std::function<void(int)> planned;  ///< the case's timed batches, once its pairs are known
};

/// The suite's listener; empty outside the suite. One thread runs the cases.
inline Progress& progress() {
  static Progress p;
  return p;
}

/// Times one batch of `body`: mean nanoseconds per iteration.
inline double time_batch(const Body& body, int iterations, const std::function<void()>& between) {
  const auto start = Clock::now();
  body(iterations);
  const auto end = Clock::now();
  if (between) between();
  if (progress().batch) progress().batch();
  return std::chrono::duration<double, std::nano>(end - start).count() / iterations;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Medians of batch means of `a` and `b`, interleaved A B B A over `c.pairs` pairs.
inline std::pair<double, double> interleave(const Case& c, const Body& a, const Body& b) {
  std::vector<double> as, bs;
  for (int p = 0; p < c.pairs; ++p) {
    if (p % 2 == 0) {
      as.push_back(time_batch(a, c.iterations, c.between));
      bs.push_back(time_batch(b, c.iterations, c.between));
    } else {
      bs.push_back(time_batch(b, c.iterations, c.between));
      as.push_back(time_batch(a, c.iterations, c.between));
    }
  }
  return {median(as), median(bs)};
}

/// How a case is run.
struct RunLimits {
  int warmups = 3;  ///< warm-up pairs (raw, custream), not measured
  /// > 0: at most about this many seconds of measurement (fewer pairs, at least min_pairs), from
  /// the time of the last warm-up pair: the CPU emulator, whose numbers mean nothing.
  double budget_s = 0;
  int min_pairs = 3;  ///< the fewest pairs a budget leaves
};

/// Warms up, then measures raw and custream interleaved A B B A (and raw against itself
/// when the case asks for a control). `c` is prepared already.
inline Result run(const Case& c, const RunLimits& limits = {}) {
  Result r{c.name, c.raw_label, c.target.text(), c.target.short_text(), 0, 0, false, {}, {}, {}, 0};
  if (!c.skip.empty()) {
    r.pass = true;
    r.skipped = c.skip;
    return r;
  }
  double pair_s = 0;                          // the last warm-up pair
  for (int i = 0; i < limits.warmups; ++i) {  // warm-up: caches, lazy loads, thread-locals
    const auto start = Clock::now();
    time_batch(c.raw, c.iterations, c.between);
    time_batch(c.ours, c.iterations, c.between);
    pair_s = std::chrono::duration<double>(Clock::now() - start).count();
  }
  Case as_run = c;
  if (limits.budget_s > 0 && pair_s > 0) {
    const double per_pair = pair_s * (1 + (c.control ? 1 : 0) + c.note_interleaves);
    const double fit = limits.budget_s / per_pair;
    if (fit < c.pairs) as_run.pairs = std::max(limits.min_pairs, static_cast<int>(fit));
  }
  if (progress().planned) progress().planned(as_run.batches(limits.warmups, as_run.pairs));
  r.pairs = as_run.pairs;
  std::tie(r.raw_ns, r.ours_ns) = interleave(as_run, as_run.raw, as_run.ours);
  r.pass = c.target.holds(r.raw_ns, r.ours_ns);
  if (c.note) r.note = c.note(as_run);
  if (c.control) {
    const auto [first, second] = interleave(as_run, as_run.raw, as_run.raw);
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "%sA/A control: the raw call against itself, same method and pairs: %.4f "
                  "(%+.1f ns)",
                  r.note.empty() ? "" : "; ", second / first, second - first);
    r.note += buf;
  }
  return r;
}

inline std::string Target::text() const {
  char buf[96];
  switch (kind) {
    case Kind::raw_plus:
      std::snprintf(buf, sizeof buf, "<= raw + max(%.0f ns, %.0f%%)", abs_ns, rel * 100);
      break;
    case Kind::raw_plus_abs:
      std::snprintf(buf, sizeof buf, "<= raw + %.0f ns", abs_ns);
      break;
    case Kind::absolute:
      std::snprintf(buf, sizeof buf, "<= %.0f ns", abs_ns);
      break;
    case Kind::ratio:
      std::snprintf(buf, sizeof buf, "<= %.2f x raw", rel);
      break;
  }
  return buf;
}

inline std::string Target::short_text() const {
  char buf[96];
  switch (kind) {
    case Kind::raw_plus:
      std::snprintf(buf, sizeof buf, "+max(%.0fns,%.0f%%)", abs_ns, rel * 100);
      break;
    case Kind::raw_plus_abs:
      std::snprintf(buf, sizeof buf, "+%.0fns", abs_ns);
      break;
    case Kind::absolute:
      std::snprintf(buf, sizeof buf, "<=%.0fns", abs_ns);
      break;
    case Kind::ratio:
      std::snprintf(buf, sizeof buf, "<=%.2fx raw", rel);
      break;
  }
  return buf;
}

inline bool Target::holds(double raw_ns, double ours_ns) const {
  switch (kind) {
    case Kind::raw_plus:
      return ours_ns <= raw_ns + std::max(abs_ns, rel * raw_ns);
    case Kind::raw_plus_abs:
      return ours_ns <= raw_ns + abs_ns;
    case Kind::absolute:
      return ours_ns <= abs_ns;
    case Kind::ratio:
      return ours_ns <= rel * raw_ns;
  }
  return false;
}

/// Prints the table and, when `csv` is not null, writes the numbers there (one row per case:
/// operation,raw_driver,raw_ns,custream_ns,ratio,target,result,note). `wide`: every column
/// (the raw driver calls, targets in words), else a table of at most 100 columns. Returns true
/// when every case that ran met its target.
bool report(const std::vector<Result>& results, std::FILE* csv, bool wide);

}  // namespace custream_bench
