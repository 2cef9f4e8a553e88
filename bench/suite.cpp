// The benchmark suite behind `custream bench` (docs/performance.md): builds every case family, runs
// the cases one after another (raw and custream interleaved A B B A inside each, harness.hpp),
// shows a progress line, then prints the table and writes the CSV.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"

namespace custream_bench {
namespace {

std::string csv_text(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

bool report(const std::vector<Result>& results, std::FILE* csv) {
  bool all = true;
  std::printf("\n%-52s %-38s %12s %12s %7s  %-28s %s\n", "operation", "raw driver", "raw ns",
              "custream ns", "ratio", "target", "result");
  for (const Result& r : results) {
    if (!r.skipped.empty()) {
      std::printf("%-52s %-38s %12s %12s %7s  %-28s %s\n", r.name.c_str(), r.raw_label.c_str(), "-",
                  "-", "-", r.target.c_str(), "skipped");
    } else {
      std::printf("%-52s %-38s %12.1f %12.1f %7.3f  %-28s %s\n", r.name.c_str(),
                  r.raw_label.c_str(), r.raw_ns, r.ours_ns, r.raw_ns > 0 ? r.ours_ns / r.raw_ns : 0,
                  r.target.c_str(), r.pass ? "pass" : "FAIL");
      all = all && r.pass;
    }
    if (csv) {
      char raw[32] = "", ours[32] = "", ratio[32] = "";
      if (r.skipped.empty()) {
        std::snprintf(raw, sizeof raw, "%.2f", r.raw_ns);
        std::snprintf(ours, sizeof ours, "%.2f", r.ours_ns);
        std::snprintf(ratio, sizeof ratio, "%.4f", r.raw_ns > 0 ? r.ours_ns / r.raw_ns : 0);
      }
      const char* result = !r.skipped.empty() ? "skipped" : r.pass ? "pass" : "fail";
      const std::string note = !r.skipped.empty() ? r.skipped : r.note;
      std::fprintf(csv, "%s,%s,%s,%s,%s,%s,%s,%s\n", csv_text(r.name).c_str(),
                   csv_text(r.raw_label).c_str(), raw, ours, ratio, csv_text(r.target).c_str(),
                   result, csv_text(note).c_str());
    }
  }
  bool notes = false;
  for (const Result& r : results) {
    const std::string& text = r.skipped.empty() ? r.note : r.skipped;
    if (text.empty()) continue;
    if (!notes) std::printf("\n");
    notes = true;
    std::printf("%s %s: %s\n", r.skipped.empty() ? "note" : "skipped", r.name.c_str(),
                text.c_str());
  }
  return all;
}

int run_suite(const SuiteOptions& options) {
  const auto& info = custream::driver_info();
  custream::Device device(0);
  std::vector<Case> cases;
  add_stream_cases(cases);
  add_graph_cases(cases);

  if (options.list) {
    for (const Case& c : cases) {
      std::printf("%-52s %-28s %s\n", c.name.c_str(), c.target.text().c_str(),
                  c.skip.empty() ? "" : ("(skipped: " + c.skip + ")").c_str());
    }
    return 0;
  }

  std::vector<const Case*> selected;
  for (const Case& c : cases) {
    if (options.filter.empty() || c.name.find(options.filter) != std::string::npos) {
      selected.push_back(&c);
    }
  }
  if (selected.empty()) {
    std::fprintf(stderr, "custream bench: no case matches \"%s\" (see custream bench --list)\n",
                 options.filter.c_str());
    return 1;
  }

  std::FILE* csv = nullptr;
  if (!options.csv.empty()) {
    csv = std::fopen(options.csv.c_str(), "w");
    if (csv == nullptr) {
      std::fprintf(stderr, "custream bench: cannot write %s\n", options.csv.c_str());
      return 1;
    }
  }

  std::printf("custream bench: driver %d from %s; device 0: %s\n", info.version,
              info.library.c_str(), device.name().c_str());
  if (options.quick) {
    std::printf(
        "quick run: 3 pairs per case, 1 warm-up; a smoke test of the suite, not the "
        "method of docs/performance.md (>= 21 pairs): targets are shown, not enforced\n");
  } else {
    std::printf(
        "method (docs/performance.md): raw and custream on the same handles, interleaved A B B A, "
        "medians of batch means, one process\n");
  }
  std::fflush(stdout);

  const bool tty = isatty(fileno(stderr)) != 0;
  std::vector<Result> results;
  for (std::size_t i = 0; i < selected.size(); ++i) {
    Case c = *selected[i];
    if (options.pairs > 0) c.pairs = options.pairs;
    if (options.quick) c.pairs = 3;
    if (tty) {
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s…", i + 1, selected.size(), c.name.c_str());
    } else {
      std::fprintf(stderr, "[%zu/%zu] %s\n", i + 1, selected.size(), c.name.c_str());
    }
    std::fflush(stderr);
    results.push_back(run(c, options.quick ? 1 : 3));
  }
  if (tty) std::fprintf(stderr, "\r\033[K");

  if (csv) {
    std::fprintf(csv, "operation,raw_driver,raw_ns,custream_ns,ratio,target,result,note\n");
  }
  const bool all = report(results, csv);
  if (csv) {
    const bool written = std::fclose(csv) == 0;
    if (!written) {
      std::fprintf(stderr, "custream bench: writing %s failed\n", options.csv.c_str());
      return 1;
    }
    std::printf("\nnumbers written to %s\n", options.csv.c_str());
  }
  if (options.quick) return 0;
  std::printf("%s\n", all ? "every target met" : "some targets NOT met");
  return all ? 0 : 1;
}

}  // namespace custream_bench
