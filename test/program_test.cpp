// custream::Program (CUDA C++ compiled at run time with NVRTC) and custream::CompileCache
// (compiled code on disk across processes). NVRTC runs on the CPU: these cases run in CI.
// Cases that need a second process run this program again (/proc/self/exe) with a hidden tag.
// Design: docs/design/jit.md.
#include "custream/program.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/library_kernel.hpp"
#include "custream/stream.hpp"
#include "emu_control.h"
#include "program/sha256.hpp"
#include "test_support.hpp"

using custream::CodeTarget;
using custream::CompileCache;
using custream::CompileError;
using custream::Program;
using custream::ProgramImage;
using custream::ProgramOptions;
using custream_test::expect_error;

namespace {

// A template kernel (instantiated by name expressions), an extern "C" one, and a header.
const char* const kSource = R"(#include "ops.cuh"
template <typename T>
__global__ void scale(T* data, T factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = ops::mul(data[i], factor) + T(OFFSET);
}
extern "C" __global__ void fill(float* data, float value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = value;
}
)";
const char* const kHeader = R"(#pragma once
namespace ops {
template <typename T> __device__ T mul(T a, T b) { return a * b; }
}
)";

ProgramOptions default_options() {
  ProgramOptions options;
  options.define("OFFSET", "0");
  return options;
}

Program make_program(const CompileCache& cache, const std::string& source = kSource,
                     const std::string& header = kHeader,
                     ProgramOptions options = default_options()) {
  Program p(source, "scale.cu", std::move(options));
  p.add_header("ops.cuh", header).add_name_expression("scale<float>");
  p.add_name_expression("scale<double>").cache(cache);
  return p;
}

// NVRTC is loaded before the driver (on the emulator it must be: custream/program.hpp). Skips
// the case when there is no NVRTC.
#define REQUIRE_NVRTC()                                          \
  do {                                                           \
    try {                                                        \
      Program::nvrtc_version();                                  \
    } catch (const custream::Error& e) {                         \
      CUSTREAM_SKIP("needs NVRTC (CUDA toolkit): " << e.what()); \
    }                                                            \
  } while (false)

