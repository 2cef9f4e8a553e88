// Must not compile: a host container whose elements are not exactly the array's T (a
// std::vector<double> for a DeviceArray<float>) is refused by DeviceArray's static_assert, not
// converted bytewise. Built with -DCUSTREAM_CONTROL it uses float and must compile: that
// shows the failure comes from the element type, not from the include path.
#include <vector>

#include "custream/device_array.hpp"

#ifdef CUSTREAM_CONTROL
using Element = float;
#else
using Element = double;
#endif

void copy_in(const custream::DeviceArray<float>& array, const custream::StreamRef& stream,
             const std::vector<Element>& host) {
  array.copy_from(stream, host);
}
