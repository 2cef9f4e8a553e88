// The entry-point table: each (symbol, version) is one of cudaTypedefs.h's PFN_<symbol>_v<N>
// (the build fails otherwise), and the driver really hands out that ABI at that version.
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "driver.hpp"
#include "test_support.hpp"

namespace {

// symbol → ABI versions, from the `typedef … (CUDAAPI *PFN_<symbol>_v<N>)(` lines.
std::map<std::string, std::set<int>> header_versions() {
  std::ifstream in(CUSTREAM_CUDA_TYPEDEFS_H);
  REQUIRE(in.good());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, std::set<int>> versions;
  std::regex typedef_re(R"(\*PFN_(cu\w+?)_v(\d+)\)\()");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), typedef_re);
       it != std::sregex_iterator(); ++it) {
    versions[(*it)[1]].insert(std::stoi((*it)[2]));
  }
  return versions;
}

void* resolve(const char* symbol, int version) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  custream::detail::loaded().get_proc_address(symbol, &fn, version,
                                              CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
  return status == CU_GET_PROC_ADDRESS_SUCCESS ? fn : nullptr;
}

}  // namespace

TEST_CASE("every table entry is a PFN_<symbol>_v<version> of cudaTypedefs.h", "[unit][table]") {
  const auto versions = header_versions();
  std::size_t count = 0;
  const custream::detail::DriverEntry* entries = custream::detail::driver_entries(&count);
  REQUIRE(count > 50);
  std::set<std::string> fields;
  for (std::size_t i = 0; i < count; ++i) {
    INFO(entries[i].field << " = " << entries[i].symbol << " v" << entries[i].version);
    auto it = versions.find(entries[i].symbol);
    REQUIRE(it != versions.end());
    CHECK(it->second.count(entries[i].version) == 1);
    CHECK(fields.insert(entries[i].field).second);
  }
}

TEST_CASE("the driver hands out each entry's ABI exactly from its version on", "[gpu][table]") {
  REQUIRE_DRIVER();
  const auto versions = header_versions();
  std::size_t count = 0;
  const custream::detail::DriverEntry* entries = custream::detail::driver_entries(&count);
  const int driver = custream::driver_info().version;
  for (std::size_t i = 0; i < count; ++i) {
    const auto& e = entries[i];
    INFO(e.symbol << " v" << e.version);
    void* at_version = resolve(e.symbol, e.version);
    if (at_version == nullptr) {
      CHECK_FALSE(e.required);
      continue;
    }
    const std::set<int>& abis = versions.at(e.symbol);
    auto next = abis.upper_bound(e.version);
    // The same function up to the last version before the next ABI (or the driver's own).
    const int last = next == abis.end() ? driver : std::min(*next - 1, driver);
    CHECK(resolve(e.symbol, last) == at_version);
    // And a different one (or none) just below it, when an older ABI exists: the version
    // is the boundary where the PFN type's signature starts.
    auto self = abis.find(e.version);
    if (self != abis.begin()) CHECK(resolve(e.symbol, e.version - 1) != at_version);
  }
}

TEST_CASE("the loaded entry points are the ones the table requests", "[gpu][table]") {
  REQUIRE_DRIVER();
  const auto& api = custream::detail::api();
  CHECK(reinterpret_cast<void*>(api.cuStreamGetCtx) == resolve("cuStreamGetCtx", 9020));
  CHECK(reinterpret_cast<void*>(api.cuCtxGetDevice) == resolve("cuCtxGetDevice", 2000));
  if (api.cuStreamGetCtx_v2 != nullptr) {
    CHECK(reinterpret_cast<void*>(api.cuStreamGetCtx_v2) !=
          reinterpret_cast<void*>(api.cuStreamGetCtx));
  }
  if (api.cuCtxGetDevice_v2 != nullptr) {
    CHECK(reinterpret_cast<void*>(api.cuCtxGetDevice_v2) !=
          reinterpret_cast<void*>(api.cuCtxGetDevice));
  }
}
