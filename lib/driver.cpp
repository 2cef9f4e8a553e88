// Run-time loading of the CUDA driver. Design: docs/design/loading.md (invariants 1-3).
#include "driver.hpp"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "custream/driver.hpp"
#include "custream/error.hpp"

namespace custream::detail {

/// "12.5" for 12050.
std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::atomic<const Loaded*> g_loaded{nullptr};

namespace {

constexpr DriverEntry kEntries[] = {
#define CUSTREAM_DRIVER_ROW(field, symbol, version, required) {#field, #symbol, version, required},
    CUSTREAM_DRIVER_ENTRIES(CUSTREAM_DRIVER_ROW)
#undef CUSTREAM_DRIVER_ROW
};

struct LoaderState {
  std::mutex mutex;
  bool attempted = false;
  std::optional<Error> failure;
  PFN_cuGetProcAddress_v12000 user_get_proc_address = nullptr;
};

// Leaked on purpose: no static destructor may run after the driver is gone (invariant 3).
LoaderState& loader_state() {
  static LoaderState* state = new LoaderState;
  return *state;
}

Error load_failure(CUresult result, std::string detail) {
  return Error(result, {}, {}, std::move(detail));
}

std::string library_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

const char* status_text(CUdriverProcAddressQueryResult status) {
  switch (status) {
    case CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND:
      return "symbol not found";
    case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT:
      return "the driver is older than this ABI";
    default:
      return "lookup failed";
  }
}

// Resolves every table entry into `api`. Returns the failure for a missing required entry.
std::optional<Error> resolve_entries(PFN_cuGetProcAddress_v12000 gpa, const std::string& library,
                                     DriverApi& api) {
  std::size_t index = 0;
  std::optional<Error> failure;
  auto resolve = [&](auto& field) {
    const DriverEntry& entry = kEntries[index++];
    if (failure) return;
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = gpa(entry.symbol, &fn, entry.version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
    if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && fn != nullptr) {
      field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(fn);
    } else if (entry.required) {
      failure = load_failure(r == CUDA_SUCCESS ? CUDA_ERROR_NOT_FOUND : r,
                             "the CUDA driver " + library + " lacks " + entry.symbol + " (ABI " +
                                 std::to_string(entry.version) + ", " + status_text(status) +
                                 "); custream needs a driver >= " + version_text(entry.version));
    }
  };
#define CUSTREAM_DRIVER_RESOLVE(field, symbol, version, required) resolve(api.field);
  CUSTREAM_DRIVER_ENTRIES(CUSTREAM_DRIVER_RESOLVE)
#undef CUSTREAM_DRIVER_RESOLVE
  return failure;
}

// What to do when libcuda.so.1 cannot be loaded: where CUSTREAM_LIBCUDA was set, that it was
// used; otherwise how to run on custream's CPU driver emulator, naming the installed one when it
// is beside this library (<libdir>/custream/libcuda.so.1).
std::string no_driver_hint(bool from_env) {
  if (from_env) return " (the library CUSTREAM_LIBCUDA names)";
  std::string emulator;
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&no_driver_hint), &self) != 0 && self.dli_fname != nullptr) {
    std::string dir = self.dli_fname;
    dir.erase(dir.find_last_of('/') + 1);
    const std::string candidate = dir + "custream/libcuda.so.1";
    if (!dir.empty() && ::access(candidate.c_str(), R_OK) == 0) emulator = candidate;
  }
  return emulator.empty()
             ? "; without a GPU, set CUSTREAM_LIBCUDA to custream's CPU driver emulator "
               "(installed as <libdir>/custream/libcuda.so.1; docs/emulator.md)"
             : "; without a GPU, run on custream's CPU driver emulator: CUSTREAM_LIBCUDA=" +
                   emulator;
}

