// Must not compile: a copy from a temporary container, which dies before the enqueued copy
// has read it (DeviceArray::copy_from of an rvalue is deleted). Built with -DCUSTREAM_CONTROL
// the container is named and the file must compile.
#include <vector>

#include "custream/device_array.hpp"

void copy_in(const custream::DeviceArray<float>& array, const custream::StreamRef& stream) {
#ifdef CUSTREAM_CONTROL
  const std::vector<float> host(4, 1.0f);
  array.copy_from(stream, host);
#else
  array.copy_from(stream, std::vector<float>(4, 1.0f));
#endif
}
