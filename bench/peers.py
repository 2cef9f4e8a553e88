#!/usr/bin/env python3
"""The operations of docs/performance.md through CuPy, PyTorch, cuda.core and numba-cuda.

Each operation is written the way a user of that library writes it (cupy.cuda.Stream /
Event / ExternalStream / Stream.launch_host_func / cupy.cuda.graph; torch.cuda.Stream /
Event / ExternalStream / torch.cuda.stream() / current_stream / CUDAGraph; cuda.core's
Device / Stream.from_handle / Event / launch / GraphBuilder; numba-cuda's stream / event /
external_stream / add_callback / @cuda.jit). Its figure is
the median, over repeated timeit runs, of the mean time per call in a run; enqueueing
operations run in batches of <= 256 calls with an untimed synchronize before each batch
(timeit's setup), like `custream bench`.

The operation names are those of `custream bench`, so bench/plot.py can put the rows side
by side. An operation a library has no idiomatic form for, a library that is missing, or an
operation that fails gives a row with no number and the reason ("n/a: ...").

    python3 bench/peers.py [--csv FILE] [--device N] [--repeat R]
                           [--only cupy|torch|cuda.core|numba-cuda]

CSV columns: operation,library,version,ns,note (ns empty for n/a).
"""

import argparse
import csv
import statistics
import sys
import timeit