// A fresh empty directory under /tmp, removed (with what is in it) by the destructor.
struct TempDir {
  std::string path;
  TempDir() {
    char templ[] = "/tmp/custream-program-test-XXXXXX";
    REQUIRE(mkdtemp(templ) != nullptr);
    path = templ;
  }
  ~TempDir() {
    const std::string command = "chmod -R u+w '" + path + "' 2>/dev/null; rm -rf '" + path + "'";
    if (std::system(command.c_str()) != 0)
      std::fprintf(stderr, "could not remove %s\n", path.c_str());
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    const std::string command = "ls -A '" + path + "'";
    FILE* ls = popen(command.c_str(), "r");
    char line[512];
    while (ls != nullptr && std::fgets(line, sizeof line, ls) != nullptr) {
      std::string name = line;
      if (!name.empty() && name.back() == '\n') name.pop_back();
      out.push_back(name);
    }
    if (ls != nullptr) pclose(ls);
    return out;
  }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// This test program run again, with `tag` and the environment `env` added; it writes what it
// found to $PROGRAM_TEST_OUT (returned) and its stderr to $PROGRAM_TEST_OUT.err.
struct Child {
  pid_t pid = -1;
  std::string out;
};

Child start_child(const std::string& tag, const std::vector<std::string>& env,
                  const std::string& out) {
  Child c;
  c.out = out;
  c.pid = fork();
  REQUIRE(c.pid >= 0);
  if (c.pid == 0) {
    for (const std::string& e : env) putenv(strdup(e.c_str()));
    setenv("PROGRAM_TEST_OUT", out.c_str(), 1);
    const int err = open((out + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = open("/dev/null", O_WRONLY);
    if (err >= 0) dup2(err, 2);
    if (null >= 0) dup2(null, 1);
    execl("/proc/self/exe", "program-tests", tag.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return c;
}

// Waits for the child; returns what it wrote to its out file (empty when it failed).
std::string finish_child(const Child& c) {
  int status = 0;
  REQUIRE(waitpid(c.pid, &status, 0) == c.pid);
  INFO("child stderr: " << read_text(c.out + ".err"));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return read_text(c.out);
}

std::string run_child(const std::string& tag, const std::vector<std::string>& env,
                      const std::string& out) {
  return finish_child(start_child(tag, env, out));
}

std::string the_entry(const TempDir& dir) {
  std::string entry;
  for (const std::string& f : dir.files()) {
    if (f.size() > 6 && f.compare(f.size() - 6, 6, ".entry") == 0) entry = dir.path + "/" + f;
  }
  return entry;
}

}  // namespace

// ---- compiling ----

TEST_CASE("Program compiles CUDA C++ with headers and returns the lowered names", "[program]") {
  REQUIRE_NVRTC();
  const ProgramImage image = make_program(CompileCache::off()).build("compute_75");
  CHECK(image.ptx);
  CHECK(image.arch == "compute_75");
  CHECK_FALSE(image.from_cache);
  REQUIRE(!image.bytes.empty());
  CHECK(image.bytes.back() == '\0');  // PTX with its NUL, as Library::from_image wants
  CHECK(image.bytes.find(".target sm_75") != std::string::npos);
  REQUIRE(image.lowered_names.size() == 2);
  CHECK(image.lowered_names[0].first == "scale<float>");
  CHECK(image.lowered_names[0].second == "_Z5scaleIfEvPT_S0_i");
  CHECK(image.lowered_names[1].first == "scale<double>");
  CHECK(image.lowered_names[1].second == "_Z5scaleIdEvPT_S0_i");
  for (const auto& [expression, lowered] : image.lowered_names) {
    CHECK(image.bytes.find(".entry " + lowered) != std::string::npos);
  }
  CHECK(image.bytes.find(".entry fill") != std::string::npos);

  const ProgramImage cubin = make_program(CompileCache::off()).build("sm_90");
  CHECK_FALSE(cubin.ptx);
  CHECK(cubin.bytes.compare(0, 4,
                            "\x7f"
                            "ELF") == 0);
}

TEST_CASE("A compile error carries NVRTC's log with line numbers, the options and the version",
          "[program]") {
  REQUIRE_NVRTC();
  const std::string bad = "__global__ void k(int* p) {\n  *p = 1;\n  undeclared_thing(p);\n}\n";
  ProgramOptions options;
  options.define("FOO", "1").option("-maxrregcount=32");
  options.line_info = true;
  Program p(bad, "bad.cu", options);
  p.cache(CompileCache::off());
  try {
    p.build("compute_75");
    FAIL("no CompileError");
  } catch (const CompileError& e) {
    const std::string what = e.what();
    CHECK(e.result() == CUDA_ERROR_INVALID_SOURCE);
    CHECK(e.call() == "nvrtcCompileProgram");
    CHECK(custream_test::contains_text(e.log(), "bad.cu(3): error") == "bad.cu(3): error");
    CHECK(custream_test::contains_text(what, "bad.cu(3): error") == "bad.cu(3): error");
    CHECK(custream_test::contains_text(what, "undeclared_thing") == "undeclared_thing");
    CHECK(e.options() ==
          "--std=c++17 -DFOO=1 -lineinfo -maxrregcount=32 --gpu-architecture=compute_75");
    CHECK(custream_test::contains_text(what, e.options()) == e.options());
    const auto [major, minor] = Program::nvrtc_version();
    const std::string version = "NVRTC " + std::to_string(major) + "." + std::to_string(minor);
    CHECK(e.compiler_version() == version);
    CHECK(custream_test::contains_text(what, version) == version);
  }
}

TEST_CASE("A name expression that names nothing is a CompileError naming it", "[program]") {
  REQUIRE_NVRTC();
  Program p(kSource, "scale.cu", default_options());
  p.add_header("ops.cuh", kHeader).add_name_expression("scale<float>");
  p.add_name_expression("no_such_kernel<int>").cache(CompileCache::off());
  try {
    p.build("compute_75");
    FAIL("no CompileError");
  } catch (const CompileError& e) {
    CHECK(custream_test::contains_text(e.log(), "no_such_kernel") == "no_such_kernel");
  }
  // A lowered name never asked for: an Error listing those given.
  expect_error([&] { p.lowered_name("scale<int>"); }, CUDA_ERROR_NOT_FOUND,
               "name expressions given: scale<float>, no_such_kernel<int>");
}

// The child of the next case: NVRTC named by a path that does not exist.
TEST_CASE("(child) NVRTC absent", "[.program-child-no-nvrtc]") {
  std::string text;
  for (int attempt = 0; attempt < 2; ++attempt) {  // recorded, and thrown again the same
    try {
      Program("__global__ void k() {}").cache(CompileCache::off()).build("compute_75");
      text += "compiled\n";
    } catch (const custream::Error& e) {
      text += e.name() + "|" + e.what() + "\n";
    }
  }
  write_text(std::getenv("PROGRAM_TEST_OUT"), text);
}

TEST_CASE("Without NVRTC, compiling throws an Error naming NVRTC, what was tried and the fix",
          "[program]") {
  TempDir dir;
  const std::string text =
      run_child("[.program-child-no-nvrtc]", {"CUSTREAM_NVRTC=/nonexistent/libnvrtc.so.13"},
                dir.path + "/out");
  const std::string first = text.substr(0, text.find('\n') + 1);
  CHECK(text == first + first);  // the second attempt: the same error
  CHECK(first.rfind("CUDA_ERROR_NOT_FOUND|NVRTC not found (tried /nonexistent/libnvrtc.so.13", 0) ==
        0);
  CHECK(custream_test::contains_text(first, "CUSTREAM_NVRTC names a library that does not load") ==
        "CUSTREAM_NVRTC names a library that does not load");
}

// ---- the compile cache ----

TEST_CASE("The compile cache serves a second Program; any change to the input misses",
          "[program][cache]") {
  REQUIRE_NVRTC();
  TempDir dir;
  const CompileCache cache(dir.path);
  const ProgramImage first = make_program(cache).build("compute_75");
  CHECK_FALSE(first.from_cache);
  CHECK(cache.stats().stores == 1);
  const ProgramImage again = make_program(cache).build("compute_75");
  CHECK(again.from_cache);
  CHECK(again.bytes == first.bytes);
  CHECK(again.lowered_names == first.lowered_names);
  CHECK(cache.stats().hits == 1);

  // Each of these changes the key: a compilation, not a hit.
  CHECK_FALSE(make_program(cache, std::string(kSource) + "\n").build("compute_75").from_cache);
  CHECK_FALSE(
      make_program(cache, kSource, std::string(kHeader) + "\n").build("compute_75").from_cache);
  ProgramOptions other = default_options();
  other.defines[0].second = "1";
  CHECK_FALSE(make_program(cache, kSource, kHeader, other).build("compute_75").from_cache);
  CHECK_FALSE(make_program(cache).build("compute_80").from_cache);
  Program more = make_program(cache);
  more.add_name_expression("scale<int>");
  CHECK_FALSE(more.build("compute_75").from_cache);
  CHECK(cache.stats().stores == 6);
  CHECK(cache.stats().hits == 1);
}

// The child of the cross-process and concurrency cases: builds kSource into $PROGRAM_TEST_DIR.
TEST_CASE("(child) build into a cache", "[.program-child-build]") {
  const CompileCache cache(std::getenv("PROGRAM_TEST_DIR"));
  const ProgramImage image = make_program(cache).build("compute_75");
  std::string text = image.from_cache ? "hit " : "compiled ";
  text += std::to_string(image.bytes.size()) + " " + image.lowered_names.at(0).second;
  const auto s = cache.stats();
  text +=
      " stores=" + std::to_string(s.stores) + " write_failures=" + std::to_string(s.write_failures);
  write_text(std::getenv("PROGRAM_TEST_OUT"), text);
}

TEST_CASE("The compile cache serves another process", "[program][cache]") {
  REQUIRE_NVRTC();
  TempDir dir;
  const std::vector<std::string> env{"PROGRAM_TEST_DIR=" + dir.path};
  const std::string first = run_child("[.program-child-build]", env, dir.path + "/out1");
  CHECK(first.rfind("compiled ", 0) == 0);
  const std::string second = run_child("[.program-child-build]", env, dir.path + "/out2");
  CHECK(second.rfind("hit ", 0) == 0);
  // The same image and names, from the other process's entry.
  CHECK(second.substr(4, second.find(" stores") - 4) == first.substr(9, first.find(" stores") - 9));
}

TEST_CASE("Processes compiling the same program at once leave one valid entry",
          "[program][cache]") {
  REQUIRE_NVRTC();
  TempDir dir;
  const std::vector<std::string> env{"PROGRAM_TEST_DIR=" + dir.path};
  constexpr int kChildren = 4;
  std::vector<Child> children;
  for (int i = 0; i < kChildren; ++i) {
    children.push_back(
        start_child("[.program-child-build]", env, dir.path + "/out" + std::to_string(i)));
  }
  std::vector<std::string> results;
  for (const Child& c : children) results.push_back(finish_child(c));
  const CompileCache cache(dir.path);
  const ProgramImage image = make_program(cache).build("compute_75");
  CHECK(image.from_cache);  // a whole, valid entry
  for (const std::string& r : results) {
    INFO(r);
    CHECK(r.find(std::to_string(image.bytes.size()) + " _Z5scaleIfEvPT_S0_i") != std::string::npos);
    CHECK(r.find("write_failures=0") != std::string::npos);
  }
  int entries = 0, temporaries = 0;
  for (const std::string& f : dir.files()) {
    entries += f.find(".entry") != std::string::npos;
    temporaries += f.find(".tmp.") != std::string::npos;
  }
  CHECK(entries == 1);
  CHECK(temporaries == 0);
}

TEST_CASE("A corrupt compile-cache entry is compiled again and rewritten", "[program][cache]") {
  REQUIRE_NVRTC();
  TempDir dir;
  const CompileCache cache(dir.path);
  const ProgramImage original = make_program(cache).build("compute_75");
  const std::string entry = the_entry(dir);
  REQUIRE(!entry.empty());
  const std::string good = read_text(entry);
  // One byte flipped: in the payload, in the header's key, in the magic.
  for (const std::size_t at : {good.size() - 10, std::size_t(20), std::size_t(0)}) {
    INFO("byte " << at);
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x40);
    write_text(entry, bad);
    const auto before = cache.stats();
    const ProgramImage image = make_program(cache).build("compute_75");
    CHECK_FALSE(image.from_cache);
    CHECK(image.bytes == original.bytes);
    CHECK(cache.stats().rejected == before.rejected + 1);
    CHECK(read_text(entry) == good);  // rewritten
    CHECK(make_program(cache).build("compute_75").from_cache);
  }
}

TEST_CASE("A truncated compile-cache entry is compiled again and rewritten", "[program][cache]") {
  REQUIRE_NVRTC();
  TempDir dir;
  const CompileCache cache(dir.path);
  make_program(cache).build("compute_75");
  const std::string entry = the_entry(dir);
  const std::string good = read_text(entry);
  for (const std::size_t keep :
       {good.size() - 1, good.size() / 2, std::size_t(40), std::size_t(0)}) {
    INFO("kept " << keep << " of " << good.size() << " bytes");
    write_text(entry, good.substr(0, keep));
    const auto before = cache.stats();
    CHECK_FALSE(make_program(cache).build("compute_75").from_cache);
    CHECK(cache.stats().rejected == before.rejected + 1);
    CHECK(read_text(entry) == good);
  }
}

// The child of the next case: two programs into a cache that cannot be written.
TEST_CASE("(child) build into an unwritable cache", "[.program-child-unwritable]") {
  const CompileCache cache(std::getenv("PROGRAM_TEST_DIR"));
  const ProgramImage a = make_program(cache).build("compute_75");
  const ProgramImage b = make_program(cache).build("compute_80");
  const auto s = cache.stats();
  write_text(std::getenv("PROGRAM_TEST_OUT"),
             std::to_string(!a.bytes.empty() && !b.bytes.empty()) + " stores=" +
                 std::to_string(s.stores) + " write_failures=" + std::to_string(s.write_failures));
}

TEST_CASE("An unwritable compile cache: the code is compiled and used, one warning per process",
          "[program][cache]") {
  REQUIRE_NVRTC();
  TempDir dir;
  // Read-only for a user; root writes there anyway, so also a path under a regular file.
  const std::string read_only = dir.path + "/ro";
  REQUIRE(mkdir(read_only.c_str(), 0555) == 0);
  write_text(dir.path + "/file", "not a directory");
  std::vector<std::string> cases{dir.path + "/file/cache"};
  if (geteuid() != 0) cases.push_back(read_only);
  for (const std::string& where : cases) {
    INFO(where);
    const std::string out = dir.path + "/out";
    const std::string text =
        run_child("[.program-child-unwritable]", {"PROGRAM_TEST_DIR=" + where}, out);
    CHECK(text == "1 stores=0 write_failures=2");
    const std::string err = read_text(out + ".err");
    std::size_t warnings = 0;
    for (std::size_t at = err.find("custream: the compile cache"); at != std::string::npos;
         at = err.find("custream: the compile cache", at + 1)) {
      ++warnings;
    }
    INFO(err);
    CHECK(warnings == 1);
    CHECK(custream_test::contains_text(err, where) == where);
  }
}

TEST_CASE("The compile cache evicts the least recently used entries at its cap",
          "[program][cache]") {
  TempDir dir;
  const std::string payload(1000, 'x');
  const CompileCache cache(dir.path, 2600);  // two entries of ~1.1 kB fit, three do not
  const std::string a = CompileCache::key_of({"a"}), b = CompileCache::key_of({"b"}),
                    c = CompileCache::key_of({"c"});
  REQUIRE(cache.store(a, payload));
  REQUIRE(cache.store(b, payload));
  // a older than b; then a hit on a makes b the least recently used.
  const timespec older[2] = {{1000, 0}, {1000, 0}}, newer[2] = {{2000, 0}, {2000, 0}};
  REQUIRE(utimensat(AT_FDCWD, cache.entry_path(a).c_str(), older, 0) == 0);
  REQUIRE(utimensat(AT_FDCWD, cache.entry_path(b).c_str(), newer, 0) == 0);
  REQUIRE(cache.find(a) == payload);
  REQUIRE(cache.store(c, payload));
  CHECK(cache.stats().evictions == 1);
  CHECK(cache.find(a) == payload);
  CHECK(cache.find(c) == payload);
  CHECK_FALSE(cache.find(b).has_value());
  CHECK(access(cache.entry_path(b).c_str(), F_OK) != 0);
}

TEST_CASE("A store removes temporary files that a process dying mid-write left behind",
          "[program][cache]") {
  TempDir dir;
  const CompileCache cache(dir.path);
  const std::string stale = dir.path + "/." + CompileCache::key_of({"s"}) + ".tmp.99.0";
  const std::string fresh = dir.path + "/." + CompileCache::key_of({"f"}) + ".tmp.98.0";
  write_text(stale, "half an entry");
  write_text(fresh, "an entry being written");
  const timespec two_hours_ago[2] = {{std::time(nullptr) - 7200, 0},
                                     {std::time(nullptr) - 7200, 0}};
  REQUIRE(utimensat(AT_FDCWD, stale.c_str(), two_hours_ago, 0) == 0);
  REQUIRE(cache.store(CompileCache::key_of({"x"}), "payload"));
  CHECK(access(stale.c_str(), F_OK) != 0);
  CHECK(access(fresh.c_str(), F_OK) == 0);  // another process may still rename it
  CHECK(cache.stats().evictions == 0);
}

TEST_CASE("CUSTREAM_CACHE_DIR chooses the compile cache; off turns it off", "[program][cache]") {
  const char* saved = std::getenv("CUSTREAM_CACHE_DIR");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("CUSTREAM_CACHE_DIR", "/tmp/somewhere/", 1);
  CHECK(CompileCache::from_environment().directory() == "/tmp/somewhere");
  setenv("CUSTREAM_CACHE_DIR", "off", 1);
  const CompileCache off = CompileCache::from_environment();
  CHECK_FALSE(off.enabled());
  CHECK_FALSE(off.store(CompileCache::key_of({"x"}), "payload"));
  CHECK_FALSE(off.find(CompileCache::key_of({"x"})).has_value());
  unsetenv("CUSTREAM_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string restore_xdg = xdg != nullptr ? xdg : "";
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  CHECK(CompileCache::from_environment().directory() == "/tmp/xdg/custream");
  if (xdg != nullptr)
    setenv("XDG_CACHE_HOME", restore_xdg.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
  if (saved != nullptr) setenv("CUSTREAM_CACHE_DIR", restore.c_str(), 1);
}

TEST_CASE("Linked programs: -dlto and the device runtime, through nvJitLink", "[program]") {
  REQUIRE_NVRTC();
  ProgramOptions lto;
  lto.link_time_optimization = true;
  const ProgramImage linked = Program(kSource, "scale.cu", lto)
                                  .add_header("ops.cuh", kHeader)
                                  .cache(CompileCache::off())
                                  .build("sm_90");
  CHECK_FALSE(linked.ptx);
  CHECK(linked.bytes.compare(0, 4,
                             "\x7f"
                             "ELF") == 0);
  CHECK(linked.bytes.find("fill") != std::string::npos);

  ProgramOptions devrt;
  devrt.device_runtime = true;
  const std::string conditional =
      "extern \"C\" __global__ void set_condition(cudaGraphConditionalHandle h, const int* v) {\n"
      "  cudaGraphSetConditional(h, *v != 0);\n}\n";
  Program with_runtime(conditional, "conditional.cu", devrt);
  with_runtime.cache(CompileCache::off());
  const ProgramImage image = with_runtime.build("sm_90");
  CHECK(image.bytes.compare(0, 4,
                            "\x7f"
                            "ELF") == 0);
  CHECK(image.bytes.find("set_condition") != std::string::npos);
  // PTX cannot be linked.
  expect_error([&] { with_runtime.build("compute_90"); }, CUDA_ERROR_INVALID_VALUE,
               "needs a cubin target");
}

// ---- loading (the emulator, or a GPU) ----

namespace {
void cpu_scale(const custream_emu_kernel_launch* launch) {
  float* data;
  float factor;
  int n;
  std::memcpy(&data, launch->params[0], sizeof data);
  std::memcpy(&factor, launch->params[1], sizeof factor);
  std::memcpy(&n, launch->params[2], sizeof n);
  for (int i = 0; i < n; ++i) data[i] = data[i] * factor;
}
}  // namespace

TEST_CASE("compile() loads the program for the devices present; its kernels run", "[program]") {
  REQUIRE_NVRTC();
  REQUIRE_DRIVER();
  TempDir dir;
  for (const CodeTarget target : {CodeTarget::automatic, CodeTarget::cubin}) {
    INFO("target " << static_cast<int>(target));
    Program p = make_program(CompileCache(dir.path));
    p.target(target);
    const custream::Library& lib = p.compile();
    REQUIRE(p.images().size() == 1);  // the devices present share one architecture
    const ProgramImage& image = p.images().front();
    const custream::ComputeCapability cc = custream::Device(0).compute_capability();
    const std::string arch = std::to_string(cc.major * 10 + cc.minor);
    if (target == CodeTarget::cubin) {
      CHECK(image.arch == "sm_" + arch);
      CHECK_FALSE(image.ptx);
    } else if (image.ptx) {  // a driver as new as NVRTC: PTX for the device
      CHECK(image.arch == "compute_" + arch);
    }
    CHECK(p.lowered_name("scale<float>") == "_Z5scaleIfEvPT_S0_i");
    CHECK(&p.library() == &lib);
    if (target == CodeTarget::cubin && custream_test::emulated()) {
      CHECK(image.bytes.compare(0, 4,
                                "\x7f"
                                "ELF") == 0);
      CHECK(lib.kernel_names().empty());  // the emulator reads no cubin: PTX is what it runs
      continue;
    }
    const custream::LibraryKernel k = p.kernel("scale<float>");
    CHECK(k.name() == "_Z5scaleIfEvPT_S0_i");
    if (auto reg = custream_test::emu_symbol<decltype(&custream_emu_register_kernel)>(
            "custream_emu_register_kernel")) {
      REQUIRE(reg("_Z5scaleIfEvPT_S0_i", cpu_scale, nullptr, nullptr, 0) == 0);
    }
    constexpr int n = 1000;
    std::vector<float> host(n);
    for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
    custream::Stream stream(custream::Device(0));
    custream::DeviceBuffer buffer(n * sizeof(float), custream::Device(0));
    stream.copy(buffer.get(), host.data(), n * sizeof(float));
    k.launch(stream, custream::Dim3((n + 127) / 128), custream::Dim3(128), 0, buffer.get(), 3.0f,
             n);
    stream.copy(host.data(), buffer.get(), n * sizeof(float));
    stream.synchronize();
    CHECK(host[0] == 0.0f);
    CHECK(host[999] == 2997.0f);
    // Compiled again: the disk cache answers, and the same bytes load the same Library.
    Program again = make_program(CompileCache(dir.path));
    again.target(target);
    CHECK(again.compile() == lib);
    CHECK(again.images().front().from_cache);
  }
}

TEST_CASE("CompileCache::library: a tool's own image by its key, produced once",
          "[program][cache]") {
  REQUIRE_NVRTC();
  REQUIRE_DRIVER();
  TempDir dir;
  const std::string ptx = make_program(CompileCache::off()).build("compute_75").bytes;
  int produced = 0;
  auto produce = [&] {
    ++produced;
    return ptx;
  };
  const custream::Library first = CompileCache(dir.path).library("my-tool 1.0 scale", produce);
  CHECK(produced == 1);
  custream::Library::clear_cache();
  const CompileCache fresh(dir.path);
  const custream::Library second = fresh.library("my-tool 1.0 scale", produce);
  CHECK(produced == 1);
  CHECK(fresh.stats().hits == 1);
  CHECK(second.kernel("fill").name() == "fill");
  fresh.library("my-tool 1.1 scale", produce);  // another key
  CHECK(produced == 2);
}

TEST_CASE("SHA-256 of the compile cache's keys matches FIPS 180-4's vectors", "[program][cache]") {
  using custream::detail::Sha256;
  CHECK(Sha256::hex(Sha256::of("")) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256::hex(Sha256::of("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Sha256::hex(Sha256::of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 pieces;  // a million 'a', fed in uneven pieces
  const std::string chunk(997, 'a');
  std::size_t left = 1000000;
  while (left > 0) {
    const std::size_t n = std::min(left, chunk.size());
    pieces.update(chunk.data(), n);
    left -= n;
  }
  CHECK(Sha256::hex(pieces.finish()) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// The child of the next case: the driver (the emulator) loaded before NVRTC's first compile.
TEST_CASE("(child) NVRTC after the emulator", "[.program-child-emulator-first]") {
  std::string text = std::to_string(custream::Device::count()) + " device(s)|";
  try {
    Program p("extern \"C\" __global__ void k(int* x) { *x = 1; }", "after.cu");
    p.cache(custream::CompileCache::off());  // NVRTC itself, never a cached image
    text += p.build("compute_75").bytes.find(".entry k") != std::string::npos ? "compiled"
                                                                               : "no kernel";
  } catch (const custream::Error& e) {
    text += e.name() + "|" + e.what();
  }
  write_text(std::getenv("PROGRAM_TEST_OUT"), text);
}

TEST_CASE("NVRTC compiles after custream loaded its CPU emulator", "[program]") {
  REQUIRE_NVRTC();
  REQUIRE_DRIVER();
  // NVRTC opens libcuda.so.1 at its first compile and calls cuGetExportTable unchecked; in a
  // process that loaded the emulator, that name is the emulator.
  if (!custream_test::emulated()) CUSTREAM_SKIP("the emulator is what NVRTC would find");
  TempDir dir;
  const std::string text = run_child("[.program-child-emulator-first]", {}, dir.path + "/out");
  CHECK(text == std::to_string(custream::Device::count()) + " device(s)|compiled");
}

TEST_CASE("PTX the driver's JIT refuses as too new is replaced by a cubin for each architecture",
          "[program]") {
  REQUIRE_NVRTC();
  REQUIRE_DRIVER();
  auto fail =
      custream_test::emu_symbol<decltype(&custream_emu_fail_call)>("custream_emu_fail_call");
  if (fail == nullptr) CUSTREAM_SKIP("the refusal is injected on the emulator");
  TempDir dir;
  ProgramOptions options = default_options();
  options.define("UNIQUE", "refused");  // bytes no earlier case loaded (Library's cache)
  // An NVRTC newer than the driver: the load answers CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
  fail("cuLibraryLoadData", 1, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  Program p = make_program(CompileCache(dir.path), kSource, kHeader, options);
  p.compile();
  REQUIRE(p.images().size() == 1);
  const custream::ComputeCapability cc = custream::Device(0).compute_capability();
  CHECK(p.images().front().arch == "sm_" + std::to_string(cc.major * 10 + cc.minor));
  CHECK_FALSE(p.images().front().ptx);
  CHECK(p.library(custream::Device(0)).handle() != nullptr);
  CHECK(p.lowered_name("scale<double>") == "_Z5scaleIdEvPT_S0_i");

  // Asked for PTX only, the refusal is the caller's to see.
  options.define("AGAIN", "1");
  Program ptx_only = make_program(CompileCache(dir.path), kSource, kHeader, options);
  ptx_only.target(CodeTarget::ptx);
  fail("cuLibraryLoadData", 1, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  expect_error([&] { ptx_only.compile(); }, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
}

TEST_CASE("Threads compiling through one compile cache at once", "[program][cache]") {
  REQUIRE_NVRTC();
  TempDir dir;
  const CompileCache cache(dir.path);
  constexpr int kThreads = 4;
  std::vector<ProgramImage> images(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ProgramOptions options = default_options();
      options.define("THREAD", std::to_string(i % 2));  // two programs, each built twice
      images[i] = make_program(cache, kSource, kHeader, options).build("compute_75");
    });
  }
  for (std::thread& t : threads) t.join();
  const auto s = cache.stats();
  CHECK(s.stores + s.hits == kThreads);
  CHECK(s.write_failures == 0);
  CHECK(images[0].bytes == images[2].bytes);
  CHECK(images[1].bytes == images[3].bytes);
  int entries = 0;
  for (const std::string& f : dir.files()) entries += f.find(".entry") != std::string::npos;
  CHECK(entries == 2);
}
