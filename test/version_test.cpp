// custream/version.hpp: the macros of the headers and the library's version() agree, and
// agree with the SONAME rule (docs/design/abi.md). Needs no driver.
#include "custream/version.hpp"

#include <cstdio>
#include <string>

#include "catch_compat.hpp"

TEST_CASE("the headers' version macros and the library's version() agree", "[unit][version]") {
  const custream::Version v = custream::version();
  CHECK(v.major == CUSTREAM_VERSION_MAJOR);
  CHECK(v.minor == CUSTREAM_VERSION_MINOR);
  CHECK(v.patch == CUSTREAM_VERSION_PATCH);
  CHECK(std::string(v.text) == CUSTREAM_VERSION_STRING);
  CHECK(CUSTREAM_VERSION ==
        CUSTREAM_VERSION_MAJOR * 10000 + CUSTREAM_VERSION_MINOR * 100 + CUSTREAM_VERSION_PATCH);
  char text[32];
  std::snprintf(text, sizeof text, "%d.%d.%d", v.major, v.minor, v.patch);
  CHECK(std::string(text) == v.text);
}
