#!/usr/bin/env python3
"""Example 3: drive libcustream_embed.so (embed.cpp) from Python with a CuPy stream, a
PyTorch stream and a cuda.core stream, through ctypes, and check the results; then the other
way round: a custream stream taken by CuPy, PyTorch and cuda.core as an external stream, with
their work and custream's ordered on it.

    python3 examples/python_embed/run.py --lib <build>/examples/libcustream_embed.so

Prints one PASS / FAIL / SKIP line per check. Exit status: 0 when every check that ran
passed (and at least one ran), 1 on any FAIL, 77 when everything was skipped (no CuPy or
PyTorch, or no GPU). Needs a real GPU: CuPy and PyTorch use the CUDA runtime.
"""
import argparse
import ctypes
import os
import sys

N = 1 << 20
results = []


def report(status, what):
    results.append(status)
    print(f"{status}: {what}", flush=True)


def load(path):
    lib = ctypes.CDLL(path)
    lib.custream_embed_fill.argtypes = [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32,
        ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t]
    lib.custream_embed_fill.restype = ctypes.c_int
    lib.custream_embed_host_calls.argtypes = []
    lib.custream_embed_host_calls.restype = ctypes.c_ulonglong
    lib.custream_embed_describe.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.custream_embed_describe.restype = ctypes.c_int
    lib.custream_embed_stream_create.argtypes = [
        ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
    lib.custream_embed_stream_create.restype = ctypes.c_int
    lib.custream_embed_stream_destroy.argtypes = [ctypes.c_void_p]
    lib.custream_embed_stream_destroy.restype = ctypes.c_int
    return lib


class Embed:
    def __init__(self, lib):
        self.lib = lib

    def fill(self, stream_ptr, device_id, dst_ptr, count, value):
        """Returns the device custream used; raises RuntimeError with custream's message."""
        used = ctypes.c_int(-2)
        err = ctypes.create_string_buffer(1024)
        rc = self.lib.custream_embed_fill(stream_ptr, device_id, dst_ptr, count, value,
                                          ctypes.byref(used), err, len(err))
        if rc != 0:
            raise RuntimeError(err.value.decode(errors="replace"))
        return used.value

    def host_calls(self):
        return self.lib.custream_embed_host_calls()

    def stream_create(self, device_id):
        """A custream stream's handle (an int); raises RuntimeError with custream's message."""
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(1024)
        if self.lib.custream_embed_stream_create(device_id, ctypes.byref(handle), err,
                                                 len(err)) != 0:
            raise RuntimeError(err.value.decode(errors="replace"))
        return handle.value

    def stream_destroy(self, handle):
        if self.lib.custream_embed_stream_destroy(handle) != 0:
            raise RuntimeError(f"custream_embed_stream_destroy: {handle:#x} is not custream's")

    def describe(self, stream_ptr):
        out = ctypes.create_string_buffer(256)
        rc = self.lib.custream_embed_describe(stream_ptr, out, len(out))
        text = out.value.decode(errors="replace")
        if rc != 0:
            raise RuntimeError(text)
        return text


def check_cupy(embed):
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no GPU")
    except Exception as e:  # ImportError, or CUDARuntimeError without a GPU
        report("SKIP", f"CuPy: not usable ({type(e).__name__}: {e})")
        return
    device = cupy.cuda.Device().id

    # Eager: CuPy kernel, custream fill + host function, CuPy kernel, all on one stream.
    try:
        s = cupy.cuda.Stream(non_blocking=True)
        before = embed.host_calls()
        with s:
            a = cupy.ones(N, dtype=cupy.uint32)          # CuPy, on s
            used = embed.fill(s.ptr, -1, a.data.ptr, N, 7)  # custream, on s (device inferred)
            a += 1                                       # CuPy again, after custream's fill
        s.synchronize()
        print(f"  CuPy stream wrapped: {embed.describe(s.ptr)}")
        ok_values = bool((a == 8).all())
        calls = embed.host_calls() - before
        if used == device and ok_values and calls == 1:
            report("PASS", f"CuPy stream: device {used} inferred, fill ordered between CuPy "
                           f"kernels, host function ran once")
        else:
            report("FAIL", f"CuPy stream: inferred device {used} (CuPy: {device}), values "
                           f"{'ok' if ok_values else 'wrong: ' + str(cupy.unique(a))}, "
                           f"host function ran {calls} times (expected 1)")
    except Exception as e:
        report("FAIL", f"CuPy stream: {type(e).__name__}: {e}")

    # Captured by CuPy: custream's work becomes nodes of CuPy's graph; the host function runs
    # on every replay (custream attaches it to the capture graph as a user object).
    try:
        s = cupy.cuda.Stream(non_blocking=True)
        b = cupy.zeros(N, dtype=cupy.uint32)
        cupy.cuda.Device().synchronize()
        if not hasattr(s, "begin_capture"):
            report("SKIP", "CuPy capture: this CuPy has no Stream.begin_capture")
            return
        s.begin_capture()
        try:
            embed.fill(s.ptr, device, b.data.ptr, N, 5)
        finally:
            graph = s.end_capture()
        before = embed.host_calls()
        for _ in range(3):
            graph.launch(s)
        s.synchronize()
        calls = embed.host_calls() - before
        ok_values = bool((b == 5).all())
        del graph
        if ok_values and calls == 3:
            report("PASS", "CuPy capture: custream's fill and host function captured into "
                           "CuPy's graph, host function ran once per replay (3)")
        else:
            report("FAIL", f"CuPy capture: values {'ok' if ok_values else 'wrong'}, host "
                           f"function ran {calls} times in 3 replays")
    except Exception as e:
        report("FAIL", f"CuPy capture: {type(e).__name__}: {e}")


def check_torch(embed):
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
    except Exception as e:
        report("SKIP", f"PyTorch: not usable ({type(e).__name__}: {e})")
        return
    try:
        device = torch.device("cuda", torch.cuda.current_device())
        s = torch.cuda.Stream(device=device)
        t = torch.ones(N, dtype=torch.int32, device=device)  # on the current stream
        s.wait_stream(torch.cuda.current_stream(device))
        before = embed.host_calls()
        with torch.cuda.stream(s):
            # Explicit device: custream checks it against the one it infers.
            used = embed.fill(s.cuda_stream, device.index, t.data_ptr(), N, 7)
            t += 1
        s.synchronize()
        print(f"  PyTorch stream wrapped: {embed.describe(s.cuda_stream)}")
        ok_values = bool((t == 8).all().item())
        calls = embed.host_calls() - before
        if used == device.index and ok_values and calls == 1:
            report("PASS", f"PyTorch stream: device {used} checked, fill ordered between "
                           f"PyTorch kernels, host function ran once")
        else:
            report("FAIL", f"PyTorch stream: device {used} (PyTorch: {device.index}), values "
                           f"{'ok' if ok_values else 'wrong'}, host function ran {calls} times")
        # A wrong explicit device is refused with custream's message, not used.
        try:
            embed.fill(s.cuda_stream, device.index + 1, t.data_ptr(), N, 9)
            s.synchronize()
            report("FAIL", "PyTorch stream: a wrong device id was accepted")
        except RuntimeError as e:
            report("PASS", f"PyTorch stream: wrong device id refused ({str(e).splitlines()[0]})")
    except Exception as e:
        report("FAIL", f"PyTorch stream: {type(e).__name__}: {e}")


def check_cuda_core(embed):
    """A cuda.core stream wrapped by custream, and a custream stream taken by cuda.core through
    the __cuda_stream__ protocol; CuPy holds the memory and checks the values."""
    try:
        try:
            import cuda.core as cc
            cc.Device  # noqa: B018 - the 1.x top-level API
        except (ImportError, AttributeError):
            import cuda.core.experimental as cc
        import cupy
        dev = cc.Device()
        dev.set_current()
    except Exception as e:
        report("SKIP", f"cuda.core: not usable ({type(e).__name__}: {e})")
        return
    try:
        s = dev.create_stream()
        a = cupy.zeros(N, dtype=cupy.uint32)
        cupy.cuda.Device().synchronize()
        before = embed.host_calls()
        used = embed.fill(int(s.handle), -1, a.data.ptr, N, 3)  # custream, on cuda.core's stream
        s.sync()
        ok_values = bool((a == 3).all())
        calls = embed.host_calls() - before
        if used == dev.device_id and ok_values and calls == 1:
            report("PASS", f"cuda.core stream: device {used} inferred, fill done, host function "
                           f"ran once")
        else:
            report("FAIL", f"cuda.core stream: device {used} (cuda.core: {dev.device_id}), "
                           f"values {'ok' if ok_values else 'wrong'}, host function ran {calls}")
    except Exception as e:
        report("FAIL", f"cuda.core stream: {type(e).__name__}: {e}")


def check_custream_stream_taken(embed):
    """custream's stream handed out: CuPy, PyTorch and cuda.core each enqueue on it, between
    fills of custream's, and the values show the order."""
    try:
        import cupy
        device = cupy.cuda.Device().id
    except Exception as e:
        report("SKIP", f"custream stream taken by the peers: no CuPy ({type(e).__name__}: {e})")
        return
    handle = embed.stream_create(device)
    try:
        a = cupy.zeros(N, dtype=cupy.uint32)
        cupy.cuda.Device().synchronize()
        # CuPy: its ExternalStream of custream's stream.
        ext = cupy.cuda.ExternalStream(handle)
        embed.fill(handle, device, a.data.ptr, N, 10)
        with ext:
            a += 1                                   # after custream's fill: 11
        embed.fill(handle, device, a.data.ptr, N // 2, 20)  # after CuPy's add: half 20
        ext.synchronize()
        ok = bool((a[:N // 2] == 20).all()) and bool((a[N // 2:] == 11).all())
        report("PASS" if ok else "FAIL",
               "custream stream taken by CuPy (ExternalStream): custream fill, CuPy add, "
               f"custream fill in stream order: values {'ok' if ok else 'wrong'}")
    except Exception as e:
        report("FAIL", f"custream stream taken by CuPy: {type(e).__name__}: {e}")
    try:
        import torch
        t = torch.zeros(N, dtype=torch.int32, device=f"cuda:{device}")
        torch.cuda.synchronize()
        ext = torch.cuda.ExternalStream(handle, device=t.device)
        embed.fill(handle, device, t.data_ptr(), N, 4)
        with torch.cuda.stream(ext):
            t.mul_(3)                                # after custream's fill: 12
        ext.synchronize()
        ok = bool((t == 12).all().item())
        report("PASS" if ok else "FAIL",
               "custream stream taken by PyTorch (torch.cuda.ExternalStream): fill then mul_ in "
               f"stream order: values {'ok' if ok else 'wrong'}")
    except ImportError as e:
        report("SKIP", f"custream stream taken by PyTorch: {e}")
    except Exception as e:
        report("FAIL", f"custream stream taken by PyTorch: {type(e).__name__}: {e}")
    try:
        try:
            import cuda.core as cc
            cc.Device  # noqa: B018
        except (ImportError, AttributeError):
            import cuda.core.experimental as cc

        class CustreamStream:
            """What cuda.core takes: the __cuda_stream__ protocol (version 0, the handle)."""
            def __cuda_stream__(self):
                return (0, handle)

        dev = cc.Device(device)
        dev.set_current()
        s = dev.create_stream(CustreamStream())
        b = cupy.zeros(N, dtype=cupy.uint32)
        cupy.cuda.Device().synchronize()
        embed.fill(handle, device, b.data.ptr, N, 6)
        event = s.record()                           # cuda.core's event, after custream's fill
        event.sync()
        ok = bool((b == 6).all()) and event.is_done
        report("PASS" if ok else "FAIL",
               "custream stream taken by cuda.core (__cuda_stream__): its event recorded after "
               f"custream's fill, values {'ok' if ok else 'wrong'} when it is done")
    except ImportError as e:
        report("SKIP", f"custream stream taken by cuda.core: {e}")
    except Exception as e:
        report("FAIL", f"custream stream taken by cuda.core: {type(e).__name__}: {e}")
    finally:
        cupy.cuda.Device().synchronize()
        embed.stream_destroy(handle)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", default=os.path.join(here, "libcustream_embed.so"),
                        help="path of libcustream_embed.so (in <build>/examples)")
    args = parser.parse_args()
    if "CUSTREAM_LIBCUDA" in os.environ:
        report("SKIP", "CUSTREAM_LIBCUDA is set: custream would use another driver than "
                       "CuPy and PyTorch (this example needs a real GPU)")
        return 77
    try:
        embed = Embed(load(args.lib))
    except OSError as e:
        report("FAIL", f"cannot load {args.lib}: {e}")
        return 1
    check_cupy(embed)
    check_torch(embed)
    check_cuda_core(embed)
    check_custream_stream_taken(embed)
    if "FAIL" in results:
        return 1
    return 0 if "PASS" in results else 77


if __name__ == "__main__":
    sys.exit(main())
