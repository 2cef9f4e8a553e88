// The `custream` command: `custream info`, `custream selftest`, `custream bench`.
//
//   custream <command> [--emulate | --auto] [command options]
//
// Options are parsed getopt_long-style: `--csv FILE` and `--csv=FILE` alike. Exit status:
// 0 success; 1 failure (no usable driver, a failed check, a missed target); 2 bad arguments.
// --emulate runs on the CPU driver emulator (the build tree's or the installed one); --auto runs on
// the GPU where a driver and a device are present and on the emulator otherwise, saying which.
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "custream/custream.hpp"
#include "tool.hpp"
#ifdef CUSTREAM_TOOL_BENCH
#include "bench_cases.hpp"
#endif

namespace {

constexpr const char* kUsage =
    "usage: custream <command> [--emulate | --auto] [options]\n"
    "\n"
    "commands:\n"
    "  info      which driver library was loaded and from where, its version, every device\n"
    "  selftest  every capability on every device, end to end, one row per check\n"
    "  bench     the benchmarks: raw driver and custream interleaved in one process\n"
    "\n"
    "options of every command:\n"
    "  --emulate  run on the CPU driver emulator (the build tree's, else the installed one)\n"
    "             (<build>/emulator/libcuda.so.1, next to <build>/tools/custream)\n"
    "  --auto     run on the GPU when a driver and a device are present, otherwise on the\n"
    "             emulator; says which\n"
    "  --help     the command's help (custream <command> --help)\n"
    "\n"
    "An option's value follows it or an '=': --csv FILE or --csv=FILE.\n"
    "The driver is libcuda.so.1 from the loader's search path, or $CUSTREAM_LIBCUDA.\n"
    "Exit status: 0 success, 1 failure (no usable driver, a failed check, a missed target),\n"
    "2 bad arguments.\n";

constexpr const char* kInfoHelp =
    "usage: custream info [--emulate | --auto]\n"
    "\n"
    "Prints which driver library custream loaded and from where, the driver version, and for\n"
    "each device its ordinal, name, compute capability, memory and whether its primary context\n"
    "is active. Without a usable driver it says so in one line and exits 1.\n"
    "\n"
    "  --emulate  run on the CPU driver emulator (the build tree's, else the installed one)\n"
    "  --auto     the GPU when there is one, else the emulator\n";

constexpr const char* kSelftestHelp =
    "usage: custream selftest [--emulate | --auto]\n"
    "\n"
    "On every device: creates and wraps streams (device inferred), current streams and scopes,\n"
    "events and elapsed time, host functions and callbacks in order, a PTX module and kernel\n"
    "launch, capture of a kernel and a host function, instantiate, upload, replay, update and\n"
    "fork/join capture. One row per check (pass / FAIL / skipped, time). Kernel checks are\n"
    "skipped, saying so, where the driver cannot load modules; on the emulator the kernel runs\n"
    "as a CPU function registered with it. Exits 1 when a check fails or there is no usable\n"
    "driver.\n"
    "\n"
    "  --emulate  run on the CPU driver emulator (the build tree's, else the installed one)\n"
    "  --auto     the GPU when there is one, else the emulator\n";

constexpr const char* kBenchHelp =
    "usage: custream bench [--emulate | --auto] [--csv FILE] [--filter TEXT] [--rounds N]\n"
    "                      [--cap SECONDS] [--quick] [--wide] [--list]\n"
    "\n"
    "The benchmark suite on device 0 (docs/performance.md): each operation raw (A), through\n"
    "custream (B) and raw again (A'), on the same handles, timed in batches in rounds whose\n"
    "order rotates (A B A', B A' A, A' A B, ...); enqueueing cases in batches of <= 256 with an\n"
    "untimed synchronize between batches. Each case runs at least its own number of rounds\n"
    "(>= 21), and more until the A/A' control resolves 0.15 % or its time cap is reached. Prints\n"
    "progress per case with the time left (stderr), then a table (stdout): raw ns, custream\n"
    "ns, the paired ratio, A/A', target, and pass, FAIL, or unresolved (A/A' off by more than\n"
    "0.5 % after the cap: the run cannot judge that row).\n"
    "\n"
    "  --csv FILE     also write the numbers to FILE (bench/plot.py reads it); a FILE that\n"
    "                 cannot be written stops the command before any case runs\n"
    "  --filter TEXT  only the cases whose name contains TEXT (=NAME: only the case NAME)\n"
    "  --rounds N     exactly N rounds for every case (21 <= N <= 100000), no more for\n"
    "                 resolution; default: each case's own minimum, and more as needed\n"
    "  --cap SECONDS  the most measurement a case adds rounds for (default 20)\n"
    "  --quick        smoke run: 3 rounds and 1 warm-up per case (overrides --rounds);\n"
    "                 targets shown, not enforced\n"
    "  --wide         the full table: also the raw driver calls, rounds and the targets in\n"
    "                 words (the default table fits 100 columns)\n"
    "  --list         list the cases a run with these options would run (rounds, target), run\n"
    "                 nothing; needs no driver\n"
    "  --emulate      run on the CPU driver emulator (the build tree's, else the installed\n"
    "                 one): each case is capped at about 2 s of measurement (fewer rounds)\n"
    "                 unless --rounds is given\n"
    "  --auto         the GPU when there is one, else the emulator\n"
    "\n"
    "Exit status: 0 no target missed (unresolved rows are reported, not misses); with --quick,\n"
    "0 when every case ran, whatever the numbers. 1 when a target is missed (not with\n"
    "--quick), a case could not run (a driver failure), there is no usable driver or FILE\n"
    "cannot be written. 2 bad arguments. Cases the driver cannot run are skipped, saying so,\n"
    "not failed.\n"
    "\n"
    "Numbers mean something only on a real GPU, compared within one run.\n";

int usage_error(const std::string& message, const char* help) {
  std::fprintf(stderr, "custream: %s\n\n%s", message.c_str(), help);
  return 2;
}

/// What the options of a command asked for.
struct Args {
  bool emulate = false, automatic = false;
#ifdef CUSTREAM_TOOL_BENCH
  custream_bench::SuiteOptions bench;
#endif
};

enum class Parsed { run, help, error };

/// The long options' getopt_long values (above any character).
enum Option : int { kEmulate = 256, kAuto, kCsv, kFilter, kRounds, kCap, kQuick, kWide, kList };

/// The option as the user wrote it, without an "=VALUE": for messages.
std::string option_text(const char* arg) {
  const std::string text = arg != nullptr ? arg : "";
  return text.substr(0, text.find('='));
}

/// Parses argv[2..] getopt_long-style (a value after the option or after '=') into `a`.
/// Prints a usage error itself, with `help` (the command's help).
Parsed parse_options(const std::string& command, const char* help, int argc, char** argv, Args* a) {
  std::vector<option> options = {
      {"emulate", no_argument, nullptr, kEmulate},
      {"auto", no_argument, nullptr, kAuto},
      {"help", no_argument, nullptr, 'h'},
  };
#ifdef CUSTREAM_TOOL_BENCH
  if (command == "bench") {
    options.push_back({"csv", required_argument, nullptr, kCsv});
    options.push_back({"filter", required_argument, nullptr, kFilter});
    options.push_back({"rounds", required_argument, nullptr, kRounds});
    options.push_back({"cap", required_argument, nullptr, kCap});
    options.push_back({"quick", no_argument, nullptr, kQuick});
    options.push_back({"wide", no_argument, nullptr, kWide});
    options.push_back({"list", no_argument, nullptr, kList});
  }
#endif
  options.push_back({nullptr, 0, nullptr, 0});

  // getopt_long sees the command as argv[0]: the options start at argv[2].
  const int count = argc - 1;
  char** args = argv + 1;
  opterr = 0;  // our own messages
  optind = 1;
  // '+': stop at the first operand (a command takes none); ':': a missing value returns ':'.
  for (int c; (c = getopt_long(count, args, "+:h", options.data(), nullptr)) != -1;) {
    const std::string arg = option_text(args[optind - 1]);
    switch (c) {
      case 'h':
        return Parsed::help;
      case kEmulate:
        a->emulate = true;
        break;
      case kAuto:
        a->automatic = true;
        break;
#ifdef CUSTREAM_TOOL_BENCH
      case kCsv:
        if (*optarg == '\0') {
          usage_error("--csv needs a file name", help);
          return Parsed::error;
        }
        a->bench.csv = optarg;
        break;
      case kFilter:
        a->bench.filter = optarg;
        break;
      case kRounds: {
        char* end = nullptr;
        errno = 0;
        const long rounds = std::strtol(optarg, &end, 10);
        if (end == optarg || *end != '\0' || errno != 0 || rounds < 21 || rounds > 100000) {
          const std::string value = optarg;
          usage_error("--rounds \"" + value +
                          "\": not a whole number from 21 to 100000 (the "
                          "method needs >= 21 rounds)",
                      help);
          return Parsed::error;
        }
        a->bench.rounds = static_cast<int>(rounds);
        break;
      }
      case kCap: {
        char* end = nullptr;
        errno = 0;
        const double cap = std::strtod(optarg, &end);
        if (end == optarg || *end != '\0' || errno != 0 || !(cap >= 1 && cap <= 3600)) {
          usage_error(
              "--cap \"" + std::string(optarg) + "\": not a number of seconds from 1 to 3600",
              help);
          return Parsed::error;
        }
        a->bench.cap_s = cap;
        break;
      }
      case kQuick:
        a->bench.quick = true;
        break;
      case kWide:
        a->bench.wide = true;
        break;
      case kList:
        a->bench.list = true;
        break;
#endif
      case ':':
        usage_error(arg + " needs a value", help);
        return Parsed::error;
      default:  // '?': an unknown option, or a value given to one that takes none
        if (optopt >= kEmulate) {
          usage_error(arg + " takes no value", help);
        } else if (optopt != 0) {
          usage_error("unknown option \"-" + std::string(1, static_cast<char>(optopt)) + "\" for " +
                          command,
                      help);
        } else {
          usage_error("unknown option \"" + arg + "\" for " + command, help);
        }
        return Parsed::error;
    }
  }
  if (optind < count) {
    usage_error("unexpected argument \"" + std::string(args[optind]) + "\" for " + command, help);
    return Parsed::error;
  }
  return Parsed::run;
}

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  return buf;
}