// Builds the Loaded state, or returns why it cannot. Runs under the loader mutex.
const Loaded* try_load(LoaderState& state) {
  auto loaded = std::make_unique<Loaded>();
  PFN_cuGetProcAddress_v12000 gpa = state.user_get_proc_address;
  if (gpa != nullptr) {
    loaded->library = "(application-supplied cuGetProcAddress)";
  } else {
    const char* env = secure_getenv("CUSTREAM_LIBCUDA");  // ignored in setuid programs
    std::string path = env != nullptr && env[0] != '\0' ? env : "libcuda.so.1";
    dlerror();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      state.failure = load_failure(CUDA_ERROR_NOT_INITIALIZED,
                                   "no CUDA driver found (" + (why ? std::string(why) : path) +
                                       ")" + no_driver_hint(env != nullptr && env[0] != '\0'));
      return nullptr;
    }
    // Never dlclose'd (invariant 3).
    loaded->library = library_path(handle, path);
    gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
    if (gpa == nullptr) {
      state.failure = load_failure(
          CUDA_ERROR_NOT_FOUND, "the CUDA driver " + loaded->library +
                                    " has no cuGetProcAddress_v2; custream needs a driver >= 12.0");
      return nullptr;
    }
  }
  loaded->get_proc_address = gpa;
  if ((state.failure = resolve_entries(gpa, loaded->library, loaded->api))) return nullptr;

  const DriverApi& api = loaded->api;
  // The loader's calls are raw: g_loaded is not published yet, so the call layer has no
  // table to call through.
  if (CUresult r = api.cuInit(0); r != CUDA_SUCCESS) {  // raw: loading
    state.failure = Error(r, EntryInfo<&DriverApi::cuInit>::name, {},
                          "the CUDA driver " + loaded->library + " did not start");
    return nullptr;
  }
  if (CUresult r = api.cuDriverGetVersion(&loaded->version); r != CUDA_SUCCESS) {  // raw: loading
    state.failure = Error(r, EntryInfo<&DriverApi::cuDriverGetVersion>::name, {});
    return nullptr;
  }
  if (CUresult r = api.cuDeviceGetCount(&loaded->device_count);  // raw: loading
      r != CUDA_SUCCESS) {
    state.failure = Error(r, EntryInfo<&DriverApi::cuDeviceGetCount>::name, {});
    return nullptr;
  }
  if (loaded->device_count < 0) {
    state.failure = Error(CUDA_ERROR_UNKNOWN, EntryInfo<&DriverApi::cuDeviceGetCount>::name, {},
                          "the CUDA driver " + loaded->library + " reported " +
                              std::to_string(loaded->device_count) + " devices");
    return nullptr;
  }
  loaded->devices = std::make_unique<DeviceSlot[]>(loaded->device_count);
  for (int i = 0; i < loaded->device_count; ++i) {
    if (CUresult r = api.cuDeviceGet(&loaded->devices[i].device, i);  // raw: loading
        r != CUDA_SUCCESS) {
      state.failure =
          Error(r, EntryInfo<&DriverApi::cuDeviceGet>::name, "device " + std::to_string(i));
      return nullptr;
    }
  }
  return loaded.release();  // Lives for the rest of the process (invariant 2).
}

}  // namespace

const Loaded& load() {
  LoaderState& state = loader_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (const Loaded* l = g_loaded.load(std::memory_order_acquire)) return *l;
  if (!state.attempted) {
    state.attempted = true;
    try {
      if (const Loaded* l = try_load(state)) {
        g_loaded.store(l, std::memory_order_release);
        return *l;
      }
    } catch (const Error& e) {
      state.failure = e;
    } catch (const std::exception& e) {  // e.g. std::bad_alloc: recorded like any failure
      state.failure = load_failure(CUDA_ERROR_UNKNOWN,
                                   std::string("loading the CUDA driver failed: ") + e.what());
    } catch (...) {
      state.failure = load_failure(CUDA_ERROR_UNKNOWN, "loading the CUDA driver failed");
    }
    // Recording the reason can itself run out of memory and throw from a handler above;
    // the attempt still counts, and the next call records the reason below.
  }
  if (!state.failure) {  // invariant 1: every failed attempt leaves a reason
    state.failure = load_failure(CUDA_ERROR_OUT_OF_MEMORY,
                                 "loading the CUDA driver failed: out of memory (the first "
                                 "attempt could not record its reason; it is not retried)");
  }
  throw *state.failure;
}

const DriverEntry* driver_entries(std::size_t* count) noexcept {
  *count = std::size(kEntries);
  return kEntries;
}

void throw_missing_entry(const char* field) {
  for (const DriverEntry& entry : kEntries) {
    if (std::string_view(entry.field) == field) {
      throw_error(CUDA_ERROR_NOT_SUPPORTED, entry.symbol, {},
                  "this feature needs a CUDA driver >= " + version_text(entry.version) + " (ABI " +
                      std::to_string(entry.version) + "); the loaded driver is " +
                      version_text(loaded().version));
    }
  }
  throw_error(CUDA_ERROR_NOT_SUPPORTED, field, {}, "the loaded CUDA driver lacks it");
}

}  // namespace custream::detail

namespace custream {

const DriverInfo& driver_info() {
  // Loaded (and never freed) together with the entry points.
  static const DriverInfo* info = [] {
    const detail::Loaded& l = detail::loaded();
    return new DriverInfo{l.library, l.version};
  }();
  return *info;
}

bool driver_available() noexcept {
  try {
    detail::loaded();
    return true;
  } catch (...) {
    return false;
  }
}

void use_driver_entry_point(PFN_cuGetProcAddress_v12000 get_proc_address) {
  if (get_proc_address == nullptr) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::use_driver_entry_point", {},
                        "the cuGetProcAddress pointer is null");
  }
  detail::LoaderState& state = detail::loader_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.attempted) {
    const bool loaded = detail::g_loaded.load(std::memory_order_acquire) != nullptr;
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::use_driver_entry_point", {},
                        loaded ? std::string("the driver was already loaded; call this before any "
                                             "other custream function")
                               : "the driver load was already attempted and failed (" +
                                     (state.failure ? std::string(state.failure->what())
                                                    : std::string("out of memory")) +
                                     "); call this before any other custream function");
  }
  if (state.user_get_proc_address == get_proc_address) return;  // the same one again
  if (state.user_get_proc_address != nullptr) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::use_driver_entry_point", {},
                        "another cuGetProcAddress was already handed over; custream uses one");
  }
  state.user_get_proc_address = get_proc_address;
}

}  // namespace custream
