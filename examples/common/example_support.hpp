// Helpers shared by the examples: finding a CUDA library with dlopen, and the PASS / SKIP /
// FAIL convention (exit 0 / 77 / 1; 77 is what `meson test` reports as SKIP).
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

namespace example {

constexpr int exit_pass = 0;
constexpr int exit_fail = 1;
constexpr int exit_skip = 77;

/// Prints "SKIP: <why>" and returns the skip exit code.
inline int skip(const std::string& why) {
  std::printf("SKIP: %s\n", why.c_str());
  return exit_skip;
}
/// Prints "FAIL: <why>" and returns the failure exit code.
inline int fail(const std::string& why) {
  std::printf("FAIL: %s\n", why.c_str());
  return exit_fail;
}

/// A library opened with dlopen: the first of `$<env_var>`, then `names` that opens.
/// `tried` lists every attempt and its dlerror() for the SKIP message.
struct Library {
  void* handle = nullptr;
  std::string path;
  std::string tried;

  Library(const char* env_var, std::initializer_list<const char*> names) {
    auto attempt = [this](const char* name) {
      if (handle != nullptr) return;
      handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        path = name;
      } else {
        const char* why = dlerror();
        tried += std::string(tried.empty() ? "" : "; ") + (why != nullptr ? why : name);
      }
    };
    if (const char* from_env = std::getenv(env_var); from_env != nullptr && *from_env != '\0') {
      attempt(from_env);
    }
    for (const char* name : names) attempt(name);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  // Never dlclose()d: the CUDA libraries keep threads and atexit handlers.

  explicit operator bool() const { return handle != nullptr; }

  /// The symbol `name` as a `Fn` (a function pointer type), or null.
  template <typename Fn>
  Fn get(const char* name) const {
    return reinterpret_cast<Fn>(dlsym(handle, name));
  }
};

}  // namespace example
