// The one table of CUDA driver entry points custream uses. Design: docs/design/loading.md,
// invariants 4-6 (the table) and 7 (names from the table).
//
// It lives with the public headers because the hot paths (Stream::record, done, …) are inline
// calls through it. This is the one place in custream that uses a macro: a template cannot paste a
// symbol name and a version into a type name, and the X-list keeps the table in one place.
#pragma once

#include "custream/detail/cuda.hpp"

/// X(field, symbol, version, required)
///   field:      member name in detail::DriverApi
///   symbol:     name passed to cuGetProcAddress
///   version:    ABI version requested (selects PFN_<symbol>_v<version>)
///   required:   true when custream cannot load without it
/// The ABI version is also the first driver version that has the entry (error messages).
/// An entry is required only when the library itself calls it; entries only tests, tools or
/// benchmarks call are optional, so a driver without them still loads.
#define CUSTREAM_DRIVER_ENTRIES(X)                                                      \
  X(cuInit, cuInit, 2000, true)                                                         \
  X(cuDriverGetVersion, cuDriverGetVersion, 2020, true)                                 \
  X(cuGetErrorName, cuGetErrorName, 6000, false)                                        \
  X(cuGetErrorString, cuGetErrorString, 6000, true)                                     \
  X(cuDeviceGetCount, cuDeviceGetCount, 2000, true)                                     \
  X(cuDeviceGet, cuDeviceGet, 2000, true)                                               \
  X(cuDeviceGetName, cuDeviceGetName, 2000, true)                                       \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, true)                             \
  X(cuDeviceTotalMem, cuDeviceTotalMem, 3020, true)                                     \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, true)                     \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 11000, false)                 \
  X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, true)                 \
  X(cuCtxCreate, cuCtxCreate, 3020, false)                                              \
  X(cuCtxDestroy, cuCtxDestroy, 4000, false)                                            \
  X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, true)                                       \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, true)                                       \
  X(cuCtxGetDevice, cuCtxGetDevice, 2000, true)                                         \
  X(cuCtxGetDevice_v2, cuCtxGetDevice, 13000, false)                                    \
  X(cuCtxPushCurrent, cuCtxPushCurrent, 4000, false)                                    \
  X(cuCtxPopCurrent, cuCtxPopCurrent, 4000, false)                                      \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000, false)                                    \
  X(cuCtxRecordEvent, cuCtxRecordEvent, 12050, false)                                   \
  X(cuCtxWaitEvent, cuCtxWaitEvent, 12050, false)                                       \
  X(cuCtxGetDevResource, cuCtxGetDevResource, 12040, false)                             \
  X(cuDeviceGetDevResource, cuDeviceGetDevResource, 12040, false)                       \
  X(cuDevSmResourceSplitByCount, cuDevSmResourceSplitByCount, 12040, false)             \
  X(cuDevResourceGenerateDesc, cuDevResourceGenerateDesc, 12040, false)                 \
  X(cuGreenCtxCreate, cuGreenCtxCreate, 12040, false)                                   \
  X(cuGreenCtxDestroy, cuGreenCtxDestroy, 12040, false)                                 \
  X(cuCtxFromGreenCtx, cuCtxFromGreenCtx, 12040, false)                                 \
  X(cuGreenCtxRecordEvent, cuGreenCtxRecordEvent, 12040, false)                         \
  X(cuGreenCtxWaitEvent, cuGreenCtxWaitEvent, 12040, false)                             \
  X(cuGreenCtxStreamCreate, cuGreenCtxStreamCreate, 12050, false)                       \
  X(cuStreamCreate, cuStreamCreate, 2000, false)                                        \
  X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050, true)                 \
  X(cuStreamDestroy, cuStreamDestroy, 4000, true)                                       \
  X(cuStreamGetCtx, cuStreamGetCtx, 9020, true)                                         \
  X(cuStreamGetCtx_v2, cuStreamGetCtx, 12050, false)                                    \
  X(cuStreamGetDevice, cuStreamGetDevice, 12080, false)                                 \
  X(cuStreamGetPriority, cuStreamGetPriority, 5050, true)                               \
  X(cuStreamGetFlags, cuStreamGetFlags, 5050, true)                                     \
  X(cuStreamGetId, cuStreamGetId, 12000, false)                                         \
  X(cuStreamQuery, cuStreamQuery, 2000, true)                                           \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000, true)                               \
  X(cuStreamWaitEvent, cuStreamWaitEvent, 3020, true)                                   \
  X(cuStreamAddCallback, cuStreamAddCallback, 5000, true)                               \
  X(cuLaunchHostFunc, cuLaunchHostFunc, 10000, true)                                    \
  X(cuStreamBeginCapture, cuStreamBeginCapture, 10010, true)                            \
  X(cuStreamEndCapture, cuStreamEndCapture, 10000, true)                                \
  X(cuStreamIsCapturing, cuStreamIsCapturing, 10000, true)                              \
  X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo, 11030, true)                        \
  X(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 10010, false) \
  X(cuEventCreate, cuEventCreate, 2000, true)                                           \
  X(cuEventDestroy, cuEventDestroy, 4000, true)                                         \
  X(cuEventRecord, cuEventRecord, 2000, true)                                           \
  X(cuEventQuery, cuEventQuery, 2000, true)                                             \
  X(cuEventSynchronize, cuEventSynchronize, 2000, true)                                 \
  X(cuEventElapsedTime, cuEventElapsedTime, 2000, true)                                 \
  X(cuIpcGetEventHandle, cuIpcGetEventHandle, 4010, false)                              \
  X(cuIpcOpenEventHandle, cuIpcOpenEventHandle, 4010, false)                            \
  X(cuMemAlloc, cuMemAlloc, 3020, true)                                                 \
  X(cuMemFree, cuMemFree, 3020, true)                                                   \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020, false)                                     \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020, false)                                       \
  X(cuMemsetD8Async, cuMemsetD8Async, 3020, true)                                       \
  X(cuMemsetD32Async, cuMemsetD32Async, 3020, true)                                     \
  X(cuMemcpyAsync, cuMemcpyAsync, 4000, true)                                           \
  X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync, 3020, true)                                   \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync, 3020, true)                                   \
  X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync, 3020, false)                                  \
  X(cuMemHostAlloc, cuMemHostAlloc, 2020, false)                                        \
  X(cuMemFreeHost, cuMemFreeHost, 2000, false)                                          \
  X(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer, 3020, false)                  \
  X(cuStreamWriteValue32, cuStreamWriteValue32, 11070, false)                           \
  X(cuStreamWriteValue64, cuStreamWriteValue64, 11070, false)                           \
  X(cuStreamWaitValue32, cuStreamWaitValue32, 11070, false)                             \
  X(cuStreamWaitValue64, cuStreamWaitValue64, 11070, false)                             \
  X(cuGraphCreate, cuGraphCreate, 10000, false)                                         \
  X(cuGraphDestroy, cuGraphDestroy, 10000, true)                                        \
  X(cuGraphGetNodes, cuGraphGetNodes, 10000, true)                                      \
  X(cuGraphNodeGetType, cuGraphNodeGetType, 10000, true)                                \
  X(cuGraphHostNodeGetParams, cuGraphHostNodeGetParams, 10000, true)                    \
  X(cuGraphHostNodeSetParams, cuGraphHostNodeSetParams, 10000, true)                    \
  X(cuGraphDebugDotPrint, cuGraphDebugDotPrint, 11030, false)                           \
  X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, true)            \
  X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, true)                                \
  X(cuGraphUpload, cuGraphUpload, 11010, true)                                          \
  X(cuGraphLaunch, cuGraphLaunch, 10000, true)                                          \
  X(cuGraphExecUpdate, cuGraphExecUpdate, 12000, true)                                  \
  X(cuUserObjectCreate, cuUserObjectCreate, 11030, true)                                \
  X(cuUserObjectRelease, cuUserObjectRelease, 11030, true)                              \
  X(cuGraphRetainUserObject, cuGraphRetainUserObject, 11030, true)                      \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010, true)                                 \
  X(cuModuleUnload, cuModuleUnload, 2000, true)                                         \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000, true)                               \
  X(cuLaunchKernel, cuLaunchKernel, 4000, true)                                         \
  X(cuLibraryLoadData, cuLibraryLoadData, 12000, false)                                 \
  X(cuLibraryUnload, cuLibraryUnload, 12000, false)                                     \
  X(cuLibraryGetKernel, cuLibraryGetKernel, 12000, false)                               \
  X(cuLibraryGetKernelCount, cuLibraryGetKernelCount, 12040, false)                     \
  X(cuLibraryEnumerateKernels, cuLibraryEnumerateKernels, 12040, false)                 \
  X(cuKernelGetName, cuKernelGetName, 12030, false)                                     \
  X(cuKernelGetFunction, cuKernelGetFunction, 12000, false)                             \
  X(cuLibraryGetGlobal, cuLibraryGetGlobal, 12000, false)                               \
  X(cuLibraryGetManaged, cuLibraryGetManaged, 12000, false)                             \
  X(cuKernelGetAttribute, cuKernelGetAttribute, 12000, false)                           \
  X(cuKernelSetAttribute, cuKernelSetAttribute, 12000, false)                           \
  X(cuKernelGetParamInfo, cuKernelGetParamInfo, 12040, false)                           \
  X(cuFuncGetParamInfo, cuFuncGetParamInfo, 12040, false)                               \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, false)                                   \
  X(cuFuncGetAttribute, cuFuncGetAttribute, 2020, false)                                \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor,                                        \
    cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, false)                           \
  X(cuOccupancyMaxActiveClusters, cuOccupancyMaxActiveClusters, 11070, false)           \
  /* graphs as programs (GraphBuilder): every node through cuGraphAddNode, CUDA 12.3 */ \
  X(cuGraphAddNode, cuGraphAddNode, 12030, false)                                       \
  X(cuGraphAddDependencies, cuGraphAddDependencies, 10000, false)                       \
  X(cuGraphKernelNodeSetAttribute, cuGraphKernelNodeSetAttribute, 11000, false)         \
  /* per-node updates (Graph::update_kernel, set_host, set_enabled, …; lib/graph/) */   \
  X(cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams, 12000, false)       \
  X(cuGraphExecMemsetNodeSetParams, cuGraphExecMemsetNodeSetParams, 10020, false)       \
  X(cuGraphExecMemcpyNodeSetParams, cuGraphExecMemcpyNodeSetParams, 10020, false)       \
  X(cuGraphExecHostNodeSetParams, cuGraphExecHostNodeSetParams, 10020, false)           \
  X(cuGraphExecChildGraphNodeSetParams, cuGraphExecChildGraphNodeSetParams, 11010, false) \
  X(cuGraphNodeSetEnabled, cuGraphNodeSetEnabled, 11060, false)                         \
  X(cuGraphNodeGetEnabled, cuGraphNodeGetEnabled, 11060, false)                         \
  X(cuGraphKernelNodeGetParams, cuGraphKernelNodeGetParams, 12000, false)               \
  X(cuGraphReleaseUserObject, cuGraphReleaseUserObject, 11030, false)                   \
  /* typed memory */                                                                    \
  X(cuMemsetD16Async, cuMemsetD16Async, 3020, false)                                    \
  X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, false)                 \
  X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020, false)                         \
  X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020, false)                         \
  X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, false)                                     \
  /* conditional nodes (ABI 12.3: PFN_..._v12030; docs/design/graphs.md) */             \
  X(cuGraphConditionalHandleCreate, cuGraphConditionalHandleCreate, 12030, false)       \
  X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, 12030, false)             \
  X(cuGraphChildGraphNodeGetGraph, cuGraphChildGraphNodeGetGraph, 10000, false)         \
  X(cuGraphNodeGetDependencies, cuGraphNodeGetDependencies, 10000, false)

