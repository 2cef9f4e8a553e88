// custream::version(): the version this library was built as.
#include "custream/version.hpp"

namespace custream {

Version version() noexcept {
  return {CUSTREAM_VERSION_MAJOR, CUSTREAM_VERSION_MINOR, CUSTREAM_VERSION_PATCH,
          CUSTREAM_VERSION_STRING};
}

}  // namespace custream
