// A small benchmark harness that follows docs/performance.md's method: a raw-driver variant (A)
// and a custream variant (B) of one operation, on the same handles, in one process, timed in
// batches in rounds of A B A' (A' is A again) whose order rotates every round, so every variant
// takes every position equally often and the A/A' control describes the same time window as
// the comparison. The number of rounds follows from the A/A' spread: enough for a resolution
// of 0.15 % (capped in time). The report gives raw, custream, the paired ratio, A/A' and the
// verdict: pass, FAIL, or unresolved when A/A' is off by more than 0.5 %.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace custream_bench {

using Clock = std::chrono::steady_clock;

/// Nanoseconds since `start`.
inline double ns_since(Clock::time_point start) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

/// Runs one variant `iterations` times; returns nothing (timing is outside).
using Body = std::function<void(int iterations)>;

/// The A/A' resolution the number of rounds is chosen for (the standard error of the median
/// of per-round A'/A ratios, as a fraction): 0.15 %, so that identical code stays inside the
/// ±0.5 % below by more than 3 standard errors (at 0.3 % it would fall outside about one run
/// in ten).
constexpr double kWantedResolution = 0.0015;
/// A row whose A/A' control is off by more than this is "unresolved", not pass or FAIL.
constexpr double kUnresolvedControl = 0.005;

/// How a case's result is judged.
struct Target {
  enum class Kind {
    raw_plus,      ///< custream ≤ raw + max(abs_ns, rel × raw)
    raw_plus_abs,  ///< custream ≤ raw + abs_ns
    absolute,      ///< custream ≤ abs_ns (and below raw when raw is given)
    ratio,         ///< custream ≤ rel × raw
    /// custream − raw ≤ rel × (reference − raw): custream's overhead over the raw call is at
    /// most a fraction of the reference way's (Case::reference, timed in the same rounds)
    reference_overhead,
  } kind = Kind::raw_plus;
  double abs_ns = 2;
  double rel = 0.01;
  /// In words: "<= raw + max(2 ns, 1%)" (the CSV, --list, the wide table).
  std::string text() const;
  /// In at most 12 columns: "+max(2ns,1%)", "+30ns", "<=3ns", "<=1.02x raw" (the table).
  std::string short_text() const;
  bool holds(double raw_ns, double ours_ns, double reference_ns = 0) const;
};

/// One benchmark: an operation done raw and through custream.
///
/// A case is declared without touching the driver (its name, target, rounds and raw label are
/// known without one: `custream bench --list`); the driver work (streams, handles, the bodies)
/// is done by `prepare`, when the suite runs.
struct Case {
  Case(std::string name_, Body raw_, Body ours_, Target target_ = {}, int iterations_ = 256,
       int rounds_ = 21, std::function<void()> between_ = {}, std::string raw_label_ = {})
      : name(std::move(name_)),
        raw(std::move(raw_)),
        ours(std::move(ours_)),
        target(std::move(target_)),
        iterations(iterations_),
        rounds(rounds_),
        between(std::move(between_)),
        raw_label(std::move(raw_label_)) {}

  std::string name;
  Body raw;
  Body ours;
  Target target;
  int iterations = 256;           ///< per batch (≤ 256 for enqueueing operations)
  int rounds = 21;                ///< the fewest A B A' rounds (≥ 21); more when the spread needs
  std::function<void()> between;  ///< untimed, after each batch (e.g. synchronize)
  std::function<void()> before;   ///< untimed, before each batch (e.g. park a driver thread)
  /// Set with `before`: the same operation on a running stream (between = synchronize), timed
  /// in a few more rounds after the judged ones, for figures comparable with code that does
  /// not park (Result::running_raw_ns).
  std::function<void()> running_between;
  std::string raw_label;  ///< what the raw variant does
  /// Optional third way of doing the operation (Target::Kind::reference_overhead), timed in
  /// the same rotating rounds; `reference_label` says what it does.
  Body reference;
  std::string reference_label;
  std::string skip;  ///< non-empty: not run, and this says why (e.g. no kernels)
  /// Untimed, after the measurement: extra figures (gets the case as run: its rounds).
  std::function<std::string(const Case&)> note;
  /// Needs a driver that loads modules (kernels): skipped, saying so, where it cannot (the CPU
  /// emulator). Known without a driver; `prepare` finds out whether it can.
  bool needs_kernels = false;
  /// The driver work, deferred until the case runs: sets raw, ours, between and note (or skip).
  /// Called once, on the copy that runs; may throw (the case could not run). Empty: the case is
  /// complete as declared.
  std::function<void(Case&)> prepare;

