// The entry-point table: each (symbol, version) is one of cudaTypedefs.h's PFN_<symbol>_v<N>
// (the build fails otherwise), and the driver really hands out that ABI at that version.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "custream/custream.hpp"
#include "custream/detail/host_task.hpp"
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

// --- The frozen ABI (docs/design/abi.md) --------------------------------------------------

namespace {

template <typename T>
struct Type {
  using type = T;
};

// What the inline hot paths compiled into applications depend on, one line a fact: the driver
// table's entries in order, the layouts of the handles and internal structs they read, and the
// constants they were compiled with.
std::string abi_facts() {
  using namespace custream;
  using namespace custream::detail;
  std::ostringstream out;
  std::size_t count = 0;
  const DriverEntry* entries = driver_entries(&count);
  for (std::size_t i = 0; i < count; ++i) {
    out << "entry " << i << ' ' << entries[i].field << ' ' << entries[i].symbol << " v"
        << entries[i].version << (entries[i].required ? " required" : " optional") << '\n';
  }
  const auto layout = [&out](auto type, const char* name) {
    using T = typename decltype(type)::type;
    out << "layout " << name << " size " << sizeof(T) << " align " << alignof(T) << '\n';
  };
  layout(Type<DriverApi>{}, "DriverApi");
  layout(Type<Loaded>{}, "Loaded");
  layout(Type<DeviceSlot>{}, "DeviceSlot");
  layout(Type<HostTask>{}, "HostTask");
  layout(Type<PoolBlock>{}, "PoolBlock");
  layout(Type<CompletionTask>{}, "CompletionTask");
  layout(Type<InlineCallableOps>{}, "InlineCallableOps");
  layout(Type<CompletionOptions>{}, "CompletionOptions");
  layout(Type<Completions>{}, "Completions");
  layout(Type<StreamRef>{}, "StreamRef");
  layout(Type<Stream>{}, "Stream");
  layout(Type<ExternalStream>{}, "ExternalStream");
  layout(Type<Event>{}, "Event");
  layout(Type<EventOwner>{}, "EventOwner");
  layout(Type<Graph>{}, "Graph");
  layout(Type<Module>{}, "Module");
  layout(Type<Kernel>{}, "Kernel");
  layout(Type<Library>{}, "Library");
  layout(Type<LibraryKernel>{}, "LibraryKernel");
  layout(Type<LaunchConfig>{}, "LaunchConfig");
  layout(Type<DeviceBuffer>{}, "DeviceBuffer");
  layout(Type<Context>{}, "Context");
  layout(Type<Device>{}, "Device");
  layout(Type<StreamScope>{}, "StreamScope");
  layout(Type<ContextScope>{}, "ContextScope");
  layout(Type<DeviceScope>{}, "DeviceScope");
  layout(Type<CaptureScope>{}, "CaptureScope");
  // Where the inline paths find the table and the devices (offsetof on a struct with a
  // std::string member: conditionally supported, and exact with GCC and Clang).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
  out << "offset Loaded.api " << offsetof(Loaded, api) << '\n';
  out << "offset Loaded.device_count " << offsetof(Loaded, device_count) << '\n';
  out << "offset Loaded.devices " << offsetof(Loaded, devices) << '\n';
  out << "offset DeviceSlot.primary " << offsetof(DeviceSlot, primary) << '\n';
  // What CompletionTaskOf's inline invoke and destroy read and write.
  out << "offset CompletionTask.invoke " << offsetof(CompletionTask, invoke) << '\n';
  out << "offset CompletionTask.destroy " << offsetof(CompletionTask, destroy) << '\n';
  out << "offset CompletionTask.view " << offsetof(CompletionTask, view) << '\n';
  out << "offset CompletionTask.stream " << offsetof(CompletionTask, stream) << '\n';
  out << "offset CompletionTask.keep " << offsetof(CompletionTask, keep) << '\n';
#pragma GCC diagnostic pop
  out << "constant kPoolBatch " << kPoolBatch << '\n';
  out << "constant HostTask::kPooledBytes " << HostTask::kPooledBytes << '\n';
  out << "constant kTaskBlock " << kTaskBlock << '\n';
  out << "constant kInlineCallable " << kInlineCallable << '\n';
  return out.str();
}

}  // namespace

// A change to what the inline code of applications reads is an ABI break: it needs a new
// soversion (docs/design/abi.md). The facts of each soversion are recorded in
// test/abi/libcustream.so.<soversion>.txt; this fails when the library's differ from its
// soversion's record, so that no break ships under an old SONAME unnoticed.
TEST_CASE("the inline ABI matches the record of this soversion", "[unit][abi]") {
  const std::string facts = abi_facts();
  if (const char* path = std::getenv("CUSTREAM_WRITE_ABI_RECORD")) {
    std::ofstream(path) << facts;
    WARN("wrote the ABI facts to " << path);
  }
  std::ifstream in(CUSTREAM_ABI_RECORD);
  INFO("record: " CUSTREAM_ABI_RECORD);
  REQUIRE(in.good());
  const std::string recorded((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (facts != recorded) {
    std::istringstream a(recorded), b(facts);
    std::set<std::string> was, is;
    for (std::string line; std::getline(a, line);) was.insert(line);
    for (std::string line; std::getline(b, line);) is.insert(line);
    std::ostringstream diff;
    for (const auto& line : was)
      if (is.count(line) == 0) diff << "  - " << line << '\n';
    for (const auto& line : is)
      if (was.count(line) == 0) diff << "  + " << line << '\n';
    FAIL("the ABI that applications' inline code reads changed:\n"
         << diff.str()
         << "An ABI break needs the next soversion (bump the minor version in meson.build while "
            "it is 0.y, docs/design/abi.md) and a record of its own: run this test with "
            "CUSTREAM_WRITE_ABI_RECORD=test/abi/libcustream.so.<new soversion>.txt. Only a "
            "soversion never released (CHANGELOG) may have its record rewritten.");
  }
}
