// `custream selftest`: on every device, every capability end to end, one row per check
// (device, check, pass / FAIL / skipped, time, detail). Kernel checks are skipped, and say so,
// where the driver cannot load modules; on the CPU driver emulator the kernel set_value runs as
// a CPU function registered with it (emu_control.h), so every check runs there too.
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "custream/capture_scope.hpp"
#include "custream/custream.hpp"
#include "custream/graph.hpp"
#include "custream/graph_builder.hpp"
#include "custream/kernel.hpp"
#include "custream/module.hpp"
#include "custream/testing.hpp"
#include "emu_control.h"
#include "tool.hpp"
#include "trivial_ptx.hpp"

namespace custream_tool {
namespace {

using Clock = std::chrono::steady_clock;

/// set_value(int* out, int value) on the CPU, for the emulator: *out = value.
void cpu_set_value(const custream_emu_kernel_launch* launch) {
  int* out = nullptr;
  int value = 0;
  std::memcpy(&out, launch->params[0], sizeof out);
  std::memcpy(&value, launch->params[1], sizeof value);
  *out = value;
}

/// On the emulator, registers the CPU set_value (its parameter sizes come from the PTX).
void register_emulated_kernels() {
  if (!driver_is_emulator()) return;
  void* driver = dlopen(custream::driver_info().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  auto register_kernel = reinterpret_cast<decltype(&custream_emu_register_kernel)>(
      driver ? dlsym(driver, "custream_emu_register_kernel") : nullptr);
  if (register_kernel) register_kernel("set_value", cpu_set_value, nullptr, nullptr, 0);
  if (driver) dlclose(driver);
}

/// Thrown by a check that cannot run here; the row says "skipped" and why.
struct Skip {
  std::string why;
};

/// A failed expectation.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void expect(bool condition, const std::string& what) {
  if (!condition) throw Failure(what);
}

/// Waits (polling done(), up to 10 s) until `stream` is idle: a lost host function fails the
/// check instead of hanging the command.
void wait_idle(const custream::Stream& stream) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!stream.done()) {
    if (Clock::now() > deadline) throw Failure("the stream was still busy after 10 s");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

int read_int(const custream::Stream& stream, CUdeviceptr src) {
  int value = -1;
  stream.copy(&value, src, sizeof value);
  stream.synchronize();
  return value;
}

struct Tally {
  int passed = 0, failed = 0, skipped = 0;
};

void row(Tally& tally, int device, const std::string& name, const std::function<void()>& body) {
  const auto start = Clock::now();
  std::string result, detail;
  try {
    body();
    result = "pass";
    ++tally.passed;
  } catch (const Skip& s) {
    result = "skipped";
    detail = s.why;
    ++tally.skipped;
  } catch (const std::exception& e) {
    result = "FAIL";
    detail = e.what();
    ++tally.failed;
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  char time[32] = "-";
  if (result != "skipped") std::snprintf(time, sizeof time, "%.3f ms", ms);
  std::printf("%-6d %-48s %-8s %11s  %s\n", device, name.c_str(), result.c_str(), time,
              detail.c_str());
  std::fflush(stdout);
}

/// Everything the checks of one device share.
struct DeviceChecks {
  explicit DeviceChecks(int ordinal) : d(ordinal), device(ordinal) {}

  int d;
  custream::Device device;
  custream::Stream stream;        // created by the first check
  custream::DeviceBuffer buffer;  // one int
  custream::Kernel set_value;     // empty when modules cannot be loaded
  std::string no_kernels;         // why, then
  custream::Graph graph;          // from the capture check
  std::shared_ptr<std::atomic<int>> host_runs = std::make_shared<std::atomic<int>>(0);

  void need_stream() const {
    if (stream.kind() != custream::Stream::Kind::created) {
      throw Failure("needs the stream of the \"create stream\" check, which failed");
    }
  }
  void need_graph() const {
    if (!graph) throw Failure("needs the graph of the capture check, which failed");
  }

  /// Captures [memset 0, set_value(v) (or memset v without kernels), host function adding
  /// `add`] on the stream, with `flags`.
  custream::Graph capture(int v, int add, custream::InstantiateFlags flags) {
    custream::CaptureScope capture(stream);
    stream.memset32(buffer.get(), 0, 1);
    if (set_value.handle()) {
      set_value.launch(stream, 1, 1, 0, buffer.get(), v);
    } else {
      stream.memset32(buffer.get(), static_cast<std::uint32_t>(v), 1);
    }
    auto runs = host_runs;
    stream.launch_host_func([runs, add] { runs->fetch_add(add); });
    return capture.end(flags);
  }

  void run(Tally& t) {
    row(t, d, "create stream (non-blocking, priority -1)", [&] {
      stream = custream::Stream(device, custream::StreamFlags::non_blocking, -1);
      expect(stream.device_id() == d, "device_id() is " + std::to_string(stream.device_id()));
      expect(stream.context() == device.primary_context().handle(), "not the primary context");
      expect(stream.non_blocking(), "non_blocking() is false");
      const int p = stream.priority();
      expect(p <= 0 && p >= -5, "priority() read back " + std::to_string(p));
      stream.synchronize();
      expect(stream.done(), "a new stream is not idle");
      buffer = custream::DeviceBuffer(sizeof(int), device);
    });

    row(t, d, "wrap foreign stream (device inferred)", [&] {
      const auto& api = custream::testing::driver();
      CUstream foreign = nullptr;
      {
        custream::DeviceScope scope(device);  // the foreign code's own context
        const CUresult r = api.cuStreamCreate(&foreign, CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS) throw custream::Error(r, "cuStreamCreate", "selftest");
      }
      struct Destroy {
        CUstream h;
        ~Destroy() { custream::testing::driver().cuStreamDestroy(h); }
      } destroy{foreign};
      custream::Device(0).make_current();  // another device's context may be current now
      custream::ExternalStream wrapped(foreign);
      expect(wrapped.device_id() == d, "inferred device " + std::to_string(wrapped.device_id()));
      expect(wrapped.context() == device.primary_context().handle(), "inferred the wrong context");
      wrapped.synchronize();
      expect(wrapped.done(), "a new stream is not idle");
      expect(custream::ExternalStream(foreign, d).device_id() == d, "explicit device refused");
      if (custream::Device::count() > 1) {
        bool threw = false;
        try {
          custream::ExternalStream(foreign, d == 0 ? 1 : 0);
        } catch (const custream::Error&) {
          threw = true;
        }
        expect(threw, "a wrong explicit device was accepted");
      }
      expect(custream::ExternalStream(CU_STREAM_LEGACY).device_id() == -1,
             "the legacy stream got a device");
    });

    row(t, d, "current stream and stream scope", [&] {
      need_stream();
      device.make_current();
      const custream::Stream before = custream::current_stream(d);
      {
        custream::StreamScope scope(stream);
        expect(custream::current_stream(d) == stream, "the scope did not make it current");
        expect(custream::current_stream() == stream, "not current for the current device");
      }
      expect(custream::current_stream(d) == before, "the scope did not restore the previous");
      expect(stream.use() == stream && custream::current_stream(d) == stream, "use() failed");
      before.use();
    });

    // One row per kind of context: a stream of it, used while the primary context is
    // current, wrapped (kind inferred), with an event, a host function and a replayed capture.
    const auto context_row = [&](const char* name, const std::function<custream::Context()>& make) {
      row(t, d, name, [&] {
        device.make_current();
        const custream::Context context = make();
        const CUcontext before = custream::Context::current().handle();
        const custream::Stream s(context, custream::StreamFlags::non_blocking);
        const custream::ExternalStream wrapped(s.handle());
        expect(wrapped.context_kind() == context.kind() && wrapped.context() == context.handle(),
               std::string("inferred a ") + custream::to_string(wrapped.context_kind()) +
                   " context " + custream::to_string(context.kind()));
        custream::DeviceBuffer cell(sizeof(int), s);
        auto runs = std::make_shared<std::atomic<int>>(0);
        custream::Graph g;
        {
          custream::CaptureScope capture(s);
          s.memset32(cell.get(), 7, 1);
          s.launch_host_func([runs] { runs->fetch_add(1); });
          g = capture.end();
        }
        g.launch(wrapped);
        g.launch(wrapped);
        const custream::Event e = wrapped.record();
        int value = 0;
        s.copy(&value, cell.get(), sizeof value);
        e.synchronize();
        s.synchronize();
        expect(value == 7 && runs->load() == 2,
               "value " + std::to_string(value) + ", " + std::to_string(runs->load()) + " runs");
        expect(custream::Context::current().handle() == before, "the current context changed");
      });
    };
    context_row("context: primary", [&] { return device.primary_context(); });
    context_row("context: created (cuCtxCreate)", [&] {
      if (custream::testing::driver().cuCtxCreate == nullptr)
        throw Skip{"the driver has no cuCtxCreate"};
      return custream::Context::create(device);
    });
    context_row("context: green (one SM group)", [&] {
      if (custream::testing::driver().cuGreenCtxStreamCreate == nullptr) {
        throw Skip{"green contexts need a CUDA 12.5 driver"};
      }
      const custream::SmSplit split = device.split_sms(1, 1);
      return custream::Context::create_green(split.groups.at(0));
    });

    row(t, d, "events and elapsed time", [&] {
      need_stream();
      custream::Event start(device, custream::EventFlags::timing);
      custream::Event end(device, custream::EventFlags::timing);
      stream.record(start);
      stream.memset32(buffer.get(), 5, 1);
      stream.record(end);
      end.synchronize();
      expect(end.done(), "done() is false after synchronize()");
      const float ms = custream::Event::elapsed_ms(start, end);
      expect(ms >= 0, "negative elapsed time");
      custream::Event plain = stream.record();  // timing disabled by default
      stream.wait_event(plain);
      bool refused = false;
      try {
        custream::Event::elapsed_ms(plain, end);
      } catch (const custream::Error&) {
        refused = true;
      }
      expect(refused, "elapsed time of a timing-disabled event was not refused");
      stream.synchronize();
    });

    row(t, d, "host functions and callbacks in order (200)", [&] {
      need_stream();
      struct Log {  // shared with the payloads: a timed-out check leaves nothing dangling
        std::mutex m;
        std::vector<int> order;
        bool right_stream = true;
      };
      auto log = std::make_shared<Log>();
      const CUstream handle = stream.handle();
      for (int i = 0; i < 100; ++i) {
        stream.launch_host_func([log, i] {
          std::lock_guard<std::mutex> lock(log->m);
          log->order.push_back(2 * i);
        });
        stream.add_callback([log, i, handle](custream::Stream s, CUresult status) {
          std::lock_guard<std::mutex> lock(log->m);
          log->right_stream = log->right_stream && s.handle() == handle && status == CUDA_SUCCESS;
          log->order.push_back(2 * i + 1);
        });
      }
      wait_idle(stream);
      std::lock_guard<std::mutex> lock(log->m);
      expect(log->order.size() == 200, std::to_string(log->order.size()) + " of 200 ran");
      for (int i = 0; i < 200; ++i) {
        expect(log->order[i] == i, "out of order at " + std::to_string(i));
      }
      expect(log->right_stream, "a callback got the wrong stream or a failure status");
    });

    row(t, d, "load PTX module (driver JIT)", [&] {
      register_emulated_kernels();
      try {
        set_value = custream::Module::from_ptx(custream_bench::kTrivialPtx, d).kernel("set_value");
      } catch (const custream::Error& e) {
        if (e.result() != CUDA_ERROR_NOT_SUPPORTED) throw;
        no_kernels = "the driver cannot load modules (" + e.name() + ")";
        throw Skip{no_kernels};
      }
    });

    row(t, d, "kernel launch", [&] {
      if (!no_kernels.empty()) throw Skip{no_kernels};
      need_stream();
      if (!set_value.handle()) throw Failure("needs the module of the load check, which failed");
      set_value.launch(stream, 1, 1, 0, buffer.get(), 42);
      const int v = read_int(stream, buffer.get());
      expect(v == 42, "the kernel wrote " + std::to_string(v));
    });

    row(t, d, "library kernel (one load for every device)", [&] {
      if (!no_kernels.empty()) throw Skip{no_kernels};
      if (custream::testing::driver().cuLibraryLoadData == nullptr) {
        throw Skip{"libraries need a CUDA 12.0 driver"};
      }
      need_stream();
      // The process-wide cache: every device's row gets the same library.
      const custream::Library lib = custream::Library::from_ptx(custream_bench::kTrivialPtx);
      expect(custream::Library::from_ptx(custream_bench::kTrivialPtx) == lib,
             "the same image was loaded twice");
      lib.kernel("set_value").launch(stream, 1, 1, 0, buffer.get(), 43);
      const int v = read_int(stream, buffer.get());
      expect(v == 43, "the kernel wrote " + std::to_string(v));
    });

    row(t, d, "completion (callback and future, no host function)", [&] {
      need_stream();
      std::atomic<bool> called{false};
      stream.memset32(buffer.get(), 7, 1);
      custream::Completions::standard().when_done(stream, [&called] { called = true; });
      std::future<void> done = custream::Completions::standard().future(stream);
      expect(done.wait_for(std::chrono::seconds(10)) == std::future_status::ready,
             "the future was not ready after 10 s");
      done.get();
      expect(called.load(), "the callback had not run when the later future was ready");
    });

    row(t, d, "completion by a written word (cuStreamWriteValue64, host-mapped)", [&] {
      need_stream();
      custream::CompletionOptions options;
      options.mechanism = custream::CompletionMechanism::memory_write;
      custream::Completions words(options);
      std::atomic<CUresult> seen{CUDA_ERROR_NOT_READY};
      stream.memset32(buffer.get(), 8, 1);
      words.when_done(stream, [&seen](CUresult r) { seen = r; });
      std::future<void> done = words.future(stream);
      expect(done.wait_for(std::chrono::seconds(10)) == std::future_status::ready,
             "the future was not ready after 10 s");
      done.get();
      expect(seen.load() == CUDA_SUCCESS, "the callback had not run, or saw an error");
    });

    if (!no_kernels.empty()) {
      row(t, d, "capture (PTX kernel + host function)", [&] { throw Skip{no_kernels}; });
    }
    const std::string work =
        set_value.handle() ? "PTX kernel + host function" : "memset + host function";
    row(t, d, "capture (" + work + ") + instantiate", [&] {
      need_stream();
      graph = capture(1, 1, custream::InstantiateFlags::none);
      expect(!stream.is_capturing(), "the stream still captures");
      const std::size_t nodes = graph.node_count();
      expect(nodes == 3, "the graph has " + std::to_string(nodes) + " nodes, not 3");
      expect(host_runs->load() == 0, "the captured host function ran during capture");
    });

    row(t, d, "upload", [&] {
      need_graph();
      graph.upload(stream);
      stream.synchronize();
    });

    row(t, d, "replay x3", [&] {
      need_graph();
      for (int i = 0; i < 3; ++i) graph.launch(stream);
      wait_idle(stream);
      expect(host_runs->load() == 3,
             "the host node ran " + std::to_string(host_runs->load()) + " times, not 3");
      const int v = read_int(stream, buffer.get());
      expect(v == 1, "the graph wrote " + std::to_string(v) + ", not 1");
    });

    row(t, d, "update from a new capture", [&] {
      need_graph();
      custream::Graph newer = capture(2, 100, custream::InstantiateFlags::none);
      graph.update(newer);
      graph.launch(stream);
      wait_idle(stream);
      expect(host_runs->load() == 103,
             "host node count " + std::to_string(host_runs->load()) + ", not 103");
      const int v = read_int(stream, buffer.get());
      expect(v == 2, "the updated graph wrote " + std::to_string(v) + ", not 2");
    });

    row(t, d, "fork/join capture through events", [&] {
      need_stream();
      custream::Stream side(device, custream::StreamFlags::non_blocking);
      const int before = host_runs->load();
      auto runs = host_runs;
      custream::Graph g;
      {
        custream::CaptureScope capture(stream);
        custream::Event fork(device), join(device);
        stream.record(fork);
        side.wait_event(fork);
        expect(side.is_capturing(), "the joined stream does not capture");
        side.launch_host_func([runs] { runs->fetch_add(10); });
        stream.launch_host_func([runs] { runs->fetch_add(1000); });
        side.record(join);
        stream.wait_event(join);
        g = capture.end();  // instantiated and uploaded (the default)
      }
      expect(g.node_count() == 2, "the graph has " + std::to_string(g.node_count()) + " nodes");
      g.launch(stream);
      g.launch(stream);
      wait_idle(stream);
      expect(host_runs->load() - before == 2020,
             "host nodes added " + std::to_string(host_runs->load() - before) + ", not 2020");
    });

    row(t, d, std::string("built graph (GraphBuilder: ") + (set_value.handle() ? "kernel" : "memset") +
                  " -> host)",
        [&] {
          need_stream();
          if (custream::testing::driver().cuGraphAddNode == nullptr) {
            throw Skip{"graph builders need a CUDA 12.3 driver (cuGraphAddNode)"};
          }
          auto runs = host_runs;
          const int before = runs->load();
          custream::GraphBuilder b(device.primary_context());
          const custream::GraphNode work =
              set_value.handle()
                  ? b.add_kernel({}, set_value, custream::LaunchConfig{{1}, {1}}, buffer.get(), 44)
                  : b.add_memset({}, buffer.get(), std::uint32_t{44}, 1);
          b.add_host(work, [runs] { runs->fetch_add(1); });
          expect(b.node_count() == 2, "the graph has " + std::to_string(b.node_count()) + " nodes");
          const custream::Graph g = b.instantiate();
          g.launch(stream);
          g.launch(stream);
          wait_idle(stream);
          expect(runs->load() - before == 2,
                 "the host node ran " + std::to_string(runs->load() - before) + " times, not 2");
          const int v = read_int(stream, buffer.get());
          expect(v == 44, "the built graph wrote " + std::to_string(v) + ", not 44");
        });

    graph = custream::Graph();
  }
};

}  // namespace

int selftest() {
  const int count = custream::Device::count();
  std::printf("custream selftest: driver %s\n", driver_line().c_str());
  std::printf("devices: %d\n\n", count);
  std::printf("%-6s %-48s %-8s %11s  %s\n", "device", "check", "result", "time", "detail");
  Tally tally;
  for (int d = 0; d < count; ++d) {
    DeviceChecks checks(d);
    checks.run(tally);
  }
  std::printf("\nselftest: %d passed, %d failed, %d skipped%s\n", tally.passed, tally.failed,
              tally.skipped, driver_is_emulator() ? " (on the CPU driver emulator)" : "");
  return tally.failed == 0 && count > 0 ? 0 : 1;
}

}  // namespace custream_tool