  /// Timed batches per round.
  int variants() const { return reference ? 4 : 3; }
};

/// How a row came out.
/// not_judged: a smoke run (--quick), whose few rounds cannot judge a target.
enum class Verdict { pass, fail, unresolved, not_judged };

/// A finished measurement.
struct Result {
  std::string name, raw_label, target, target_short;
  double raw_ns = 0;            ///< median of the A and A' batch means
  double ours_ns = 0;           ///< median of the B batch means
  double ratio = 0;             ///< median of per-round B / mean(A, A')
  double control = 0;           ///< A/A': median of per-round A' / A (1 when the method resolves)
  double resolution = 0;        ///< estimated standard error of `control` (a fraction)
  double reference_ns = 0;      ///< median of the reference batch means (0: none)
  std::string reference_label;  ///< what the reference does
  Verdict verdict = Verdict::fail;
  std::string skipped;  ///< why it was not run (empty when it ran)
  std::string note;     ///< extra figures (e.g. first vs repeat launch)
  std::string error;    ///< why it could not run (a driver failure; empty when it ran)
  int rounds = 0;       ///< A B A' rounds it ran
  bool capped = false;  ///< stopped by the time cap before reaching the wanted resolution
  /// Medians of raw and custream on a running stream (Case::running_between; 0: not measured).
  double running_raw_ns = 0, running_ours_ns = 0;
};

/// What the suite hears while a case runs (all untimed).
struct Progress {
  std::function<void()> batch;       ///< after every timed batch
  std::function<void(int)> planned;  ///< the case's timed batches, whenever its plan changes
};

/// The suite's listener; empty outside the suite. One thread runs the cases.
inline Progress& progress() {
  static Progress p;
  return p;
}

/// Times one batch of `body`: mean nanoseconds per iteration. `before` and `between` run
/// untimed, before and after it.
inline double time_batch(const Body& body, int iterations, const std::function<void()>& between,
                         const std::function<void()>& before = {}) {
  if (before) before();
  const auto start = Clock::now();
  body(iterations);
  const auto end = Clock::now();
  if (between) between();
  if (progress().batch) progress().batch();
  return std::chrono::duration<double, std::nano>(end - start).count() / iterations;
}

/// The extra stack depth of round `round`: one of the 64 cache-line offsets of a 4 KiB page,
/// visited in a rotating order (37 is coprime to 64). Every variant of a round runs at the same
/// depth, so that no variant keeps one alignment of its stack against the driver's data (4K
/// aliasing moves with the addresses the process was given, and shifted identical code by a few
/// per cent between runs).
inline std::size_t round_depth(int round) {
  return static_cast<std::size_t>((round * 37) % 64) * 64;
}

