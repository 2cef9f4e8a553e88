/* Controls of custream's CPU driver emulator (<build>/emulator/libcuda.so.1, installed as
 * <libdir>/custream/libcuda.so.1 with this header as <custream/emu_control.h>; guide:
 * docs/emulator.md).
 *
 * A test linked to the emulator (pkg-config custream-emulator, CMake custream::emulator)
 * calls these directly; one that loads it at run time looks them up with dlsym() on the
 * loaded driver. When dlsym(…, "custream_emu_reset") fails, the loaded library is a real
 * driver and emulator-only tests skip. Only cuda.h types are used. */
#ifndef CUSTREAM_EMU_CONTROL_H
#define CUSTREAM_EMU_CONTROL_H

#include <cuda.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The nth call from now (nth >= 1; 1 = the next call) of the driver entry point `name`
 * (base name as passed to cuGetProcAddress, e.g. "cuStreamCreate"; every ABI version of it
 * counts) fails with `result` and has no side effect. Several injections may be pending. */
void custream_emu_fail_call(const char* name, int nth, CUresult result);

/* The environment variable CUSTREAM_EMU_FAIL="name:nth:result[,…]" (result as a number, e.g.
 * "cuInit:1:999") makes the same injections from the start of the process, for the calls
 * made while the driver loads (cuInit, cuDeviceGetCount, cuDeviceGet). */

/* From now on every driver call (except cuGetErrorName, cuGetErrorString,
 * cuDriverGetVersion, cuGetProcAddress) fails with `result`, like a context after an
 * illegal address. CUDA_SUCCESS clears it. (Injections by custream_emu_fail_call still
 * apply to those four, except cuGetProcAddress, which never fails on purpose.) */
void custream_emu_set_sticky_error(CUresult result);

/* Clears pending injections and the sticky error. */
void custream_emu_reset(void);

/* Starts (on != 0) or stops counting the calls of every driver entry point, clearing the
 * counts either way. Each call counts under its base name, every ABI version together, also
 * a call that an injected fault or the sticky error fails. */
void custream_emu_count_calls(int on);

/* The calls of entry point `name` counted since custream_emu_count_calls(1). */
long custream_emu_call_count(const char* name);

/* Number of live user-visible objects: streams, events, graphs (user-owned), executable
 * graphs, user objects, modules, created and green contexts (not yet destroyed) and device
 * allocations. Destroying a created context destroys its streams, events and modules; a
 * destroyed green context's streams stay counted (they leak, as cuda.h says). */
long custream_emu_live_objects(void);

/* Number of user-object destructors that have run so far (process lifetime). */
long custream_emu_user_object_destructors_run(void);

/* Blocks until every stream has drained its queue and the callback thread is idle
 * (at most `timeout_ms`); returns 1 when idle, 0 on timeout. */
int custream_emu_wait_idle(int timeout_ms);

/* Blocks until every user-object destructor scheduled so far (they run on threads of their
 * own once the last reference is gone) has returned (at most `timeout_ms`); returns 1 when
 * none runs, 0 on timeout. After custream_emu_wait_idle, this makes "every host-function
 * payload a graph owned is freed" checkable without polling. */
int custream_emu_wait_destructors(int timeout_ms);

/* ---- Kernels ----
 * Modules and libraries (cuLibraryLoadData) load from PTX text (kernel names and parameter
 * sizes are read from its .entry directives) or from a cubin / fatbin image (any kernel name
 * resolves; parameter sizes come from the registration). A launch executes in stream order, also
 * from a graph, and runs the CPU implementation registered for the kernel's name at the time of the
 * launch; without one it does nothing (a no-op kernel). Device pointers are host addresses here, so
 * an implementation reads and writes device memory directly. */