/// The CPU driver emulator: the build tree's (next to this executable in <build>/tools), else
/// the installed one (<libdir>/custream/libcuda.so.1, found relative to this executable's
/// <bindir> so that a moved prefix works, then at the configured prefix). "" when there is
/// none; `looked` says where it looked.
std::string find_emulator(std::string* looked) {
  const std::string exe = self_path();
  const std::string dir = exe.substr(0, exe.rfind('/'));
  std::vector<std::string> candidates = {dir + "/../emulator/libcuda.so.1"};
#ifdef CUSTREAM_TOOL_EMULATOR_FROM_BINDIR
  candidates.push_back(dir + "/" CUSTREAM_TOOL_EMULATOR_FROM_BINDIR);
#endif
#ifdef CUSTREAM_TOOL_EMULATOR
  candidates.push_back(CUSTREAM_TOOL_EMULATOR);
#endif
  looked->clear();
  for (const std::string& candidate : candidates) {
    char real[PATH_MAX];
    if (realpath(candidate.c_str(), real) != nullptr && access(real, R_OK) == 0) return real;
    *looked += (looked->empty() ? "" : ", ") + candidate;
  }
  return {};
}

bool use_emulator(const char* command) {
  std::string looked;
  const std::string emu = find_emulator(&looked);
  if (emu.empty()) {
    std::fprintf(stderr,
                 "custream %s: --emulate needs the CPU driver emulator and found none at %s "
                 "(install custream with -Demulator=enabled, or run <build>/tools/custream of a "
                 "build with tests)\n",
                 command, looked.c_str());
    return false;
  }
  setenv("CUSTREAM_LIBCUDA", emu.c_str(), 1);  // before custream loads the driver (lazily)
  return true;
}

