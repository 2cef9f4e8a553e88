// custream::CompileCache: compiled code on disk, shared by processes. Entries are written
// atomically, checked on every read, and evicted least recently used first.
// Design: docs/design/jit.md (invariants 6-10).
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <vector>

#include "custream/compile_cache.hpp"
#include "payload.hpp"
#include "sha256.hpp"

namespace custream {

struct CompileCache::State {
  std::string directory;
  std::uint64_t max_bytes = default_max_bytes;
  std::atomic<std::uint64_t> hits{0}, misses{0}, rejected{0}, stores{0}, evictions{0},
      write_failures{0};
};

namespace {

constexpr char kMagic[8] = {'c', 'u', 's', 't', 'j', 'i', 't', '\n'};
constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 32 + 8 + 32;
constexpr const char* kSuffix = ".entry";

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>(v >> (8 * i));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(v >> (8 * i));
}
std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string digest_bytes(const detail::Sha256::Digest& d) {
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// One line on stderr per process for a cache that cannot be written (invariant 9).
void warn_once(const std::string& directory, const char* step, int error) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "custream: the compile cache %s cannot be written (%s: %s); compiled code is "
                 "used without it (set CUSTREAM_CACHE_DIR to a writable directory, or to off; "
                 "said once per process)\n",
                 directory.c_str(), step, std::strerror(error));
  });
}

bool make_directories(const std::string& path) {
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<std::size_t>(w);
  }
  return true;
}

struct Entry {
  std::string path;
  std::uint64_t bytes;
  timespec mtime;
};

// A temporary file older than this was left by a process that died before its rename.
constexpr std::time_t kStaleTemporarySeconds = 3600;

void remove_if_stale(const std::string& path, std::time_t stale) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && st.st_mtime < stale) ::unlink(path.c_str());
}

bool older(const Entry& a, const Entry& b) {
  if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
  if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec < b.mtime.tv_nsec;
  return a.path < b.path;
}

// Removes the least recently used entries until the directory fits `max_bytes`; `keep` (the
// entry just written) stays (invariant 8). Removes stale temporary files on the way
// (invariant 6). Returns how many entries were removed.
std::uint64_t evict(const std::string& directory, std::uint64_t max_bytes,
                    const std::string& keep) {
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return 0;
  std::vector<Entry> entries;
  std::uint64_t total = 0;
  const std::size_t suffix = std::strlen(kSuffix);
  const std::time_t stale = std::time(nullptr) - kStaleTemporarySeconds;
  while (const dirent* d = ::readdir(dir)) {
    const std::string name = d->d_name;
    if (name[0] == '.' && name.find(".tmp.") != std::string::npos) {
      remove_if_stale(directory + "/" + name, stale);  // left by a process that died writing
      continue;
    }
    if (name.size() != 64 + suffix || name.compare(64, suffix, kSuffix) != 0) continue;
    const std::string path = directory + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    entries.push_back({path, static_cast<std::uint64_t>(st.st_size), st.st_mtim});
    total += static_cast<std::uint64_t>(st.st_size);
  }
  ::closedir(dir);
  if (total <= max_bytes) return 0;
  std::sort(entries.begin(), entries.end(), older);
  std::uint64_t removed = 0;
  for (const Entry& e : entries) {
    if (total <= max_bytes) break;
    if (e.path == keep) continue;
    if (::unlink(e.path.c_str()) == 0) {
      ++removed;
    } else if (errno != ENOENT) {  // ENOENT: another process removed it first
      continue;
    }
    total -= e.bytes;
  }
  return removed;
}

}  // namespace

CompileCache::CompileCache(std::string directory, std::uint64_t max_bytes)
    : state_(std::make_shared<State>()) {
  while (directory.size() > 1 && directory.back() == '/') directory.pop_back();
  state_->directory = std::move(directory);
  state_->max_bytes = max_bytes;
}

CompileCache CompileCache::off() {
  CompileCache cache;
  cache.state_ = std::make_shared<State>();
  return cache;
}

CompileCache CompileCache::from_environment() {
  std::uint64_t cap = default_max_bytes;
  if (const char* v = secure_getenv("CUSTREAM_CACHE_MAX_BYTES"); v != nullptr && v[0] != '\0') {
    char* end = nullptr;
    const unsigned long long parsed = std::strtoull(v, &end, 10);
    if (end != nullptr && *end == '\0') cap = parsed;
  }
  const char* dir = secure_getenv("CUSTREAM_CACHE_DIR");
  if (dir != nullptr && dir[0] != '\0') {
    if (std::strcmp(dir, "off") == 0 || std::strcmp(dir, "0") == 0) return off();
    return CompileCache(dir, cap);
  }
  if (const char* xdg = secure_getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return CompileCache(std::string(xdg) + "/custream", cap);
  }
  if (const char* home = secure_getenv("HOME"); home != nullptr && home[0] != '\0') {
    return CompileCache(std::string(home) + "/.cache/custream", cap);
  }
  return off();
}