# The PTX of `custream bench` (bench/trivial_ptx.hpp): an empty kernel, JIT-compiled by the
# driver. CuPy loads it with cupy.RawModule when it can, so no NVRTC is needed.
NOOP_PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry noop()
{
  ret;
}
"""

GRAPH_KERNELS = 1000

# The rows, in `custream bench` order and with its names.
OPERATIONS = [
    "record (timing disabled)",
    "wait_event",
    "done (idle stream)",
    "synchronize (idle stream)",
    "wrap foreign stream (infer device)",
    "current device",
    "current stream of an explicit device",
    "primary context of a device",
    "stream scope enter + exit",
    "launch_host_func (raw function)",
    "launch_host_func (callable)",
    "graph launch (1-node graph)",
    "kernel launch (empty kernel, 1x1)",
    "capture + instantiate + launch (1,000 kernels)",
]


def measure(stmt, setup=None, number=256, repeat=25):
    """Median over `repeat` timeit runs of the mean nanoseconds per call of `stmt`."""
    timer = timeit.Timer(stmt, setup=setup or (lambda: None))
    timer.timeit(number=number)  # warm-up: lazy loads, caches
    runs = timer.repeat(repeat=repeat, number=number)
    return statistics.median(runs) / number * 1e9


class Rows:
    def __init__(self, library, version):
        self.library, self.version, self.rows = library, version, []

    def add(self, operation, fn, note=""):
        """Runs fn() -> ns; any exception becomes an n/a row naming it."""
        try:
            ns = fn()
            self.rows.append((operation, self.library, self.version, f"{ns:.2f}", note))
            print(f"  {self.library:6} {operation:54} {ns:12.1f} ns  {note}", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failure as a row
            reason = f"n/a: {type(e).__name__}: {e}".replace("\n", " ")[:300]
            self.rows.append((operation, self.library, self.version, "", reason))
            print(f"  {self.library:6} {operation:54} {'n/a':>12}     {reason}", flush=True)

    def na(self, operation, why):
        self.rows.append((operation, self.library, self.version, "", "n/a: " + why))
        print(f"  {self.library:6} {operation:54} {'n/a':>12}     {why}", flush=True)


def bench_cupy(rows, device, repeat):
    import cupy
    rows.version = cupy.__version__
    cupy.cuda.Device(device).use()
    s = cupy.cuda.Stream(non_blocking=True)
    e = cupy.cuda.Event(disable_timing=True)
    sync = s.synchronize

    rows.add("record (timing disabled)",
             lambda: measure(lambda: s.record(e), sync, repeat=repeat),
             "Stream.record(event)")
    rows.add("wait_event", lambda: measure(lambda: s.wait_event(e), sync, repeat=repeat),
             "Stream.wait_event(event)")
    rows.add("done (idle stream)", lambda: measure(lambda: s.done, sync, repeat=repeat),
             "Stream.done")
    rows.add("synchronize (idle stream)", lambda: measure(s.synchronize, sync, repeat=repeat),
             "Stream.synchronize()")

    foreign = cupy.cuda.Stream(non_blocking=True)  # kept alive: only its pointer is wrapped
    rows.add("wrap foreign stream (infer device)",
             lambda: measure(lambda: cupy.cuda.ExternalStream(foreign.ptr), repeat=repeat),
             "ExternalStream(ptr): CuPy does not infer the device (it takes the current one)")
    rows.add("current device", lambda: measure(lambda: cupy.cuda.Device().id, repeat=repeat),
             "cupy.cuda.Device().id")
    rows.add("current stream of an explicit device",
             lambda: measure(lambda: cupy.cuda.get_current_stream(device), repeat=repeat),
             "cupy.cuda.get_current_stream(device_id)")
    rows.na("primary context of a device", "CuPy has no public primary-context API")

    def scope():
        with s:
            pass
    rows.add("stream scope enter + exit", lambda: measure(scope, repeat=repeat), "with stream:")

    rows.na("launch_host_func (raw function)", "CuPy takes a Python callable only")
    counter = [0]

    def host_fn(arg):
        counter[0] += 1
    rows.add("launch_host_func (callable)",
             lambda: measure(lambda: s.launch_host_func(host_fn, None), sync, repeat=repeat),
             "Stream.launch_host_func(fn, arg)")

    def graph_launch():
        buf = cupy.zeros(1, dtype=cupy.int32)
        s.synchronize()
        s.begin_capture()
        # A memset node, as in custream's case.
        cupy.cuda.runtime.memsetAsync(buf.data.ptr, 7, 4, s.ptr)
        g = s.end_capture()
        g.upload(s)
        s.synchronize()
        return measure(lambda: g.launch(s), sync, repeat=repeat)
    rows.add("graph launch (1-node graph)", graph_launch,
             "cupy.cuda.graph.Graph.launch(stream) of a captured memsetAsync")

    def load_noop():
        try:  # the same PTX as custream's case, loaded by the driver (cuModuleLoad)
            return cupy.RawModule(path=_ptx_file()).get_function("noop")
        except Exception:  # noqa: BLE001 - fall back to NVRTC
            return cupy.RawKernel(r'extern "C" __global__ void noop() {}', "noop")
    try:
        noop = load_noop()
        no_kernel = ""
    except Exception as ex:  # noqa: BLE001
        noop = None
        no_kernel = f"{type(ex).__name__}: {ex}"

    if noop is not None:
        def kernel_launch():
            with s:  # CuPy launches kernels on the current stream
                return measure(lambda: noop((1,), (1,), ()), sync, repeat=repeat)
        rows.add("kernel launch (empty kernel, 1x1)", kernel_launch,
                 "RawModule(path=ptx).get_function(...)((1,), (1,), ()) inside `with stream:`")
        graphs = []

        def capture_1000():
            with s:
                s.begin_capture()
                for _ in range(GRAPH_KERNELS):
                    noop((1,), (1,), ())
                g = s.end_capture()
            g.launch(s)
            s.synchronize()
            graphs.append(g)
        rows.add("capture + instantiate + launch (1,000 kernels)",
                 lambda: measure(capture_1000, graphs.clear, number=2,
                                 repeat=max(21, repeat // 2)),
                 "begin_capture, 1000 launches, end_capture (instantiates), launch, synchronize")
    else:
        rows.na("kernel launch (empty kernel, 1x1)", "no kernel: " + no_kernel)
        rows.na("capture + instantiate + launch (1,000 kernels)", "no kernel: " + no_kernel)


_PTX_PATH = None


def _ptx_file():
    global _PTX_PATH
    if _PTX_PATH is None:
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(NOOP_PTX)
            _PTX_PATH = f.name
    return _PTX_PATH


def bench_torch(rows, device, repeat):
    import torch
    rows.version = torch.__version__
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    torch.cuda.set_device(device)
    s = torch.cuda.Stream(device=device)
    e = torch.cuda.Event(enable_timing=False)
    sync = s.synchronize
    e.record(s)

    rows.add("record (timing disabled)",
             lambda: measure(lambda: e.record(s), sync, repeat=repeat), "Event.record(stream)")
    rows.add("wait_event", lambda: measure(lambda: s.wait_event(e), sync, repeat=repeat),
             "Stream.wait_event(event)")
    rows.add("done (idle stream)", lambda: measure(s.query, sync, repeat=repeat),
             "Stream.query()")
    rows.add("synchronize (idle stream)", lambda: measure(s.synchronize, sync, repeat=repeat),
             "Stream.synchronize()")

    foreign = torch.cuda.Stream(device=device)
    rows.add("wrap foreign stream (infer device)",
             lambda: measure(lambda: torch.cuda.ExternalStream(foreign.cuda_stream),
                             repeat=repeat),
             "torch.cuda.ExternalStream(ptr): takes the current device, cannot verify it")
    rows.add("current device", lambda: measure(torch.cuda.current_device, repeat=repeat),
             "torch.cuda.current_device()")
    rows.add("current stream of an explicit device",
             lambda: measure(lambda: torch.cuda.current_stream(device), repeat=repeat),
             "torch.cuda.current_stream(device)")
    rows.na("primary context of a device", "PyTorch has no public primary-context API")

    def scope():
        with torch.cuda.stream(s):
            pass
    rows.add("stream scope enter + exit", lambda: measure(scope, repeat=repeat),
             "with torch.cuda.stream(s):")
    rows.na("launch_host_func (raw function)", "PyTorch has no host-function API")
    rows.na("launch_host_func (callable)", "PyTorch has no host-function API")

    def graph_launch():
        x = torch.zeros(1, dtype=torch.int32, device=f"cuda:{device}")
        x.fill_(7)  # warm-up outside the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            x.fill_(7)
        torch.cuda.synchronize()
        return measure(g.replay, torch.cuda.synchronize, repeat=repeat)
    rows.add("graph launch (1-node graph)", graph_launch,
             "CUDAGraph.replay() of a captured fill_, on the current stream")
    rows.na("kernel launch (empty kernel, 1x1)",
            "no idiomatic raw-kernel launch in PyTorch")

    def capture_1000():
        x = torch.zeros(1, dtype=torch.int32, device=f"cuda:{device}")
        graphs = []

        x.add_(1)  # warm-up outside the capture
        torch.cuda.synchronize()

        def once():
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                for _ in range(GRAPH_KERNELS):
                    x.add_(1)
            g.replay()
            torch.cuda.synchronize()
            graphs.append(g)
        return measure(once, graphs.clear, number=2, repeat=max(21, repeat // 2))
    rows.add("capture + instantiate + launch (1,000 kernels)", capture_1000,
             "torch.cuda.graph capture of 1000 add_ kernels (not empty kernels; the context "
             "manager also synchronizes and collects garbage), replay, synchronize")


def bench_cuda_core(rows, device, repeat):
    try:
        import cuda.core as cc
        cc.Device  # noqa: B018 - 1.x: the stable top-level API
    except (ImportError, AttributeError):
        import cuda.core.experimental as cc
    import cuda.core as pkg
    rows.version = getattr(pkg, "__version__", "?")
    dev = cc.Device(device)
    dev.set_current()
    s = dev.create_stream(options=cc.StreamOptions(nonblocking=True))
    e = s.record(options=cc.EventOptions(timing_enabled=False)) if _accepts(s.record, "options") \
        else s.record()
    sync = s.sync

    rows.add("record (timing disabled)", lambda: measure(lambda: s.record(e), sync, repeat=repeat),
             "Stream.record(event)")
    rows.add("wait_event", lambda: measure(lambda: s.wait(e), sync, repeat=repeat),
             "Stream.wait(event)")
    rows.add("done (idle stream)", lambda: measure(lambda: e.is_done, sync, repeat=repeat),
             "Event.is_done of the stream's last record (cuda.core has no Stream query)")
    rows.add("synchronize (idle stream)", lambda: measure(s.sync, sync, repeat=repeat),
             "Stream.sync()")
    foreign = dev.create_stream()  # kept alive: only its handle is wrapped
    handle = int(foreign.handle)
    rows.add("wrap foreign stream (infer device)",
             lambda: measure(lambda: cc.Stream.from_handle(handle).device, repeat=repeat),
             "Stream.from_handle(ptr).device (infers the device from the stream's context)")
    rows.add("current device", lambda: measure(lambda: cc.Device().device_id, repeat=repeat),
             "Device().device_id")
    rows.na("current stream of an explicit device", "cuda.core has no current stream")
    rows.add("primary context of a device", lambda: measure(lambda: dev.context, repeat=repeat),
             "Device.context")
    rows.na("stream scope enter + exit", "cuda.core has no current stream")
    rows.na("launch_host_func (raw function)", "takes a Python callable only")
    host_launch = getattr(cc, "host_launch", None)
    if host_launch is None:
        rows.na("launch_host_func (callable)", f"no host_launch in cuda.core {rows.version}")
    else:
        counter = [0]

        def host_fn(*_):
            counter[0] += 1
        rows.add("launch_host_func (callable)",
                 lambda: measure(lambda: host_launch(s, host_fn), sync, repeat=repeat),
                 "host_launch(stream, fn)")
    try:
        kernel = cc.ObjectCode.from_ptx(NOOP_PTX.encode()).get_kernel("noop")
    except Exception:  # noqa: BLE001 - compile the PTX through Program instead
        kernel = cc.Program(NOOP_PTX, code_type="ptx").compile("cubin").get_kernel("noop")
    config = cc.LaunchConfig(grid=1, block=1)
    rows.add("kernel launch (empty kernel, 1x1)",
             lambda: measure(lambda: cc.launch(s, config, kernel), sync, repeat=repeat),
             "launch(stream, LaunchConfig(grid=1, block=1), kernel)")

    def build(n):
        gb = s.create_graph_builder()
        gb.begin_building()
        for _ in range(n):
            cc.launch(gb, config, kernel)
        gb.end_building()
        return gb.complete()

    def graph_launch():
        g = build(1)
        g.upload(s)
        s.sync()
        return measure(lambda: g.launch(s), sync, repeat=repeat)
    rows.add("graph launch (1-node graph)", graph_launch,
             "Graph.launch(stream) of a GraphBuilder graph of one empty kernel")
    graphs = []

    def capture_1000():
        g = build(GRAPH_KERNELS)
        g.launch(s)
        s.sync()
        graphs.append(g)
    rows.add("capture + instantiate + launch (1,000 kernels)",
             lambda: measure(capture_1000, graphs.clear, number=2, repeat=max(21, repeat // 2)),
             "GraphBuilder: 1000 launches, end_building, complete (instantiates), launch, sync")


def bench_numba(rows, device, repeat):
    from numba import cuda
    try:
        from importlib.metadata import version
        rows.version = version("numba-cuda")
    except Exception:  # noqa: BLE001 - not installed as numba-cuda (numba's own cuda)
        import numba
        rows.version = "numba " + numba.__version__
    cuda.select_device(device)
    s = cuda.stream()
    e = cuda.event(timing=False)
    sync = s.synchronize
    e.record(stream=s)

    rows.add("record (timing disabled)", lambda: measure(lambda: e.record(stream=s), sync,
                                                         repeat=repeat),
             "Event.record(stream=s)")
    rows.add("wait_event", lambda: measure(lambda: e.wait(stream=s), sync, repeat=repeat),
             "Event.wait(stream=s)")
    rows.add("done (idle stream)", lambda: measure(e.query, sync, repeat=repeat),
             "Event.query() of the stream's last record (numba has no Stream query)")
    rows.add("synchronize (idle stream)", lambda: measure(s.synchronize, sync, repeat=repeat),
             "Stream.synchronize()")
    foreign = cuda.stream()
    handle = foreign.handle.value if hasattr(foreign.handle, "value") else int(foreign.handle)
    rows.add("wrap foreign stream (infer device)",
             lambda: measure(lambda: cuda.external_stream(handle), repeat=repeat),
             "cuda.external_stream(ptr): takes the current context, does not infer the device")
    rows.add("current device", lambda: measure(lambda: cuda.get_current_device().id,
                                               repeat=repeat),
             "cuda.get_current_device().id")
    rows.na("current stream of an explicit device", "numba has no current stream")
    rows.na("primary context of a device", "no public primary-context API")
    rows.na("stream scope enter + exit", "numba has no current stream")
    rows.na("launch_host_func (raw function)", "takes a Python callable only")
    counter = [0]

    def callback(stream, status, arg):
        counter[0] += 1
    rows.add("launch_host_func (callable)",
             lambda: measure(lambda: s.add_callback(callback, None), sync, repeat=repeat),
             "Stream.add_callback(fn, arg) (async_done() is the same callback)")

    @cuda.jit
    def noop():
        pass
    rows.add("kernel launch (empty kernel, 1x1)",
             lambda: measure(lambda: noop[1, 1, s](), sync, repeat=repeat),
             "@cuda.jit kernel: noop[1, 1, stream]()")
    rows.na("graph launch (1-node graph)", "numba has no graph API")
    rows.na("capture + instantiate + launch (1,000 kernels)", "numba has no graph API")


def _accepts(fn, name):
    import inspect
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", help="write the rows to this CSV file")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=25, help="timeit runs per operation (>= 21)")
    ap.add_argument("--only", choices=["cupy", "torch", "cuda.core", "numba-cuda"])
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be positive")

    rows = []
    print(f"peers.py: Python {sys.version.split()[0]}, device {args.device}, "
          f"medians of {args.repeat} timeit runs", flush=True)
    for library, bench in (("cupy", bench_cupy), ("torch", bench_torch),
                           ("cuda.core", bench_cuda_core), ("numba-cuda", bench_numba)):
        if args.only not in (None, library):
            continue
        lib_rows = Rows(library, "")
        try:
            bench(lib_rows, args.device, args.repeat)
        except Exception as e:  # noqa: BLE001 - a missing library or a failed setup
            why = f"{library} unusable here ({type(e).__name__}: {e})".replace("\n", " ")[:300]
            done = {r[0] for r in lib_rows.rows}
            for operation in OPERATIONS:
                if operation not in done:
                    lib_rows.na(operation, why)
        rows += lib_rows.rows
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["operation", "library", "version", "ns", "note"])
            w.writerows(rows)
        print(f"rows written to {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
