// What a compile-cache hit saves (docs/design/jit.md): in one process, a full NVRTC compilation
// of a realistic kernel file (~200 lines: templates, a reduction, a tiled matrix product, a
// stencil, a histogram, instantiated through name expressions) against the same Program served
// from the compile cache on disk (a new Program each time: key, read, checks, decode). Needs
// NVRTC, no driver and no GPU: it measures the CPU. Run by hand; not installed.
//   custream-jit-bench [compilations=3] [hits=200]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <custream/program.hpp>
#include <string>
#include <vector>

namespace {

const char* const kHeader = R"(#pragma once
namespace jit {
template <typename T> struct Sum { __device__ T operator()(T a, T b) const { return a + b; } };
template <typename T> struct Max { __device__ T operator()(T a, T b) const { return a > b ? a : b; } };
template <typename T> __device__ __forceinline__ T warp_reduce(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}
template <typename T, typename Op> __device__ T block_reduce(T v, Op op, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? shared[lane] : T(0);
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  }
  return v;
}
}  // namespace jit
)";

const char* const kSource = R"(#include "jit_ops.cuh"

// Element-wise: y = a * x + b * y, for any arithmetic type.
template <typename T>
__global__ void axpby(int n, T a, const T* __restrict__ x, T b, T* __restrict__ y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = a * x[i] + b * y[i];
  }
}

// A block-wide reduction with a configurable operator; one partial result per block.
template <typename T, typename Op, int Block>
__global__ void reduce(const T* __restrict__ in, T* __restrict__ partial, int n) {
  __shared__ T shared[Block / 32];
  T v = T(0);
  for (int i = blockIdx.x * Block + threadIdx.x; i < n; i += gridDim.x * Block) v = Op()(v, in[i]);
  v = jit::block_reduce(v, Op(), shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

// A tiled matrix product C = alpha * A * B + beta * C (row-major).
template <typename T, int Tile>
__global__ void gemm(int m, int n, int k, T alpha, const T* __restrict__ a,
                     const T* __restrict__ b, T beta, T* __restrict__ c) {
  __shared__ T as[Tile][Tile + 1];
  __shared__ T bs[Tile][Tile + 1];
  const int row = blockIdx.y * Tile + threadIdx.y;
  const int col = blockIdx.x * Tile + threadIdx.x;
  T acc = T(0);
  for (int t = 0; t < (k + Tile - 1) / Tile; ++t) {
    const int ac = t * Tile + threadIdx.x, br = t * Tile + threadIdx.y;
    as[threadIdx.y][threadIdx.x] = row < m && ac < k ? a[row * k + ac] : T(0);
    bs[threadIdx.y][threadIdx.x] = br < k && col < n ? b[br * n + col] : T(0);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < Tile; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = alpha * acc + beta * c[row * n + col];
}

// A 5-point stencil on a 2-D grid with a halo of one, through shared memory.
template <typename T, int BX, int BY>
__global__ void stencil(int nx, int ny, const T* __restrict__ in, T* __restrict__ out, T w0, T w1) {
  __shared__ T tile[BY + 2][BX + 2];
  const int x = blockIdx.x * BX + threadIdx.x, y = blockIdx.y * BY + threadIdx.y;
  const int tx = threadIdx.x + 1, ty = threadIdx.y + 1;
  auto at = [&](int i, int j) -> T {
    i = i < 0 ? 0 : (i >= nx ? nx - 1 : i);
    j = j < 0 ? 0 : (j >= ny ? ny - 1 : j);
    return in[j * nx + i];
  };
  tile[ty][tx] = at(x, y);
  if (threadIdx.x == 0) tile[ty][0] = at(x - 1, y);
  if (threadIdx.x == BX - 1) tile[ty][BX + 1] = at(x + 1, y);
  if (threadIdx.y == 0) tile[0][tx] = at(x, y - 1);
  if (threadIdx.y == BY - 1) tile[BY + 1][tx] = at(x, y + 1);
  __syncthreads();
  if (x < nx && y < ny) {
    out[y * nx + x] = w0 * tile[ty][tx] +
                      w1 * (tile[ty][tx - 1] + tile[ty][tx + 1] + tile[ty - 1][tx] + tile[ty + 1][tx]);
  }
}

// A histogram with per-block shared bins merged with atomics.
template <int Bins>
__global__ void histogram(const unsigned char* __restrict__ data, int n, unsigned* __restrict__ bins) {
  __shared__ unsigned local[Bins];
  for (int i = threadIdx.x; i < Bins; i += blockDim.x) local[i] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&local[data[i] % Bins], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < Bins; i += blockDim.x) atomicAdd(&bins[i], local[i]);
}

// Softmax over rows, one block per row: max, sum of exponentials, scale.
template <typename T, int Block>
__global__ void softmax(const T* __restrict__ in, T* __restrict__ out, int cols) {
  __shared__ T shared[Block / 32];
  const T* row = in + blockIdx.x * cols;
  T* dst = out + blockIdx.x * cols;
  T m = -1e30f;
  for (int i = threadIdx.x; i < cols; i += Block) m = row[i] > m ? row[i] : m;
  m = jit::block_reduce(m, jit::Max<T>(), shared);
  __shared__ T row_max, row_sum;
  if (threadIdx.x == 0) row_max = m;
  __syncthreads();
  T s = T(0);
  for (int i = threadIdx.x; i < cols; i += Block) s += exp(row[i] - row_max);
  s = jit::block_reduce(s, jit::Sum<T>(), shared);
  if (threadIdx.x == 0) row_sum = s;
  __syncthreads();
  for (int i = threadIdx.x; i < cols; i += Block) dst[i] = exp(row[i] - row_max) / row_sum;
}

// A prefix sum within each block (Hillis-Steele), writing each block's total.
template <typename T, int Block>
__global__ void scan(const T* __restrict__ in, T* __restrict__ out, T* __restrict__ totals, int n) {
  __shared__ T buffer[2][Block];
  const int i = blockIdx.x * Block + threadIdx.x;
  int ping = 0;
  buffer[0][threadIdx.x] = i < n ? in[i] : T(0);
  __syncthreads();
  for (int offset = 1; offset < Block; offset *= 2) {
    const int pong = 1 - ping;
    buffer[pong][threadIdx.x] = buffer[ping][threadIdx.x] +
                                (threadIdx.x >= offset ? buffer[ping][threadIdx.x - offset] : T(0));
    ping = pong;
    __syncthreads();
  }
  if (i < n) out[i] = buffer[ping][threadIdx.x];
  if (threadIdx.x == Block - 1) totals[blockIdx.x] = buffer[ping][threadIdx.x];
}

// Transpose through shared memory without bank conflicts.
template <typename T, int Tile>
__global__ void transpose(int rows, int cols, const T* __restrict__ in, T* __restrict__ out) {
  __shared__ T tile[Tile][Tile + 1];
  int x = blockIdx.x * Tile + threadIdx.x, y = blockIdx.y * Tile + threadIdx.y;
  if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
  __syncthreads();
  x = blockIdx.y * Tile + threadIdx.x;
  y = blockIdx.x * Tile + threadIdx.y;
  if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];
}
)";