const CompileCache& CompileCache::process_default() {
  static const CompileCache* cache = new CompileCache(from_environment());  // never destroyed
  return *cache;
}

bool CompileCache::enabled() const noexcept { return !state_->directory.empty(); }
const std::string& CompileCache::directory() const noexcept { return state_->directory; }
std::uint64_t CompileCache::max_bytes() const noexcept { return state_->max_bytes; }

std::string CompileCache::entry_path(const std::string& key) const {
  return state_->directory + "/" + key + kSuffix;
}

std::string CompileCache::key_of(std::initializer_list<std::string_view> parts) {
  detail::Sha256 h;
  h.field("custream compile cache");
  h.field(std::to_string(format_version));
  for (std::string_view part : parts) h.field(part);
  return detail::Sha256::hex(h.finish());
}

std::optional<std::string> CompileCache::find(const std::string& key) const {
  if (!enabled()) return std::nullopt;
  const std::string path = entry_path(key);
  std::string data;
  if (!detail::read_whole_file(path, &data)) {
    state_->misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  // Invariant 7: every field checked before the payload is used.
  const bool valid = [&] {
    if (data.size() < kHeaderBytes || std::memcmp(data.data(), kMagic, 8) != 0) return false;
    if (get_le(data.data() + 8, 4) != format_version || get_le(data.data() + 12, 4) != kHeaderBytes)
      return false;
    if (detail::Sha256::hex(*reinterpret_cast<const detail::Sha256::Digest*>(data.data() + 16)) !=
        key)
      return false;
    const std::uint64_t length = get_le(data.data() + 48, 8);
    if (length != data.size() - kHeaderBytes) return false;
    const std::string_view payload(data.data() + kHeaderBytes, length);
    return digest_bytes(detail::Sha256::of(payload)) == std::string_view(data.data() + 56, 32);
  }();
  if (!valid) {
    state_->rejected.fetch_add(1, std::memory_order_relaxed);
    state_->misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // a hit: most recently used (invariant 8)
  state_->hits.fetch_add(1, std::memory_order_relaxed);
  return data.substr(kHeaderBytes);
}

bool CompileCache::store(const std::string& key, std::string_view payload) const {
  if (!enabled()) return false;
  const std::string& dir = state_->directory;
  auto fail = [&](const char* step, int error) {
    state_->write_failures.fetch_add(1, std::memory_order_relaxed);
    warn_once(dir, step, error);
    return false;
  };
  if (key.size() != 64 || key.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return fail("the key is not a SHA-256 in lower-case hexadecimal", EINVAL);
  }
  if (!make_directories(dir)) return fail("mkdir", errno);
  std::string header(kMagic, 8);
  put_u32(header, format_version);
  put_u32(header, kHeaderBytes);
  for (std::size_t i = 0; i < 32; ++i) {
    header += static_cast<char>(std::stoi(key.substr(2 * i, 2), nullptr, 16));
  }
  put_u64(header, payload.size());
  header += digest_bytes(detail::Sha256::of(payload));
  // Invariant 6: a temporary file in the same directory, made whole, then renamed over.
  static std::atomic<unsigned> serial{0};
  const std::string temp = dir + "/." + key + ".tmp." + std::to_string(::getpid()) + "." +
                           std::to_string(serial.fetch_add(1));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fail("open", errno);
  const bool written = write_all(fd, header.data(), header.size()) &&
                       write_all(fd, payload.data(), payload.size()) && ::fsync(fd) == 0;
  const int write_error = errno;
  if (::close(fd) != 0 || !written) {
    ::unlink(temp.c_str());
    return fail("write", written ? errno : write_error);
  }
  const std::string path = entry_path(key);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    return fail("rename", error);
  }
  state_->stores.fetch_add(1, std::memory_order_relaxed);
  state_->evictions.fetch_add(evict(dir, state_->max_bytes, path), std::memory_order_relaxed);
  return true;
}

Library CompileCache::library(std::string_view caller_key,
                              const std::function<std::string()>& produce) const {
  const std::string key = key_of({"image", caller_key});
  if (std::optional<std::string> image = find(key)) {
    return Library::from_image(image->data(), image->size());
  }
  const std::string image = produce();
  store(key, image);
  return Library::from_image(image.data(), image.size());
}

CompileCacheStats CompileCache::stats() const noexcept {
  const State& s = *state_;
  constexpr auto r = std::memory_order_relaxed;
  return {s.hits.load(r),   s.misses.load(r),    s.rejected.load(r),
          s.stores.load(r), s.evictions.load(r), s.write_failures.load(r)};
}

}  // namespace custream
