#!/usr/bin/env bash
# Runs examples 1-5 on a real GPU and prints one PASS / FAIL / SKIP line each, then a summary.
#
#   bash examples/run_gpu.sh [build-dir]      (default: build-examples in the source tree)
#
# A build dir without build.ninja is set up first (examples only: no tests, tools or bench);
# an existing one gets -Dexamples=enabled. Needs the NVIDIA driver; libcudart / libnvrtc are
# found by dlopen (their usual names, then /usr/local/cuda/lib64; or set CUSTREAM_LIBCUDART /
# CUSTREAM_NVRTC to a path); example 3 needs CuPy and PyTorch in $PYTHON (default python3);
# example 5 needs NCCL (libnccl.so.2, or $CUSTREAM_NCCL; else the copy of the nvidia-nccl-cu13
# package in $PYTHON). Exit status 0 only when all five pass.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-examples}
python=${PYTHON:-python3}

if [ ! -f "$build/build.ninja" ]; then
  opts=(-Dexamples=enabled -Dtests=disabled -Dbench=false)
  grep -q "option('tools'" "$src/meson_options.txt" && opts+=(-Dtools=disabled)
  meson setup "$build" "$src" "${opts[@]}" >/dev/null || { echo "FAIL: meson setup $build"; exit 1; }
else
  meson configure "$build" -Dexamples=enabled >/dev/null || { echo "FAIL: meson configure"; exit 1; }
fi
ninja -C "$build" examples/custream-example-runtime-stream examples/custream-example-nvrtc-jit \
  examples/custream-example-vector-add examples/custream-example-device-loop \
  examples/custream-example-completion-epoll examples/custream-example-nccl-allreduce \
  examples/libcustream_embed.so >/dev/null || { echo "FAIL: building the examples"; exit 1; }

# The real driver, not custream's emulator.
unset CUSTREAM_LIBCUDA
passed=0 failed=0 skipped=0
run() {  # name, command…
  local name=$1 rc=0; shift
  echo "== $name"
  "$@" 2>&1 | sed 's/^/   /'
  rc=${PIPESTATUS[0]}
  case $rc in
    0) echo "PASS: $name"; passed=$((passed + 1)) ;;
    77) echo "SKIP: $name (a prerequisite is missing: see above)"; skipped=$((skipped + 1)) ;;
    *) echo "FAIL: $name (exit $rc)"; failed=$((failed + 1)) ;;
  esac
}
run "example 1: runtime-API stream wrapped, captured, replayed" \
  "$build/examples/custream-example-runtime-stream"
# libnvrtc opens libnvrtc-builtins by name: give it the toolkit's directory (this command only).
nvrtc_env=()
[ -d /usr/local/cuda/lib64 ] &&
  nvrtc_env=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64")
run "example 2: NVRTC JIT kernel loaded, launched, captured" \
  "${nvrtc_env[@]}" "$build/examples/custream-example-nvrtc-jit"
run "example 6: vector add (Program, DeviceArray, every device)" \
  "${nvrtc_env[@]}" "$build/examples/custream-example-vector-add"
run "example 7: a data-dependent loop on the device in one graph launch" \
  "$build/examples/custream-example-device-loop"
run "example 4: an epoll loop told when GPU work is done" \
  "$build/examples/custream-example-completion-epoll"
# NCCL: $CUSTREAM_NCCL, else the system's, else the Python package's copy.
if [ -z "${CUSTREAM_NCCL:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  CUSTREAM_NCCL=$("$python" -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null) || true
  export CUSTREAM_NCCL
fi
run "example 5: NCCL all-reduce on custream streams, eager and captured" \
  "$build/examples/custream-example-nccl-allreduce"
run "example 3: Python embedding with CuPy and PyTorch streams" \
  "$python" "$src/examples/python_embed/run.py" --lib "$build/examples/libcustream_embed.so"
echo "run_gpu: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$skipped" -eq 0 ]
