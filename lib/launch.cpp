// Launches with a configuration (cuLaunchKernelEx): the attributes, the checks made before the
// driver is called, and the errors. Design: docs/design/libraries.md, invariant 7.
#include "launch.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "custream/context_scope.hpp"
#include "custream/error.hpp"
#include "driver.hpp"
#include "error.hpp"

namespace custream::detail {

std::string dims_text(Dim3 d) {
  return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
}

void refuse_shared_bytes(const char* call, const StreamRef& stream, const std::string& kernel,
                         std::size_t shared_bytes) {
  throw_stream_error(CUDA_ERROR_INVALID_VALUE, call, stream,
                     kernel + ": " + std::to_string(shared_bytes) +
                         " bytes of dynamic shared memory exceed the " +
                         std::to_string(kMaxSharedBytes) +
                         " a launch can ask for (the driver takes 32 bits; custream refused the "
                         "launch without calling the driver)");
}

bool param_sizes_known(ParamSizes& p,
                       const std::function<CUresult(std::size_t, std::size_t*, std::size_t*)>& info,
                       const std::function<void(CUresult, std::size_t)>& failed) {
  const ParamSizes::Known known = p.known.load(std::memory_order_acquire);
  if (known != ParamSizes::Known::unasked) return known == ParamSizes::Known::known;
  std::lock_guard<std::mutex> lock(p.mutex);
  if (p.known.load(std::memory_order_relaxed) != ParamSizes::Known::unasked) {
    return p.known.load(std::memory_order_relaxed) == ParamSizes::Known::known;
  }
  if (!info) {  // CUDA 12.4
    p.known.store(ParamSizes::Known::unknown, std::memory_order_release);
    return false;
  }
  std::vector<std::size_t> sizes;
  for (;;) {
    std::size_t offset = 0, size = 0;
    const CUresult r = info(sizes.size(), &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (r == CUDA_ERROR_NOT_SUPPORTED) {       // an image the driver cannot tell of
      p.known.store(ParamSizes::Known::unknown, std::memory_order_release);
      return false;
    }
    if (r != CUDA_SUCCESS) failed(r, sizes.size());
    sizes.push_back(size);
  }
  p.sizes = std::move(sizes);
  p.known.store(ParamSizes::Known::known, std::memory_order_release);
  return true;
}

namespace {
[[noreturn, gnu::cold]] void refuse_arguments(const ParamSizes& p, const char* call,
                                              const std::string& name, std::string why) {
  std::string layout;
  for (std::size_t i = 0; i < p.sizes.size(); ++i) {
    layout += (i == 0 ? "" : ", ") + std::to_string(p.sizes[i]);
  }
  throw Error(CUDA_ERROR_INVALID_VALUE, call, "kernel \"" + name + "\"",
              std::move(why) + "; its parameters take " +
                  (layout.empty() ? std::string("no bytes") : layout + " bytes") +
                  " (custream refused the launch without calling the driver)");
}
}  // namespace

void check_argument_sizes(const ParamSizes& p, const char* call, const std::string& name,
                          const std::size_t* sizes, std::size_t count) {
  const std::vector<std::size_t>& expected = p.sizes;
  if (count != expected.size()) {
    refuse_arguments(p, call, name,
                     "the kernel has " + std::to_string(expected.size()) +
                         " parameter(s), the launch gave " + std::to_string(count) +
                         " argument(s)");
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (sizes[i] != expected[i]) {
      refuse_arguments(p, call, name,
                       "argument " + std::to_string(i) + " has " + std::to_string(sizes[i]) +
                           " bytes, parameter " + std::to_string(i) + " takes " +
                           std::to_string(expected[i]));
    }
  }
}

namespace {

// What a device can do, asked once per device (cuDeviceGetAttribute) and kept: a check of a
// launch with attributes then costs no driver call.
struct DeviceCaps {
  int sm_count = 0;
  bool cluster_launch = false;
  bool cooperative_launch = false;
};

class CapsCache {
 public:
  explicit CapsCache(int devices) : slots_(std::make_unique<Slot[]>(devices > 0 ? devices : 1)) {}

  const DeviceCaps& get(const Loaded& l, int device) {
    Slot& slot = slots_[static_cast<std::size_t>(device)];
    if (!slot.ready.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!slot.ready.load(std::memory_order_relaxed)) {
        const CUdevice d = l.devices[static_cast<std::size_t>(device)].device;
        const Subject subject = device_subject(device);
        int value = 0;
        call<&DriverApi::cuDeviceGetAttribute>(subject, &value,
                                               CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
        slot.caps.sm_count = value;
        call<&DriverApi::cuDeviceGetAttribute>(subject, &value, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH,
                                               d);
        slot.caps.cluster_launch = value != 0;
        call<&DriverApi::cuDeviceGetAttribute>(subject, &value,
                                               CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, d);
        slot.caps.cooperative_launch = value != 0;
        slot.ready.store(true, std::memory_order_release);
      }
    }
    return slot.caps;
  }

 private:
  struct Slot {
    std::atomic<bool> ready{false};
    DeviceCaps caps;
  };
  std::mutex mutex_;
  std::unique_ptr<Slot[]> slots_;
};

const DeviceCaps& device_caps(const Loaded& l, int device) {
  static CapsCache* cache = new CapsCache(l.device_count);  // never destroyed (exit order)
  return cache->get(l, device);
}

// An attribute and the first driver version whose cuda.h has it.
struct AttributeNeed {
  const char* name;
  int version;
};
constexpr AttributeNeed kCluster{"CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION", 11080};
constexpr AttributeNeed kCooperative{"CU_LAUNCH_ATTRIBUTE_COOPERATIVE", 11080};
constexpr AttributeNeed kProgrammaticSerialization{
    "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION", 11080};
constexpr AttributeNeed kProgrammaticEvent{"CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT", 11080};
constexpr AttributeNeed kPriority{"CU_LAUNCH_ATTRIBUTE_PRIORITY", 12000};
constexpr AttributeNeed kMemSyncDomain{"CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN", 12000};

std::string kernel_text(CUfunction function, const std::string& kernel) {
  return kernel.empty() ? "kernel " + pointer_text(function) : "library kernel \"" + kernel + "\"";
}

// Throws the error of a launch custream refused before calling the driver.
[[noreturn, gnu::cold]] void refuse(CUresult r, const LaunchSite& site, CUfunction function,
                                    const std::string& kernel, const std::string& why) {
  site.refuse(r, kernel_text(function, kernel) + ": " + why +
                     " (custream refused the launch without calling the driver)");
}

[[noreturn, gnu::cold]] void refuse_version(const Loaded& l, const AttributeNeed& need,
                                            const LaunchSite& site, CUfunction function,
                                            const std::string& kernel) {
  refuse(CUDA_ERROR_NOT_SUPPORTED, site, function, kernel,
         std::string(need.name) + " needs a CUDA " + version_text(need.version) +
             " driver or newer; this one is " + version_text(l.version));
}

// Refuses an attribute the driver is too old for (a comparison on the hot path).
inline void check_version(const Loaded& l, const AttributeNeed& need, const LaunchSite& site,
                          CUfunction function, const std::string& kernel) {
  if (l.version < need.version) refuse_version(l, need, site, function, kernel);
}

// Makes current the context a query about a function at `site` is made in: the stream's or
// the graph's (none for a special handle, whose context is the current one).
void enter_stream_context(std::optional<ContextScope>& scope, const LaunchSite& site) {
  if (!site.is_special()) scope.emplace(site.context());
}

// Checks the launch's clusters (invariant 7): no string is made unless a check refuses.
void check_cluster(const Loaded& l, const DeviceCaps* caps, const LaunchSite& site,
                   CUfunction function, const LaunchConfig& config, const std::string& kernel) {
  check_version(l, kCluster, site, function, kernel);
  const Dim3 c = *config.cluster;
  const Dim3 g = config.grid;
  const auto what = [c] { return "cluster dimensions " + dims_text(c); };
  if (caps != nullptr && !caps->cluster_launch) {
    refuse(CUDA_ERROR_NOT_SUPPORTED, site, function, kernel,
           what() +
               ": the device cannot launch clusters (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH is 0; "
               "compute capability 9.0 or newer can)");
  }
  if (c.x == 0 || c.y == 0 || c.z == 0) {
    refuse(CUDA_ERROR_INVALID_CLUSTER_SIZE, site, function, kernel,
           what() + ": every dimension must be at least 1");
  }
  const auto divides = [](unsigned cluster, unsigned grid) {  // no division for the usual 1
    return cluster == 1 || grid % cluster == 0;
  };
  if (!divides(c.x, g.x) || !divides(c.y, g.y) || !divides(c.z, g.z)) {
    refuse(CUDA_ERROR_INVALID_CLUSTER_SIZE, site, function, kernel,
           what() + " do not divide the grid " + dims_text(g));
  }
  const unsigned long long size = 1ull * c.x * c.y * c.z;
  if (size <= 8) return;  // portable: every device that launches clusters can
  // Larger clusters need the kernel's permission and the device's room: ask the driver what it
  // can co-schedule (rare sizes only, so the common launch makes no query).
  const Subject subject = site.subject();
  int allowed = 1;
  // A special handle's launch passes a CUkernel, which cuFuncGetAttribute does not take.
  if (l.api.cuFuncGetAttribute != nullptr && !site.is_special()) {
    call<&DriverApi::cuFuncGetAttribute>(
        subject, &allowed, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, function);
  }
  if (allowed == 0) {
    refuse(CUDA_ERROR_INVALID_CLUSTER_SIZE, site, function, kernel,
           what() + ": " + std::to_string(size) +
               " blocks per cluster, but 8 is the portable limit and the kernel does not allow "
               "more (set CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED to 1 first)");
  }
  if (l.api.cuOccupancyMaxActiveClusters == nullptr) return;
  CUlaunchAttribute attribute{};
  attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attribute.value.clusterDim = {c.x, c.y, c.z};
  CUlaunchConfig query{};
  query.gridDimX = g.x, query.gridDimY = g.y, query.gridDimZ = g.z;
  query.blockDimX = config.block.x, query.blockDimY = config.block.y;
  query.blockDimZ = config.block.z;
  query.sharedMemBytes = static_cast<unsigned>(config.shared_bytes);
  query.hStream = site.stream_handle();
  query.attrs = &attribute;
  query.numAttrs = 1;
  int clusters = 0;
  std::optional<ContextScope> scope;
  enter_stream_context(scope, site);
  call<&DriverApi::cuOccupancyMaxActiveClusters>(subject, &clusters, function, &query);
  if (clusters == 0) {  // the H200's answer for a cluster it cannot place
    refuse(CUDA_ERROR_INVALID_CLUSTER_SIZE, site, function, kernel,
           what() + ": the device cannot schedule a cluster of " + std::to_string(size) +
               " blocks of " + dims_text(config.block) +
               " threads of this kernel (cuOccupancyMaxActiveClusters: 0)");
  }
}

[[gnu::cold]] void refuse_cooperative(const LaunchSite& site, CUfunction function,
                                      const std::string& kernel, const LaunchConfig& config,
                                      unsigned long long blocks, int per_sm, int sms) {
  refuse(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, site, function, kernel,
         "a cooperative grid of " + std::to_string(blocks) + " blocks (" + dims_text(config.grid) +
             ") exceeds the " + std::to_string(static_cast<long long>(per_sm) * sms) +
             " blocks the device can run at once: " + std::to_string(per_sm) + " per SM of " +
             dims_text(config.block) + " threads and " + std::to_string(config.shared_bytes) +
             " bytes of dynamic shared memory (cuOccupancyMaxActiveBlocksPerMultiprocessor) "
             "times " +
             std::to_string(sms) + " SMs");
}

void check_cooperative(const Loaded& l, const DeviceCaps* caps, const LaunchSite& site,
                       CUfunction function, const LaunchConfig& config, const std::string& kernel) {
  check_version(l, kCooperative, site, function, kernel);
  if (caps == nullptr) return;  // a special handle: the driver checks
  if (!caps->cooperative_launch) {
    refuse(CUDA_ERROR_NOT_SUPPORTED, site, function, kernel,
           "a cooperative launch, but the device cannot (CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH "
           "is 0)");
  }
  if (l.api.cuOccupancyMaxActiveBlocksPerMultiprocessor == nullptr) return;
  const unsigned long long threads = 1ull * config.block.x * config.block.y * config.block.z;
  int per_sm = 0;
  CUresult r;
  {
    std::optional<ContextScope> scope;
    enter_stream_context(scope, site);
    r = l.api.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, function, static_cast<int>(threads), config.shared_bytes);
  }
  if (r != CUDA_SUCCESS) {
    fail<&DriverApi::cuOccupancyMaxActiveBlocksPerMultiprocessor>(
        r, site.subject(),
        kernel_text(function, kernel) + ": the occupancy of a cooperative launch of " +
            dims_text(config.block) + " threads");
  }
  const unsigned long long blocks = 1ull * config.grid.x * config.grid.y * config.grid.z;
  if (blocks > 1ull * static_cast<unsigned>(per_sm) * static_cast<unsigned>(caps->sm_count)) {
    refuse_cooperative(site, function, kernel, config, blocks, per_sm, caps->sm_count);
  }
}

[[noreturn, gnu::cold]] void launch_failed(CUresult r, const StreamRef& stream, CUfunction function,
                                           const LaunchConfig& config, const std::string& kernel) {
  std::string why = kernel_text(function, kernel) + ", grid " + dims_text(config.grid) +
                    ", block " + dims_text(config.block) + ", " +
                    std::to_string(config.shared_bytes) + " bytes of shared memory";
  if (config.cluster) why += ", clusters of " + dims_text(*config.cluster);
  if (config.cooperative) why += ", cooperative";
  if (config.priority) why += ", priority " + std::to_string(*config.priority);
  if (config.programmatic_serialization) why += ", programmatic stream serialization";
  if (config.programmatic_event) {
    why += ", programmatic event " + pointer_text(config.programmatic_event->event);
  }
  if (config.mem_sync_domain) {
    why += ", memory synchronization domain " +
           std::to_string(static_cast<int>(*config.mem_sync_domain));
  }
  throw_stream_error(r, "cuLaunchKernelEx", stream, std::move(why));
}

}  // namespace

void LaunchSite::refuse(CUresult r, std::string why) const {
  if (stream != nullptr) throw_stream_error(r, call, *stream, std::move(why));
  throw_call_error(r, call, subject(), std::move(why));
}

unsigned launch_attributes(const LaunchSite& site, CUfunction function, const LaunchConfig& config,
                           const std::string& kernel, CUlaunchAttribute (&attributes)[6]) {
  const Loaded& l = loaded();
  unsigned count = 0;
  if (config.cluster || config.cooperative) {  // checks that need what the device can do
    const int device = site.is_special() ? -1 : site.device_id();
    const DeviceCaps* caps = device >= 0 ? &device_caps(l, device) : nullptr;
    if (config.cluster) {
      check_cluster(l, caps, site, function, config, kernel);
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attributes[count++].value.clusterDim = {config.cluster->x, config.cluster->y,
                                              config.cluster->z};
    }
    if (config.cooperative) {
      check_cooperative(l, caps, site, function, config, kernel);
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attributes[count++].value.cooperative = 1;
    }
  }
  if (config.priority) {
    check_version(l, kPriority, site, function, kernel);
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    attributes[count++].value.priority = *config.priority;
  }
  if (config.programmatic_serialization) {
    check_version(l, kProgrammaticSerialization, site, function, kernel);
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attributes[count++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (config.programmatic_event) {
    check_version(l, kProgrammaticEvent, site, function, kernel);
    if (config.programmatic_event->event == nullptr) {
      refuse(CUDA_ERROR_INVALID_VALUE, site, function, kernel,
             "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT with a null event");
    }
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    attributes[count].value.programmaticEvent.event = config.programmatic_event->event;
    attributes[count].value.programmaticEvent.flags = 0;
    attributes[count++].value.programmaticEvent.triggerAtBlockStart =
        config.programmatic_event->trigger_at_block_start ? 1 : 0;
  }
  if (config.mem_sync_domain) {
    check_version(l, kMemSyncDomain, site, function, kernel);
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
    attributes[count++].value.memSyncDomain = *config.mem_sync_domain;
  }
  return count;
}

void launch_with_config(CUfunction function, const StreamRef& stream, const LaunchConfig& config,
                        void** params, const std::string& kernel) {
  if (config.shared_bytes > kMaxSharedBytes) {  // invariant 7: never truncated
    refuse_shared_bytes("custream::launch (LaunchConfig)", stream, kernel_text(function, kernel),
                        config.shared_bytes);
  }
  const auto launch_ex = entry<&DriverApi::cuLaunchKernelEx>(api());  // an older driver: say so
  CUlaunchAttribute attributes[6];
  const LaunchSite site{"custream::launch (LaunchConfig)", &stream};
  const unsigned count = launch_attributes(site, function, config, kernel, attributes);
  CUlaunchConfig c{};
  c.gridDimX = config.grid.x, c.gridDimY = config.grid.y, c.gridDimZ = config.grid.z;
  c.blockDimX = config.block.x, c.blockDimY = config.block.y, c.blockDimZ = config.block.z;
  c.sharedMemBytes = static_cast<unsigned>(config.shared_bytes);
  c.hStream = stream.handle();
  c.attrs = count > 0 ? attributes : nullptr;
  c.numAttrs = count;
  const CUresult r = launch_ex(&c, function, params, nullptr);
  if (r != CUDA_SUCCESS) launch_failed(r, stream, function, config, kernel);
}

}  // namespace custream::detail
