// The `custream` command: `custream info`, `custream selftest`, `custream bench`.
//
//   custream <command> [--emulate | --auto] [command options]
//
// Exit status: 0 success; 1 failure (no usable driver, a failed check, a missed target);
// 2 bad arguments. --emulate runs on the CPU driver emulator of the build tree; --auto runs on
// the GPU where a driver and a device are present and on the emulator otherwise, saying which.
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
    "  --emulate  run on the CPU driver emulator of the build tree\n"
    "             (<build>/test/emu/libcuda.so.1, next to <build>/tools/custream)\n"
    "  --auto     run on the GPU when a driver and a device are present, otherwise on the\n"
    "             emulator; says which\n"
    "  --help     the command's help\n"
    "\n"
    "The driver is libcuda.so.1 from the loader's search path, or $CUSTREAM_LIBCUDA.\n"
    "Exit status: 0 success, 1 failure (no usable driver, a failed check, a missed target),\n"
    "2 bad arguments.\n";

constexpr const char* kInfoHelp =
    "usage: custream info [--emulate | --auto]\n"
    "\n"
    "Prints which driver library custream loaded and from where, the driver version, and for\n"
    "each device its ordinal, name, compute capability, memory and whether its primary context\n"
    "is active. Without a usable driver it says so in one line and exits 1.\n";

constexpr const char* kSelftestHelp =
    "usage: custream selftest [--emulate | --auto]\n"
    "\n"
    "On every device: creates and wraps streams (device inferred), current streams and scopes,\n"
    "events and elapsed time, host functions and callbacks in order, a PTX module and kernel\n"
    "launch, capture of a kernel and a host function, instantiate, upload, replay, update and\n"
    "fork/join capture. One row per check (pass / FAIL / skipped, time). Kernel checks are\n"
    "skipped, saying so, where the driver cannot load modules (the emulator). Exits 1 when a\n"
    "check fails or there is no usable driver.\n";

constexpr const char* kBenchHelp =
    "usage: custream bench [--emulate | --auto] [--csv FILE] [--filter TEXT] [--pairs N]\n"
    "                      [--quick] [--list]\n"
    "\n"
    "The benchmark suite on device 0 (docs/performance.md): each operation raw (driver call) and "
    "through custream, on\n"
    "the same handles, interleaved A B B A in batches (>= 21 pairs), medians of batch means;\n"
    "enqueueing cases in batches of <= 256 with an untimed synchronize between batches.\n"
    "Prints a progress line per case (stderr), then a table: raw, custream, ratio, target,\n"
    "pass/fail. Exits 1 when a target is missed.\n"
    "\n"
    "  --csv FILE     also write the numbers to FILE (bench/plot.py reads it)\n"
    "  --filter TEXT  only the cases whose name contains TEXT\n"
    "  --pairs N      A B B A pairs for every case (N >= 21; default: each case's own,\n"
    "                 25 to 1,001)\n"
    "  --quick        smoke run (3 pairs, 1 warm-up): targets shown, not enforced\n"
    "  --list         list the cases and targets, run nothing\n"
    "\n"
    "Numbers mean something only on a real GPU, compared within one run.\n";

int usage_error(const std::string& message, const char* help) {
  std::fprintf(stderr, "custream: %s\n\n%s", message.c_str(), help);
  return 2;
}

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  return buf;
}

/// The emulator next to this executable in a build tree, or "" (and where it looked).
std::string find_emulator(std::string* looked) {
  const std::string exe = self_path();
  const std::string dir = exe.substr(0, exe.rfind('/'));
  const std::string candidate = dir + "/../test/emu/libcuda.so.1";
  char real[PATH_MAX];
  if (realpath(candidate.c_str(), real) != nullptr && access(real, R_OK) == 0) return real;
  *looked = candidate;
  return {};
}

bool use_emulator(const char* command) {
  std::string looked;
  const std::string emu = find_emulator(&looked);
  if (emu.empty()) {
    std::fprintf(stderr,
                 "custream %s: --emulate needs the CPU driver emulator of a build tree and found "
                 "none at %s (an installed custream has none; build with tests enabled and run "
                 "<build>/tools/custream)\n",
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

  bool emulate = false, automatic = false;
#ifdef CUSTREAM_TOOL_BENCH
  custream_bench::SuiteOptions bench;
#endif
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(help, stdout);
      return 0;
    } else if (arg == "--emulate") {
      emulate = true;
    } else if (arg == "--auto") {
      automatic = true;
#ifdef CUSTREAM_TOOL_BENCH
    } else if (command == "bench" && (arg == "--csv" || arg == "--filter")) {
      if (i + 1 >= argc) return usage_error(arg + " needs a value", help);
      (arg == "--csv" ? bench.csv : bench.filter) = argv[++i];
    } else if (command == "bench" && arg == "--pairs") {
      if (i + 1 >= argc) return usage_error(arg + " needs a value", help);
      char* end = nullptr;
      const long pairs = std::strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || pairs < 21 || pairs > 100000) {
        return usage_error(
            "--pairs needs a whole number from 21 to 100000 (the method needs >= 21)", help);
      }
      bench.pairs = static_cast<int>(pairs);
    } else if (command == "bench" && arg == "--quick") {
      bench.quick = true;
    } else if (command == "bench" && arg == "--list") {
      bench.list = true;
#endif
    } else {
      return usage_error("unknown option \"" + arg + "\" for " + command, help);
    }
  }
  if (emulate && automatic) return usage_error("--emulate and --auto exclude each other", help);

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
    if (custream_tool::driver_is_emulator() && !bench.list) {
      std::printf(
          "custream bench: on the CPU driver emulator; its numbers say nothing about a "
          "GPU\n");
    }
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