/* One execution of a launched kernel, as an implementation sees it. */
typedef struct custream_emu_kernel_launch {
  const char* name;      /* the kernel's name */
  unsigned grid[3];      /* gridDimX, Y, Z */
  unsigned block[3];     /* blockDimX, Y, Z */
  unsigned shared_bytes; /* sharedMemBytes */
  void** params;         /* params[i] points at a copy of argument i, taken at launch */
  unsigned param_count;
  void* user; /* as registered */
} custream_emu_kernel_launch;

/* Runs once per launch (not per thread: it loops over grid x block itself if it needs to), on
 * the stream's worker thread, in stream order. Must not call the driver. */
typedef void (*custream_emu_kernel_fn)(const custream_emu_kernel_launch* launch);

/* Registers `fn` as the CPU implementation of every kernel named `name` (in any module or
 * library loaded before or after; a CUkernel launched as a CUfunction too).
 * param_sizes[0..param_count) gives the size in bytes of each parameter (param_count 0: none); with
 * param_sizes NULL and param_count 0 they come from the module's PTX (a launch of a kernel from a
 * cubin or fatbin then answers CUDA_ERROR_NOT_SUPPORTED, since its arguments cannot be copied). fn
 * NULL unregisters (launches are no-ops again). Launches already made keep what they saw. Returns
 * 0, or -1 when name is NULL or param_count is nonzero without param_sizes. */
int custream_emu_register_kernel(const char* name, custream_emu_kernel_fn fn, void* user,
                                 const size_t* param_sizes, unsigned param_count);

/* Launches of kernels named `name` executed so far (process lifetime; no-ops included). */
long custream_emu_kernel_runs(const char* name);

/* ---- Conditional graph nodes ----
 * The emulator's cudaGraphSetConditional: sets conditional handle `handle` of the graph launch
 * running on the calling thread to `value`. A kernel's CPU implementation calls it while the
 * launch runs (a kernel node of the graph, of a conditional body or of a child graph); the
 * conditional nodes after it read the new value (a WHILE node before its next iteration).
 * Returns 0, or -1 when no launch running on this thread has that handle (nothing is set).
 * The built-in CPU twin of custream's kernel custream_set_condition(handle, const unsigned*
 * value) calls it with *value; registering another implementation of that name replaces it. */
int custream_emu_set_conditional(CUgraphConditionalHandle handle, unsigned int value);

/* ---- What the driver keeps of green contexts ----
 * The driver keeps memory for every green context it creates and never gives it back, also
 * after cuGreenCtxDestroy (measured on an H100, driver 580: 4 MiB of device memory and about
 * 1.7 MB of host memory a context). The emulator keeps the count. */

/* cuGreenCtxCreate calls that made a green context so far (process lifetime). */
long custream_emu_green_contexts_created(void);

/* Device memory the driver keeps for the green contexts created so far: 4 MiB each
 * (process lifetime; what a real driver's cuMemGetInfo shows missing). */
long long custream_emu_green_context_bytes(void);

#ifdef __cplusplus
}
#endif

#endif /* CUSTREAM_EMU_CONTROL_H */

/* ---- Device faults ----
 * custream_emu_set_sticky_error(result) with result != CUDA_SUCCESS is a device fault, as a
 * kernel's illegal address on a GPU: besides failing every later call, it kills the stream
 * work of every context that has not started yet. That work never runs (kernels, memsets,
 * copies, memory operations, event records, cuLaunchHostFunc host functions); a
 * cuStreamAddCallback callback is still called once, with `result` as its status (cuda.h).
 * Synchronizing calls that were waiting answer `result`. Work already running finishes. A
 * kernel's CPU implementation (custream_emu_kernel_fn) may call it to fault at its place in
 * stream order. Clearing it (CUDA_SUCCESS, custream_emu_reset) lets work reached afterwards
 * run again, unlike a real context, which stays dead.
 *
 * Frees (cuMemFree, cuMemFreeHost) wait for the work queued so far on every stream of every
 * context, including streams destroyed while their work was still queued. */
