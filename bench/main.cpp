// custream-bench: the SPEC §6 suite, raw driver and custream interleaved in one process.
//   custream-bench [--csv FILE] [--filter TEXT] [--help]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"

int main(int argc, char** argv) {
  const char* csv_path = nullptr;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      csv_path = argv[++i];
    } else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
      filter = argv[++i];
    } else {
      const bool help = std::strcmp(argv[i], "--help") == 0;
      std::fprintf(help ? stdout : stderr,
                   "usage: custream-bench [--csv FILE] [--filter TEXT]\n"
                   "Runs the SPEC §6 benchmarks (raw driver vs custream, interleaved A B B A,\n"
                   "medians of batch means) on device 0 and prints a table.\n");
      return help ? 0 : 2;
    }
  }
  try {
    const auto& info = custream::driver_info();
    custream::Device d(0);
    std::printf("driver %d from %s; device 0: %s\n", info.version, info.library.c_str(),
                d.name().c_str());
  } catch (const custream::Error& e) {
    std::fprintf(stderr, "custream-bench: %s\n", e.what());
    return 1;
  }
  std::vector<custream_bench::Case> cases;
  custream_bench::add_stream_cases(cases);
  std::vector<custream_bench::Result> results;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (!filter.empty() && cases[i].name.find(filter) == std::string::npos) continue;
    std::fprintf(stderr, "[%zu/%zu] %s…\n", i + 1, cases.size(), cases[i].name.c_str());
    results.push_back(custream_bench::run(cases[i]));
  }
  std::FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv) std::fprintf(csv, "operation,raw_driver,raw_ns,custream_ns,target,result\n");
  const bool all = custream_bench::report(results, csv);
  if (csv) std::fclose(csv);
  return all ? 0 : 1;
}
