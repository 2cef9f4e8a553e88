// Emulator state singleton, fault injection and the test-control exports (emu_control.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../lib/result_names.hpp"
#include "emu.hpp"
#include "emu_control.h"

#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

namespace emu {
namespace {

struct Faults {
  std::mutex mu;
  std::atomic<bool> any{false};
  CUresult sticky = CUDA_SUCCESS;
  std::atomic<CUresult> sticky_now{CUDA_SUCCESS};  // sticky, read without mu by the workers
  // name -> list of (calls left before failing, result)
  std::map<std::string, std::vector<std::pair<int, CUresult>>> pending;
  // Calls per entry point while counting (custream_emu_count_calls).
  bool counting = false;
  std::map<std::string, long> counts;
};

// A result of CUSTREAM_EMU_FAIL: a positive number or a CUresult's name (CUDA_ERROR_…); 0 when
// it is neither.
int parse_result(const std::string& text) {
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (!text.empty() && *end == '\0') return n > 0 && n < 100000 ? static_cast<int>(n) : 0;
  for (int r = 1; r < 100000; ++r) {
    const char* name = custream::detail::result_name(static_cast<CUresult>(r));
    if (name != nullptr && text == name) return r;
  }
  return 0;
}

// A CUSTREAM_EMU_FAIL that cannot be honoured ends the process with a message: a test that
// meant to fail a call would otherwise pass without it (a misspelled entry point, a result
// that is not one).
[[noreturn]] void refuse_fail_spec(const char* spec, const std::string& item, const char* why) {
  std::fprintf(stderr,
               "custream emulator: CUSTREAM_EMU_FAIL=\"%s\": \"%s\" %s (each item is "
               "entry:nth:result, e.g. cuMemAlloc:1:CUDA_ERROR_OUT_OF_MEMORY or cuMemAlloc:1:2)\n",
               spec, item.c_str(), why);
  std::_Exit(2);
}

// CUSTREAM_EMU_FAIL="name:nth:result[,name:nth:result…]": faults pending from the start, for
// calls made while the driver loads (cuInit, cuDeviceGetCount, cuDeviceGet), before a test can
// call custream_emu_fail_call. `name` is an entry point the emulator serves, `nth` a positive
// count, `result` a positive number or a CUresult's name; anything else ends the process with a
// message (refuse_fail_spec).
void add_faults_from_environment(Faults& f) {
  const char* spec = std::getenv("CUSTREAM_EMU_FAIL");
  if (spec == nullptr || spec[0] == '\0') return;
  std::string rest = spec;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? std::string() : rest.substr(comma + 1);
    const size_t a = item.find(':');
    const size_t b = a == std::string::npos ? a : item.find(':', a + 1);
    if (b == std::string::npos) refuse_fail_spec(spec, item, "is not entry:nth:result");
    const std::string name = item.substr(0, a);
    if (!known_entry(name.c_str())) {
      refuse_fail_spec(spec, item, "names no entry point the emulator serves");
    }
    const std::string count = item.substr(a + 1, b - a - 1);
    char* end = nullptr;
    const long nth = std::strtol(count.c_str(), &end, 10);
    if (count.empty() || *end != '\0' || nth < 1 || nth > 1000000000) {
      refuse_fail_spec(spec, item, "has no positive call count");
    }
    const int result = parse_result(item.substr(b + 1));
    if (result == 0) refuse_fail_spec(spec, item, "has no error result (a number or CUDA_ERROR_…)");
    f.pending[name].emplace_back(static_cast<int>(nth), static_cast<CUresult>(result));
  }
  f.any.store(!f.pending.empty());
}

Faults& faults() {
  static Faults* f = [] {
    auto* made = new Faults;  // leaked (invariant 5)
    add_faults_from_environment(*made);
    return made;
  }();
  return *f;
}

std::atomic<long> g_destructors_run{0};
// User-object destructors scheduled and not yet returned (custream_emu_wait_destructors).
// Incremented without State::mu (run_detached may be called with it held), decremented under
// it, so a waiter on State::cv never misses the last one.
std::atomic<long> g_detached_running{0};

// Entry points the sticky error leaves working (emu_control.h): what a program needs to
// describe the error, as on a real driver after an illegal address.
bool sticky_exempt(const char* name) {
  return std::strcmp(name, "cuGetErrorName") == 0 || std::strcmp(name, "cuGetErrorString") == 0 ||
         std::strcmp(name, "cuDriverGetVersion") == 0 || std::strcmp(name, "cuGetProcAddress") == 0;
}

}  // namespace

