// The entry-point table: each (symbol, version) is one of cudaTypedefs.h's PFN_<symbol>_v<N>
// (the build fails otherwise), and the driver really hands out that ABI at that version.
#include <algorithm>
#include <cctype>
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

// symbol → ABI version → parameter list (whitespace removed), from the
// `typedef CUresult (CUDAAPI *PFN_<symbol>_v<N>)(<parameters>);` lines of cudaTypedefs.h.
using AbiMap = std::map<std::string, std::map<int, std::string>>;
AbiMap header_abis() {
  std::ifstream in(CUSTREAM_CUDA_TYPEDEFS_H);
  REQUIRE(in.good());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  AbiMap abis;
  std::regex typedef_re(R"(\*PFN_(cu\w+?)_v(\d+)\)\(([^;]*)\);)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), typedef_re);
       it != std::sregex_iterator(); ++it) {
    std::string params = (*it)[3];
    params.erase(std::remove_if(params.begin(), params.end(), ::isspace), params.end());
    abis[(*it)[1]][std::stoi((*it)[2])] = params;
  }
  return abis;
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
  const auto abis = header_abis();
  std::size_t count = 0;
  const custream::detail::DriverEntry* entries = custream::detail::driver_entries(&count);
  REQUIRE(count > 50);
  std::set<std::string> fields;
  for (std::size_t i = 0; i < count; ++i) {
    INFO(entries[i].field << " = " << entries[i].symbol << " v" << entries[i].version);
    auto it = abis.find(entries[i].symbol);
    REQUIRE(it != abis.end());
    CHECK(it->second.count(entries[i].version) == 1);
    CHECK(fields.insert(entries[i].field).second);
  }
}

TEST_CASE("the driver hands out each entry's ABI exactly from its version on", "[gpu][table]") {
  REQUIRE_DRIVER();
  const auto abis = header_abis();
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
    const std::map<int, std::string>& versions = abis.at(e.symbol);
    auto self = versions.find(e.version);
    REQUIRE(self != versions.end());
    auto next = std::next(self);
    // The same function up to the last version before the next ABI (or the driver's own).
    const int last = next == versions.end() ? driver : std::min(next->first - 1, driver);
    CHECK(resolve(e.symbol, last) == at_version);
    // Just below the version, an older ABI with another signature must be another function
    // (or none): the version is where the PFN type's signature starts.
    if (self != versions.begin() && std::prev(self)->second != self->second) {
      CHECK(resolve(e.symbol, e.version - 1) != at_version);
    }
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
