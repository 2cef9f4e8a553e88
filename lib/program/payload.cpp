// A ProgramImage as a compile-cache payload: length-prefixed fields. Design: docs/design/jit.md.
#include "payload.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace custream::detail {
namespace {

void put(std::string& out, const std::string& field) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(std::uint64_t(field.size()) >> (8 * i));
  out += field;
}

bool get(const std::string& in, std::size_t& at, std::string* field) {
  if (in.size() - at < 8) return false;
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(in[at + i])) << (8 * i);
  at += 8;
  if (in.size() - at < n) return false;
  field->assign(in, at, n);
  at += n;
  return true;
}

}  // namespace

std::string encode_image(const ProgramImage& image) {
  std::string out;
  put(out, image.ptx ? "ptx" : "cubin");
  put(out, image.arch);
  put(out, std::to_string(image.lowered_names.size()));
  for (const auto& [expression, lowered] : image.lowered_names) {
    put(out, expression);
    put(out, lowered);
  }
  put(out, image.log);
  put(out, image.bytes);
  return out;
}

bool decode_image(const std::string& payload, ProgramImage* image) {
  std::size_t at = 0;
  std::string kind, count;
  if (!get(payload, at, &kind) || (kind != "ptx" && kind != "cubin")) return false;
  image->ptx = kind == "ptx";
  if (!get(payload, at, &image->arch) || !get(payload, at, &count)) return false;
  const unsigned long n = std::strtoul(count.c_str(), nullptr, 10);
  image->lowered_names.clear();
  for (unsigned long i = 0; i < n; ++i) {
    std::string expression, lowered;
    if (!get(payload, at, &expression) || !get(payload, at, &lowered)) return false;
    image->lowered_names.emplace_back(std::move(expression), std::move(lowered));
  }
  return get(payload, at, &image->log) && get(payload, at, &image->bytes) && at == payload.size() &&
         !image->bytes.empty();
}

bool read_whole_file(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ok) {
    out->resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (ok && done < out->size()) {
      const ssize_t r = ::read(fd, out->data() + done, out->size() - done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ok = false;
      } else {
        done += static_cast<std::size_t>(r);
      }
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace custream::detail