/// time_batch() with `depth` more bytes of stack below the caller's frame.
[[gnu::noinline]] inline double time_at_depth(std::size_t depth, const Body& body, int iterations,
                                              const std::function<void()>& between,
                                              const std::function<void()>& before) {
  void* pad = __builtin_alloca(depth + 16);
  asm volatile("" : : "r"(pad) : "memory");  // the pad is kept
  return time_batch(body, iterations, between, before);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Batch means per variant, one entry per round: a (raw), b (custream), a2 (raw again), and
/// ref (the reference, when the case has one).
struct Rounds {
  std::vector<double> a, b, a2, ref;
  int size() const { return static_cast<int>(a.size()); }

  /// Runs `count` more rounds of `c`. Round k times the variants in the order A B A' [R]
  /// rotated left by k, so each variant takes each position equally often, all of them at the
  /// stack depth round_depth(k).
  void run(const Case& c, int count) {
    const int n = c.variants();
    for (int i = 0; i < count; ++i) {
      const int shift = size() % n;
      const std::size_t depth = round_depth(size());
      double t[4] = {0, 0, 0, 0};
      for (int k = 0; k < n; ++k) {
        const int v = (k + shift) % n;
        const Body& body = v == 1 ? c.ours : v == 3 ? c.reference : c.raw;
        t[v] = time_at_depth(depth, body, c.iterations, c.between, c.before);
      }
      a.push_back(t[0]);
      b.push_back(t[1]);
      a2.push_back(t[2]);
      if (n == 4) ref.push_back(t[3]);
    }
  }

  /// Median of per-round A'/A.
  double control() const {
    std::vector<double> r;
    for (int i = 0; i < size(); ++i) r.push_back(a2[i] / a[i]);
    return median(r);
  }
  /// Median of per-round B / mean(A, A').
  double ratio() const {
    std::vector<double> r;
    for (int i = 0; i < size(); ++i) r.push_back(2 * b[i] / (a[i] + a2[i]));
    return median(r);
  }
  /// Robust spread of the per-round log(A'/A): 1.4826 × its median absolute deviation.
  double spread() const {
    std::vector<double> d;
    for (int i = 0; i < size(); ++i) d.push_back(std::log(a2[i] / a[i]));
    const double m = median(d);
    for (double& x : d) x = std::fabs(x - m);
    return 1.4826 * median(d);
  }
  /// Standard error of the median of these rounds' A'/A (1.2533 σ / √n).
  double resolution() const { return size() > 0 ? 1.2533 * spread() / std::sqrt(size()) : 1; }
  /// Rounds needed for `wanted` resolution at this spread.
  int rounds_for(double wanted) const {
    const double n = std::pow(1.2533 * spread() / wanted, 2);
    return n > 1e7 ? 10000000 : static_cast<int>(std::ceil(n));
  }
};

/// How a case is run.
struct RunLimits {
  int warmups = 3;  ///< warm-up rounds, not measured (caches, lazy loads, thread-locals)
  /// The most seconds of measurement a case gets while it adds rounds for resolution; it always
  /// runs its minimum (Case::rounds) unless `budget_s` says otherwise.
  double cap_s = 30;
  /// > 0: at most about this many seconds of measurement in all, even below the case's
  /// minimum rounds (at least min_rounds): the CPU emulator, whose numbers mean nothing.
  double budget_s = 0;
  int min_rounds = 3;       ///< the fewest rounds a budget leaves
  bool adapt = true;        ///< add rounds until the wanted resolution (off: exactly Case::rounds)
  bool judge = true;        ///< mark rows unresolved by their A/A' (off for smoke runs)
  int running_rounds = 21;  ///< rounds on a running stream for parked cases (not judged)
  int max_rounds = 100000;
};

/// Warms up, then measures raw and custream (and the reference) in rotating rounds until the
/// A/A' resolution is kWantedResolution or the cap is reached. `c` is prepared already.
inline Result run(const Case& c, const RunLimits& limits = {}) {
  Result r;
  r.name = c.name;
  r.raw_label = c.raw_label;
  r.target = c.target.text();
  r.target_short = c.target.short_text();
  if (!c.skip.empty()) {
    r.verdict = Verdict::pass;
    r.skipped = c.skip;
    return r;
  }
  Rounds warm;
  const auto warm_start = Clock::now();
  warm.run(c, limits.warmups);
  const double round_s =
      limits.warmups > 0
          ? std::chrono::duration<double>(Clock::now() - warm_start).count() / limits.warmups
          : 0;
  int want = c.rounds;
  if (limits.budget_s > 0 && round_s > 0) {
    want = std::max(limits.min_rounds, std::min(want, static_cast<int>(limits.budget_s / round_s)));
  }
  if (progress().planned) progress().planned((limits.warmups + want) * c.variants());
  Rounds rounds;
  const auto start = Clock::now();
  rounds.run(c, want);
  if (limits.adapt && limits.budget_s <= 0) {
    // Add rounds while the spread says the resolution is not reached and the cap allows.
    while (rounds.resolution() > kWantedResolution) {
      const double spent = std::chrono::duration<double>(Clock::now() - start).count();
      const double per_round = spent / rounds.size();
      const double room_rounds = (limits.cap_s - spent) / per_round;  // in double: no overflow
      if (!(room_rounds >= 1)) {
        r.capped = true;  // the time cap, and only it, stops the row short
        break;
      }
      const int room = static_cast<int>(std::min<double>(room_rounds, limits.max_rounds));
      const int need = std::min(rounds.rounds_for(kWantedResolution), limits.max_rounds);
      const int more = std::min(room, need - rounds.size());
      if (more <= 0) break;  // max_rounds reached (or the estimate is met up to rounding)
      // In steps of at most half again, so the estimate of the spread is refreshed.
      const int step = std::max(1, std::min(more, std::max(21, rounds.size() / 2)));
      if (progress().planned) {
        progress().planned((limits.warmups + rounds.size() + more) * c.variants());
      }
      rounds.run(c, step);
    }
  }
  r.rounds = rounds.size();
  std::vector<double> raw = rounds.a;
  raw.insert(raw.end(), rounds.a2.begin(), rounds.a2.end());
  r.raw_ns = median(raw);
  r.ours_ns = median(rounds.b);
  r.ratio = rounds.ratio();
  r.control = rounds.control();
  r.resolution = rounds.resolution();
  r.reference_ns = median(rounds.ref);
  r.reference_label = c.reference_label;
  if (c.running_between && limits.judge && limits.budget_s <= 0) {
    if (progress().planned) {
      progress().planned((limits.warmups + rounds.size() + limits.running_rounds) * c.variants());
    }
    Case running = c;
    running.before = {};
    running.between = c.running_between;
    running.reference = {};
    Rounds more;
    more.run(running, limits.running_rounds);
    std::vector<double> raw_running = more.a;
    raw_running.insert(raw_running.end(), more.a2.begin(), more.a2.end());
    r.running_raw_ns = median(raw_running);
    r.running_ours_ns = median(more.b);
  }
  const bool resolved = !limits.judge || std::fabs(r.control - 1) <= kUnresolvedControl;
  // Judged on the paired ratio (drift common to a round cancels), except absolute targets.
  const double ours = c.target.kind == Target::Kind::absolute ? r.ours_ns : r.ratio * r.raw_ns;
  r.verdict = !limits.judge                                    ? Verdict::not_judged
              : !resolved                                      ? Verdict::unresolved
              : c.target.holds(r.raw_ns, ours, r.reference_ns) ? Verdict::pass
                                                               : Verdict::fail;
  if (c.note) r.note = c.note(c);
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
    case Kind::reference_overhead:
      std::snprintf(buf, sizeof buf, "overhead <= %.2f x the reference's", rel);
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
    case Kind::reference_overhead:
      std::snprintf(buf, sizeof buf, "+<=%.2fx ref", rel);
      break;
  }
  return buf;
}

inline bool Target::holds(double raw_ns, double ours_ns, double reference_ns) const {
  switch (kind) {
    case Kind::raw_plus:
      return ours_ns <= raw_ns + std::max(abs_ns, rel * raw_ns);
    case Kind::raw_plus_abs:
      return ours_ns <= raw_ns + abs_ns;
    case Kind::absolute:
      return ours_ns <= abs_ns;
    case Kind::ratio:
      return ours_ns <= rel * raw_ns;
    case Kind::reference_overhead:
      return reference_ns > 0 && ours_ns - raw_ns <= rel * (reference_ns - raw_ns);
  }
  return false;
}

/// Prints the table and, when `csv` is not null, writes the numbers there (one row per case:
/// operation,raw_driver,raw_ns,custream_ns,ratio,a_a2,rounds,target,result,running_raw_ns,
/// running_custream_ns,note). `wide`:
/// every column (the raw driver calls, targets in words), else a table of at most 100 columns.
/// Returns true when no case that ran missed its target (unresolved rows are not misses).
bool report(const std::vector<Result>& results, std::FILE* csv, bool wide);

}  // namespace custream_bench