namespace custream::detail {

/// Function pointers for every entry in CUSTREAM_DRIVER_ENTRIES, each of its exact PFN type.
struct DriverApi {
#define CUSTREAM_DRIVER_FIELD(field, symbol, version, required) \
  PFN_##symbol##_v##version field = nullptr;
  CUSTREAM_DRIVER_ENTRIES(CUSTREAM_DRIVER_FIELD)
#undef CUSTREAM_DRIVER_FIELD
};

/// What the table says of one entry, by its field: `EntryInfo<&DriverApi::cuStreamQuery>::name`
/// is "cuStreamQuery". The call layer (custream/detail/call.hpp) names a failing call from it,
/// so no call site spells the name again.
template <auto Field>
struct EntryInfo;
#define CUSTREAM_DRIVER_INFO(field_, symbol, version_, required_) \
  template <>                                                     \
  struct EntryInfo<&DriverApi::field_> {                          \
    static constexpr const char* name = #symbol;                  \
    static constexpr const char* field = #field_;                 \
    static constexpr int version = version_;                      \
    static constexpr bool required = required_;                   \
  };
CUSTREAM_DRIVER_ENTRIES(CUSTREAM_DRIVER_INFO)
#undef CUSTREAM_DRIVER_INFO

/// One row of the table, for the loader and for tests.
struct DriverEntry {
  const char* field;
  const char* symbol;
  int version;
  bool required;
};

}  // namespace custream::detail
