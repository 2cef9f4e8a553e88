#!/usr/bin/env python3
"""How soon CuPy and PyTorch tell a Python program that GPU work is done, measured the way
`custream-completion-latency` measures custream (docs/performance.md, "Completion
notifications").

A kernel waits for a host "go", then stores to host-mapped memory as its last act; a thread
spinning on that word timestamps the store (the reference); the notification timestamps itself;
latency = notification - reference. The ways, as a user of each library writes them:
  - CuPy: `Stream.launch_host_func(callback, arg)` (the driver's host-function thread, then the
    GIL);
  - PyTorch: a thread blocked in `torch.cuda.Event.synchronize()` on an event recorded after the
    kernel.

    python3 bench/peers_completion.py [--samples N] [--csv FILE] [--device N]

CSV: "way,us", one row per sample (bench/plot_latency.py draws it beside custream's).
"""

import argparse
import csv
import ctypes
import os
import sys
import tempfile
import threading
import time

# The latency kernel of custream-completion-latency (bench/completion_latency.cpp).
GATED_PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry gated_store(.param .u64 go, .param .u64 flag, .param .u32 value)
{
  .reg .pred %p;
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [go];
  ld.param.u64 %rd2, [flag];
  ld.param.u32 %r1, [value];
WAIT:
  ld.volatile.global.u32 %r2, [%rd1];
  setp.ne.u32 %p, %r2, %r1;
  @%p bra WAIT;
  st.volatile.global.u32 [%rd2], %r1;
  membar.sys;
  ret;
}
"""


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


def sample(launch, notify, samples, go, flag):
    """One latency (µs) per sample: launch(value) enqueues the kernel, notify(done) arranges
    for done(t_ns) when its work is done."""
    out = []
    for i in range(1, samples + 1):
        told = []
        got = threading.Event()

        def done(t):
            told.append(t)
            got.set()

        reference = []
        spinning = threading.Event()

        def spin(value=i):
            # The spinner itself says "go" and keeps the GIL until it sees the store (Python
            # takes it from a running thread only after its switch interval, 5 ms, far longer
            # than the kernel), so that no thread told of the completion stamps first.
            spinning.wait()
            go[0] = value
            while flag[0] != value:
                pass
            reference.append(time.perf_counter_ns())

        launch(i)
        notify(done)
        spinner = threading.Thread(target=spin)
        spinner.start()
        time.sleep(0.0003)  # waiters are waiting
        spinning.set()
        spinner.join()
        if not got.wait(10) or not reference:
            raise RuntimeError(f"sample {i}: no notification within 10 s")
        out.append((told[0] - reference[0]) / 1000.0)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--csv")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    rows = []

    try:
        import cupy
    except Exception as e:  # noqa: BLE001 - any import failure means "not measured"
        print(f"CuPy: n/a ({e})")
        cupy = None
    if cupy is not None:
        with cupy.cuda.Device(args.device):
            with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
                f.write(GATED_PTX)
            kernel = cupy.RawModule(path=f.name).get_function("gated_store")  # loads it
            os.unlink(f.name)
            mapped = 3  # cudaHostAllocPortable | cudaHostAllocMapped
            go_ptr = cupy.cuda.runtime.hostAlloc(64, mapped)
            flag_ptr = cupy.cuda.runtime.hostAlloc(64, mapped)
            go = (ctypes.c_uint32 * 16).from_address(go_ptr)
            flag = (ctypes.c_uint32 * 16).from_address(flag_ptr)
            go[0] = flag[0] = 0
            stream = cupy.cuda.Stream(non_blocking=True)

            def launch(value):
                kernel((1,), (1,), (go_ptr, flag_ptr, cupy.uint32(value)), stream=stream)

            def host_func(done):
                stream.launch_host_func(lambda _: done(time.perf_counter_ns()), None)

            us = sample(launch, host_func, args.samples, go, flag)
            stream.synchronize()
            rows.append((f"CuPy {cupy.__version__} Stream.launch_host_func", us))
            cupy.cuda.runtime.freeHost(go_ptr)
            cupy.cuda.runtime.freeHost(flag_ptr)

    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print(f"PyTorch: n/a ({e})")
        torch = None
    if torch is not None and torch.cuda.is_available() and cupy is None:
        print("PyTorch: n/a (the kernel is loaded through CuPy, which is missing)")
    elif torch is not None and torch.cuda.is_available():
        import cupy as cp  # the kernel is loaded through CuPy; PyTorch has no PTX loader

        with cp.cuda.Device(args.device):
            with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
                f.write(GATED_PTX)
            kernel = cp.RawModule(path=f.name).get_function("gated_store")
            os.unlink(f.name)
            go_t = torch.zeros(16, dtype=torch.int32).pin_memory()
            flag_t = torch.zeros(16, dtype=torch.int32).pin_memory()
            go = (ctypes.c_uint32 * 16).from_address(go_t.data_ptr())
            flag = (ctypes.c_uint32 * 16).from_address(flag_t.data_ptr())
            stream = torch.cuda.Stream(device=args.device)
            cp_stream = cp.cuda.ExternalStream(stream.cuda_stream, args.device)  # noqa: the 14.x name

            def launch(value):
                kernel((1,), (1,), (go_t.data_ptr(), flag_t.data_ptr(), cp.uint32(value)),
                       stream=cp_stream)

            def event_sync(done):
                ev = torch.cuda.Event()
                ev.record(stream)

                def wait():
                    ev.synchronize()
                    done(time.perf_counter_ns())

                threading.Thread(target=wait, daemon=True).start()

            us = sample(launch, event_sync, args.samples, go, flag)
            stream.synchronize()
            rows.append((f"PyTorch {torch.__version__} Event.synchronize in a thread", us))

    for way, us in rows:
        print(f"  {way:<56} p50 {percentile(us, 0.5):7.2f} us   p99 {percentile(us, 0.99):7.2f}"
              f" us   max {max(us):8.2f} us   ({len(us)} samples)")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["way", "us"])
            for way, us in rows:
                for v in us:
                    w.writerow([way, f"{v:.3f}"])
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