/// Why the driver cannot be used ("" when a driver with a device is there).
std::string why_no_gpu() {
  try {
    const custream::DriverInfo& info = custream::driver_info();
    if (custream::Device::count() == 0) {
      return "the CUDA driver " + info.library + " reports no device";
    }
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage_error("no command given", kUsage);
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "--version") {
    std::printf("custream %s\n", custream::version().text);
    return 0;
  }
  const char* help = command == "info"       ? kInfoHelp
                     : command == "selftest" ? kSelftestHelp
                     : command == "bench"    ? kBenchHelp
                                             : nullptr;
  if (help == nullptr) return usage_error("unknown command \"" + command + "\"", kUsage);

  Args args;
  const Parsed parsed = parse_options(command, help, argc, argv, &args);
  if (parsed == Parsed::help) {
    std::fputs(help, stdout);
    return 0;
  }
  if (parsed == Parsed::error) return 2;
  const bool emulate = args.emulate, automatic = args.automatic;
  if (emulate && automatic) return usage_error("--emulate and --auto exclude each other", help);

#ifdef CUSTREAM_TOOL_BENCH
  // The cases are declared without a driver: listing them needs none.
  custream_bench::SuiteOptions& bench = args.bench;
  if (command == "bench" && bench.list) {
    bench.emulator = emulate;
    return custream_bench::list_cases(bench);
  }
#endif

  const char* env = std::getenv("CUSTREAM_LIBCUDA");
  if (emulate) {
    if (!use_emulator(command.c_str())) return 1;
  } else if (automatic && (env == nullptr || *env == '\0')) {
    const std::string why = why_no_gpu();
    if (why.empty()) {
      std::printf("custream %s --auto: a GPU is present; running on it\n", command.c_str());
    } else {
      std::string looked;
      const std::string emu = find_emulator(&looked);
      if (emu.empty()) {
        std::fprintf(stderr, "custream %s: no GPU: %s; and no CPU driver emulator at %s\n",
                     command.c_str(), why.c_str(), looked.c_str());
        return 1;
      }
      // custream loads the driver once per process: run again with the emulator selected.
      std::printf("custream %s --auto: no GPU (%s); running on the CPU driver emulator %s\n",
                  command.c_str(), why.c_str(), emu.c_str());
      std::fflush(stdout);
      setenv("CUSTREAM_LIBCUDA", emu.c_str(), 1);
      const std::string exe = self_path();
      execv(exe.c_str(), argv);
      std::fprintf(stderr, "custream %s: cannot run %s again: %s\n", command.c_str(), exe.c_str(),
                   std::strerror(errno));
      return 1;
    }
  }

  const std::string why = why_no_gpu();
  if (!why.empty()) {
    std::fprintf(stderr, "custream %s: no GPU: %s (--emulate runs it on the CPU driver emulator)\n",
                 command.c_str(), why.c_str());
    return 1;
  }

  try {
    if (command == "info") return custream_tool::info();
    if (command == "selftest") return custream_tool::selftest();
#ifdef CUSTREAM_TOOL_BENCH
    bench.emulator = custream_tool::driver_is_emulator();
    return custream_bench::run_suite(bench);
#else
    std::fprintf(stderr,
                 "custream bench: this custream was built without the benchmarks "
                 "(-Dbench=false)\n");
    return 1;
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custream %s: %s\n", command.c_str(), e.what());
    return 1;
  }
}