const char* const kExpressions[] = {"axpby<float>",
                                    "axpby<double>",
                                    "reduce<float, jit::Sum<float>, 256>",
                                    "reduce<int, jit::Max<int>, 128>",
                                    "gemm<float, 16>",
                                    "gemm<double, 16>",
                                    "stencil<float, 32, 8>",
                                    "histogram<256>",
                                    "softmax<float, 256>",
                                    "scan<int, 256>",
                                    "transpose<float, 32>"};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

custream::Program make(const custream::CompileCache& cache) {
  custream::Program p(kSource, "jit_kernels.cu");
  p.add_header("jit_ops.cuh", kHeader).cache(cache);
  for (const char* e : kExpressions) p.add_name_expression(e);
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

// A count argument: a whole number >= 1, else -1.
int count_argument(const char* text) {
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && n >= 1 && n <= 1000000 ? static_cast<int>(n) : -1;
}

int main(int argc, char** argv) try {
  const int compilations = argc > 1 ? count_argument(argv[1]) : 3;
  const int hits = argc > 2 ? count_argument(argv[2]) : 200;
  if (argc > 3 || compilations < 1 || hits < 1) {
    std::fprintf(stderr, "usage: custream-jit-bench [compilations=3] [hits=200] (whole numbers >= 1)\n");
    return 2;
  }
  char dir[] = "/tmp/custream-jit-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  const auto t_load = std::chrono::steady_clock::now();
  const auto [major, minor] = custream::Program::nvrtc_version();  // loads NVRTC, once a process
  const double load_s = seconds_since(t_load);
  std::printf("NVRTC %d.%d (%s); source %zu + header %zu bytes, %zu name expressions\n", major,
              minor, custream::Program::nvrtc_library().c_str(), std::string(kSource).size(),
              std::string(kHeader).size(), std::size(kExpressions));

  std::printf("loading NVRTC (dlopen; once a process): %.1f ms\n", load_s * 1e3);
  std::vector<double> compile_s;
  std::size_t image_bytes = 0;
  for (int i = 0; i < compilations; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const custream::ProgramImage image = make(custream::CompileCache::off()).build("compute_75");
    compile_s.push_back(seconds_since(t0));
    image_bytes = image.bytes.size();
  }
  const custream::CompileCache cache(dir);
  make(cache).build("compute_75");  // stores the entry
  std::vector<double> hit_s;
  for (int i = 0; i < hits; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const custream::ProgramImage image = make(cache).build("compute_75");
    hit_s.push_back(seconds_since(t0));
    if (!image.from_cache || image.bytes.size() != image_bytes) {
      std::fprintf(stderr, "FAIL: hit %d did not come from the cache\n", i);
      return 1;
    }
  }
  const double c = median(compile_s), h = median(hit_s);
  std::printf("full NVRTC compilation (compute_75, %zu bytes of PTX): median %.1f ms of %d\n",
              image_bytes, c * 1e3, compilations);
  std::printf("compile-cache hit (new Program, key, read, checks, decode): median %.3f ms of %d\n",
              h * 1e3, hits);
  std::printf("hit is %.0fx faster\n", c / h);
  const std::string rm = std::string("rm -rf '") + dir + "'";
  if (std::system(rm.c_str()) != 0) return 1;
  return c / h >= 100 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "FAIL: %s\n", e.what());
  return 1;
}