State& state() {
  static State* s = [] {
    auto* st = new State;  // leaked (invariant 5)
    if (const char* n = std::getenv("CUSTREAM_EMU_DEVICES")) {
      int v = std::atoi(n);
      if (v >= 0 && v <= 64) st->device_count = v;
    }
    for (int d = 0; d < st->device_count; ++d) {
      auto* c = new Context;  // primary contexts live as long as the process (invariant 5)
      c->device = d;
      c->id = st->next_id++;
      c->legacy = new Stream;
      c->legacy->kind = Stream::kLegacy;
      c->legacy->ctx = c;
      c->legacy->id = st->next_id++;
      st->primary.push_back(c);
    }
    return st;
  }();
  return *s;
}

bool valid(const std::unordered_set<const void*>& set, const void* p) {
  return p && set.count(p) != 0;
}

CUresult check_fault(const char* name) noexcept {
  Faults& f = faults();
  if (!f.any.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lk(f.mu);
  if (f.counting) ++f.counts[name];
  if (f.sticky != CUDA_SUCCESS && !sticky_exempt(name)) return f.sticky;
  auto it = f.pending.find(name);
  if (it == f.pending.end()) return CUDA_SUCCESS;
  CUresult hit = CUDA_SUCCESS;
  for (auto& p : it->second) {
    if (--p.first == 0) hit = p.second;
  }
  auto& v = it->second;
  for (size_t i = 0; i < v.size();) {
    if (v[i].first <= 0) {
      v.erase(v.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
  if (v.empty()) f.pending.erase(it);
  if (f.pending.empty() && f.sticky == CUDA_SUCCESS && !f.counting) f.any.store(false);
  return hit;
}

CUresult sticky_error() noexcept { return faults().sticky_now.load(std::memory_order_acquire); }

void note_destructor_run() { g_destructors_run.fetch_add(1); }

namespace {
thread_local bool t_in_callback = false;
}  // namespace

bool in_driver_callback() { return t_in_callback; }
CallbackScope::CallbackScope() noexcept : outer_(t_in_callback) { t_in_callback = true; }
CallbackScope::~CallbackScope() { t_in_callback = outer_; }

void run_detached(std::function<void()> fn) {
  g_detached_running.fetch_add(1);
  std::thread([fn = std::move(fn)] {
    fn();
    State& s = state();
    std::lock_guard<std::mutex> lk(s.mu);
    g_detached_running.fetch_sub(1);
    s.cv.notify_all();
  }).detach();
}

}  // namespace emu

EMU_EXPORT void custream_emu_fail_call(const char* name, int nth, CUresult result) {
  if (!name || nth < 1 || result == CUDA_SUCCESS) return;
  emu::Faults& f = emu::faults();
  std::lock_guard<std::mutex> lk(f.mu);
  f.pending[name].emplace_back(nth, result);
  f.any.store(true);
}

EMU_EXPORT void custream_emu_set_sticky_error(CUresult result) {
  emu::Faults& f = emu::faults();
  std::lock_guard<std::mutex> lk(f.mu);
  f.sticky = result;
  f.sticky_now.store(result, std::memory_order_release);
  f.any.store(result != CUDA_SUCCESS || !f.pending.empty() || f.counting);
}

EMU_EXPORT void custream_emu_reset(void) {
  emu::Faults& f = emu::faults();
  std::lock_guard<std::mutex> lk(f.mu);
  f.sticky = CUDA_SUCCESS;
  f.sticky_now.store(CUDA_SUCCESS, std::memory_order_release);
  f.pending.clear();
  f.any.store(f.counting);
}

EMU_EXPORT void custream_emu_count_calls(int on) {
  emu::Faults& f = emu::faults();
  std::lock_guard<std::mutex> lk(f.mu);
  f.counting = on != 0;
  f.counts.clear();
  f.any.store(f.counting || f.sticky != CUDA_SUCCESS || !f.pending.empty());
}

EMU_EXPORT long custream_emu_call_count(const char* name) {
  emu::Faults& f = emu::faults();
  std::lock_guard<std::mutex> lk(f.mu);
  auto it = f.counts.find(name ? name : "");
  return it == f.counts.end() ? 0 : it->second;
}

EMU_EXPORT long custream_emu_live_objects(void) { return emu::state().live.load(); }

EMU_EXPORT long custream_emu_user_object_destructors_run(void) {
  return emu::g_destructors_run.load();
}

EMU_EXPORT int custream_emu_wait_idle(int timeout_ms) {
  emu::State& s = emu::state();
  std::unique_lock<std::mutex> lk(s.mu);
  auto idle = [&] { return s.callbacks.empty() && !s.callback_busy && s.workers_running == 0; };
  return s.cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), idle) ? 1 : 0;
}

EMU_EXPORT int custream_emu_wait_destructors(int timeout_ms) {
  emu::State& s = emu::state();
  std::unique_lock<std::mutex> lk(s.mu);
  auto done = [] { return emu::g_detached_running.load() == 0; };
  return s.cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), done) ? 1 : 0;
}
