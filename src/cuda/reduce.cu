// Reductions and softmax. Rows of a contiguous [rows, cols] matrix are cut into chunks so that a
// few long rows (a full sum of 2^28 floats is one row) still fill every multiprocessor: stage 1
// reduces chunks with warp shuffles and a shared-memory tree, stage 2 combines the chunks of each
// row. [outer, n, inner] reductions with many outputs give each thread one output column, reading
// coalesced rows; with few outputs (a bias gradient: [1, 8192, 3072]) blocks take a tile of
// columns and a chunk of the n rows each, and a second kernel combines the chunks in a fixed order
// (no atomics: the same bits every run). Softmax keeps one block per row and one online (max, sum)
// pass before writing. f16/bf16 are widened to f32 in registers and the result is rounded once.
#include <cfloat>
#include <cmath>

#include "core/int_math.hpp"
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

template <class T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };
template <> struct AccOf<int32_t> { using type = int64_t; };
template <> struct AccOf<int64_t> { using type = int64_t; };
template <> struct AccOf<bool> { using type = int64_t; };

// Element to accumulator in registers: f16/bf16 straight to f32, integers exactly (no f64 detour,
// which would round int64 values above 2^53).
template <class A, class T> __device__ __forceinline__ A to_acc(T v) {
  if constexpr (std::is_same_v<T, Half>) return A(__half2float(__ushort_as_half(v.bits)));
  else if constexpr (std::is_same_v<T, BFloat16>) return A(__bfloat162float(__ushort_as_bfloat16(v.bits)));
  else return A(v);
}
// Accumulator to a stored element, rounded once (f32 -> f16 directly).
template <class D, class A> __device__ __forceinline__ D from_acc(A v) {
  if constexpr (std::is_same_v<D, Half>) return Half{__half_as_ushort(__float2half_rn(float(v)))};
  else if constexpr (std::is_same_v<D, BFloat16>) return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(float(v)))};
  else if constexpr (std::is_same_v<D, bool>) return v != A(0);
  else return D(v);
}

// 16 bytes of elements, loaded as one uint4 (a struct of 2-byte halves would load piecewise).
template <class T> struct Pack {
  static constexpr int N = int(16 / sizeof(T));
  union { uint4 raw; T v[N]; };
};
template <class T> __device__ __forceinline__ Pack<T> load_pack(const T* p) {
  Pack<T> k;
  k.raw = *reinterpret_cast<const uint4*>(p);
  return k;
}

template <class A> __device__ __forceinline__ A identity(ReduceOp op) {
  if (op == ReduceOp::Sum) return A(0);
  if constexpr (std::is_floating_point_v<A>) return op == ReduceOp::Max ? A(-INFINITY) : A(INFINITY);
  else return op == ReduceOp::Max ? A(INT64_MIN) : A(INT64_MAX);
}

template <class A> __device__ __forceinline__ A combine(ReduceOp op, A a, A b) {
  if (op == ReduceOp::Sum) return wrapping_add(a, b);  // integers wrap modulo 2^64 (torch's), no signed-overflow UB
  if constexpr (std::is_floating_point_v<A>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return op == ReduceOp::Max ? (a > b ? a : b) : (a < b ? a : b);
}

template <class A> __device__ __forceinline__ A shfl_down(A v, int offset) { return __shfl_down_sync(0xffffffffu, v, offset); }

// Block-wide reduction; the result is valid in thread 0.
template <class A> __device__ A block_reduce(ReduceOp op, A v) {
  __shared__ A warp_vals[32];
  for (int o = 16; o > 0; o >>= 1) v = combine(op, v, shfl_down(v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < nwarps ? warp_vals[threadIdx.x] : identity<A>(op);
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v = combine(op, v, shfl_down(v, o));
  return v;
}

// The elements of a pack folded into acc (pairwise, then into the running value).
template <class A, class T>
__device__ __forceinline__ A combine_pack(ReduceOp op, A acc, const Pack<T>& q) {
  A part = to_acc<A>(q.v[0]);
#pragma unroll
  for (int k = 1; k < Pack<T>::N; ++k) part = combine(op, part, to_acc<A>(q.v[k]));
  return combine(op, acc, part);
}

// Chunk c of a row takes elements c*blockDim + t + k*(chunks*blockDim): all blocks of a row sweep
// it together (interleaved), which keeps DRAM accesses local, rather than each owning a slab.
// Rows starting on a 16-byte boundary are read in 16-byte packs (4 f32, 8 f16/bf16).
template <class T, class A>
__global__ void rows_stage1(ReduceOp op, const T* src, A* partial, int64_t cols, int chunks) {
  const int64_t row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int64_t stride = int64_t(chunks) * blockDim.x, first = chunk * blockDim.x + threadIdx.x;
  const T* p = src + row * cols;
  A acc = identity<A>(op);
  constexpr int N = Pack<T>::N;
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    const int64_t nvec = cols / N;
    int64_t i = first;
    for (; i + 3 * stride < nvec; i += 4 * stride) {  // four 16-byte loads in flight per thread
      Pack<T> q[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) q[u] = load_pack(p + (i + u * stride) * N);
#pragma unroll
      for (int u = 0; u < 4; ++u) acc = combine_pack(op, acc, q[u]);
    }
    for (; i < nvec; i += stride) acc = combine_pack(op, acc, load_pack(p + i * N));
    for (int64_t j = nvec * N + first; j < cols; j += stride) acc = combine(op, acc, to_acc<A>(p[j]));
  } else {
    for (int64_t j = first; j < cols; j += stride) acc = combine(op, acc, to_acc<A>(p[j]));
  }
  acc = block_reduce(op, acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <class A, class D>
__global__ void rows_stage2(ReduceOp op, const A* partial, D* dst, int64_t rows, int chunks) {

  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    A acc = identity<A>(op);
    for (int c = 0; c < chunks; ++c) acc = combine(op, acc, partial[r * chunks + c]);
    dst[r] = from_acc<D>(acc);
  }
}

// Integers compared as themselves (through a double, 2^53 + 1 did not beat 2^53), the rest in f64.
template <class T>
__global__ void argmax_rows(const T* src, int64_t* dst, int64_t cols) {
  using V = std::conditional_t<std::is_integral_v<T>, T, double>;
  const T* p = src + int64_t(blockIdx.x) * cols;
  V best = V(0);
  int64_t best_i = cols;  // "none yet"
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    V v;
    if constexpr (std::is_integral_v<T>) v = p[i];
    else v = load_f64(p + i);
    bool better = best_i == cols || v > best || (v != v && best == best);
    if (better) { best = v; best_i = i; }
  }
  __shared__ V vals[256];
  __shared__ int64_t idx[256];
  vals[threadIdx.x] = best;
  idx[threadIdx.x] = best_i;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      V v = vals[threadIdx.x + s];
      int64_t j = idx[threadIdx.x + s];
      V u = vals[threadIdx.x];
      int64_t i = idx[threadIdx.x];
      // NaN wins (first NaN), then larger value, then smaller index
      bool take = j != cols && (i == cols || (v != v && (u == u || j < i)) || (u == u && v == v && (v > u || (v == u && j < i))));
      if (take) { vals[threadIdx.x] = v; idx[threadIdx.x] = j; }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) dst[blockIdx.x] = idx[0] == cols ? 0 : idx[0];
}

// [outer, n, inner] with many outputs: one thread per output, rows read coalesced across threads.
template <class T, class A, class D>
__global__ void middle_kernel(ReduceOp op, const T* src, D* dst, int64_t outer, int64_t n, int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e / inner, i = e - o * inner;
    const T* p = src + o * n * inner + i;
    A acc = identity<A>(op);
#pragma unroll 4  // several independent loads in flight per thread
    for (int64_t j = 0; j < n; ++j) acc = combine(op, acc, to_acc<A>(p[j * inner]));
    dst[e] = from_acc<D>(acc);
  }
}

// [outer, n, inner] with few outputs (outer * inner small, n large). Block b covers, of outer
// slice o, the columns [tile * blockDim.x * V, +blockDim.x * V) and the rows
// [chunk * rows_per_chunk, +rows_per_chunk): thread (x, y) reads V adjacent columns (one 16-byte
// pack when V > 1) of rows y, y + blockDim.y, ..., and the blockDim.y partial results are combined
// by a shared-memory tree. out is [chunks, outer, inner]: f32/f64/i64 partials for
// tall_combine_chunks, or the result itself when there is one chunk.
template <class T, class A, class O, int V>
__global__ void __launch_bounds__(256) tall_chunks(ReduceOp op, const T* src, O* out, int64_t outer, int64_t n,
                                                    int64_t inner, int64_t col_tiles, int64_t rows_per_chunk) {
  extern __shared__ unsigned char tall_smem[];
  A* shared = reinterpret_cast<A*>(tall_smem);  // [blockDim.y][blockDim.x * V]
  const int64_t tile = blockIdx.x % col_tiles, slice = blockIdx.x / col_tiles;
  const int64_t o = slice % outer, chunk = slice / outer;
  const int64_t col = (tile * blockDim.x + threadIdx.x) * V;
  const int64_t row_end = (chunk + 1) * rows_per_chunk < n ? (chunk + 1) * rows_per_chunk : n;
  const int64_t step = blockDim.y;
  A acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = identity<A>(op);
  if (col < inner) {  // V > 1 only when inner % V == 0, so the whole pack is in range
    const T* p = src + o * n * inner + col;
    auto fold = [&](const T* at) {
      if constexpr (V == 1) {
        acc[0] = combine(op, acc[0], to_acc<A>(*at));
      } else {
        const Pack<T> q = load_pack(at);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] = combine(op, acc[k], to_acc<A>(q.v[k]));
      }
    };
    int64_t r = chunk * rows_per_chunk + threadIdx.y;
    for (; r + 3 * step < row_end; r += 4 * step) {  // four loads in flight per thread
      if constexpr (V == 1) {
        T q[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) q[u] = p[(r + u * step) * inner];
#pragma unroll
        for (int u = 0; u < 4; ++u) acc[0] = combine(op, acc[0], to_acc<A>(q[u]));
      } else {
        Pack<T> q[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) q[u] = load_pack(p + (r + u * step) * inner);
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int k = 0; k < V; ++k) acc[k] = combine(op, acc[k], to_acc<A>(q[u].v[k]));
      }
    }
    for (; r < row_end; r += step) fold(p + r * inner);
  }
  const int width = blockDim.x * V, lane = threadIdx.x * V;
#pragma unroll
  for (int k = 0; k < V; ++k) shared[threadIdx.y * width + lane + k] = acc[k];
  __syncthreads();
  for (int span = blockDim.y / 2; span > 0; span >>= 1) {  // blockDim.y is a power of two
    if (threadIdx.y < span)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        A& mine = shared[threadIdx.y * width + lane + k];
        mine = combine(op, mine, shared[(threadIdx.y + span) * width + lane + k]);
      }
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < inner) {
    O* d = out + (chunk * outer + o) * inner + col;
#pragma unroll
    for (int k = 0; k < V; ++k) d[k] = from_acc<O>(shared[lane + k]);
  }
}

// dst[e] = the chunks' partials of output e combined in a fixed order: 32 outputs per block,
// kCombineLanes threads over the chunks of each, then the lanes combined in order.
constexpr int kCombineLanes = 16;
template <class A, class D>
__global__ void __launch_bounds__(32 * kCombineLanes) tall_combine_chunks(ReduceOp op, const A* partial, D* dst,
                                                                          int64_t outputs, int64_t chunks) {
  __shared__ A lanes[kCombineLanes][33];
  const int64_t e = int64_t(blockIdx.x) * 32 + threadIdx.x;
  A acc = identity<A>(op);
  if (e < outputs) {
#pragma unroll 4  // independent loads in flight
    for (int64_t c = threadIdx.y; c < chunks; c += kCombineLanes) acc = combine(op, acc, partial[c * outputs + e]);
  }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && e < outputs) {
    for (int y = 1; y < kCombineLanes; ++y) acc = combine(op, acc, lanes[y][threadIdx.x]);
    dst[e] = from_acc<D>(acc);
  }
}

// Online softmax statistics: (max, sum of exp(x - max)).
template <class A> struct MaxSum { A m, s; };
template <class A> __device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
  if (a.m == A(-INFINITY)) return b;
  if (b.m == A(-INFINITY)) return a;
  A m = a.m > b.m ? a.m : b.m;
  return {m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
}

// T the stored dtype, A the one computed in (f32 for f16/bf16).
template <class T, class A>
__global__ void softmax_kernel(const T* src, T* dst, int64_t cols, bool log_out) {
  const T* x = src + int64_t(blockIdx.x) * cols;
  T* y = dst + int64_t(blockIdx.x) * cols;
  MaxSum<A> st{A(-INFINITY), A(0)};
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) st = merge(st, MaxSum<A>{to_acc<A>(x[i]), A(1)});
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum<A> other{__shfl_down_sync(0xffffffffu, st.m, o), __shfl_down_sync(0xffffffffu, st.s, o)};
    st = merge(st, other);
  }
  __shared__ A ms[32], ss[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { ms[warp] = st.m; ss[warp] = st.s; }
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum<A> total{A(-INFINITY), A(0)};
    for (int w = 0; w < int((blockDim.x + 31) >> 5); ++w) total = merge(total, MaxSum<A>{ms[w], ss[w]});
    ms[0] = total.m == A(-INFINITY) ? A(0) : total.m;
    ss[0] = total.s;
  }
  __syncthreads();
  const A m = ms[0], s = ss[0];
  if (log_out) {
    const A ls = m + log(s);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) y[i] = from_acc<T>(to_acc<A>(x[i]) - ls);
  } else {
    const A inv = A(1) / s;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) y[i] = from_acc<T>(exp(to_acc<A>(x[i]) - m) * inv);
  }
}

// Rows that fit in registers (PER values per thread) are read once and written once.
template <class T, class A, int PER>
__global__ void softmax_regs_kernel(const T* src, T* dst, int64_t cols, bool log_out) {
  const T* x = src + int64_t(blockIdx.x) * cols;
  T* y = dst + int64_t(blockIdx.x) * cols;
  A v[PER];
  A m = A(-INFINITY);
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    v[k] = i < cols ? to_acc<A>(x[i]) : A(-INFINITY);
    m = v[k] > m ? v[k] : m;
  }
  __shared__ A red[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) { A other = __shfl_xor_sync(0xffffffffu, m, o); m = other > m ? other : m; }
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = red[0];
  for (int w = 1; w < nwarps; ++w) m = red[w] > m ? red[w] : m;
  if (m == A(-INFINITY)) m = A(0);
  __syncthreads();
  A s = 0;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const A d = v[k] - m, e = exp(d);
    s += e;
    v[k] = log_out ? d : e;  // log-softmax keeps x - max, so nothing is read twice
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) red[warp] = s;
  __syncthreads();
  s = 0;
  for (int w = 0; w < nwarps; ++w) s += red[w];
  const A inv = A(1) / s, ls = log(s);
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    if (i < cols) y[i] = from_acc<T>(log_out ? v[k] - ls : v[k] * inv);
  }
}

// f32 rows of 4-aligned width up to 16384: each block owns rows r, r + grid, ... and loads the
// next row's float4s into registers before reducing the current one, so DRAM reads stay in flight
// through the two block reductions and the stores (a plain one-row-per-block kernel stalls there).
template <int P>
__global__ void __launch_bounds__(512) softmax_rows_pipelined(const float4* src, float4* dst, int64_t rows,
                                                               int cols4, bool log_out) {
  __shared__ float red[2][32];  // per parity: 16 warp maxima, then 16 warp sums
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  auto load = [&](int64_t row, float4 (&v)[P]) {
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      v[k] = i < cols4 ? __ldcs(src + row * cols4 + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
  };
  float4 cur[P];
  int64_t row = blockIdx.x;
  if (row < rows) load(row, cur);
  for (int parity = 0; row < rows; row += gridDim.x, parity ^= 1) {
    float4 next[P];
    if (row + gridDim.x < rows) load(row + gridDim.x, next);
    // each thread: its own max m and sum s of 2^((x - m) log2 e); then one block reduction of the
    // (m, s) pairs (one barrier per row instead of two)
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < P; ++k) m = fmaxf(m, fmaxf(fmaxf(cur[k].x, cur[k].y), fmaxf(cur[k].z, cur[k].w)));
    const float base = m == -INFINITY ? 0.f : m * kLog2e;  // an all -inf slice adds nothing
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      float4& c = cur[k];
      if (!log_out) {
        c = make_float4(exp2f(fmaf(c.x, kLog2e, -base)), exp2f(fmaf(c.y, kLog2e, -base)),
                        exp2f(fmaf(c.z, kLog2e, -base)), exp2f(fmaf(c.w, kLog2e, -base)));
        s += (c.x + c.y) + (c.z + c.w);
      } else {
        s += (exp2f(fmaf(c.x, kLog2e, -base)) + exp2f(fmaf(c.y, kLog2e, -base))) +
             (exp2f(fmaf(c.z, kLog2e, -base)) + exp2f(fmaf(c.w, kLog2e, -base)));
      }
    }
    float wm = m, ws = s;
    for (int o = 16; o > 0; o >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, wm, o), os = __shfl_xor_sync(0xffffffffu, ws, o);
      const float mm = fmaxf(wm, om);
      ws = mm == -INFINITY ? 0.f : ws * exp2f((wm - mm) * kLog2e) + os * exp2f((om - mm) * kLog2e);
      wm = mm;
    }
    // two alternating slots: a fast warp may write the next row's pair while slow ones still read
    if (lane == 0) { red[parity][warp] = wm; red[parity][16 + warp] = ws; }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < nwarps; ++w) M = fmaxf(M, red[parity][w]);
    float S = 0.f;
    if (M != -INFINITY)
      for (int w = 0; w < nwarps; ++w) S += red[parity][16 + w] * exp2f((red[parity][w] - M) * kLog2e);
    const float ls = M + logf(S);                                         // log-softmax: x - ls
    const float scale = (m == -INFINITY ? 0.f : exp2f((m - M) * kLog2e)) / S;  // softmax: e * scale
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      const float4 c = cur[k];
      float4 y = log_out ? make_float4(c.x - ls, c.y - ls, c.z - ls, c.w - ls)
                         : make_float4(c.x * scale, c.y * scale, c.z * scale, c.w * scale);
      if (i < cols4) __stcs(dst + row * cols4 + i, y);
    }
#pragma unroll
    for (int k = 0; k < P; ++k) cur[k] = next[k];
  }
}

bool softmax_pipelined(const ExecContext& ctx, const float* src, float* dst, int64_t rows, int64_t cols, bool log) {
  if (cols % 4 || cols > 16384 || (reinterpret_cast<uintptr_t>(src) & 15) || (reinterpret_cast<uintptr_t>(dst) & 15))
    return false;
  const int cols4 = int(cols / 4);
  // 8 float4 per thread when the row allows it (blocks of 32..512 threads): the prefetched row
  // then takes a larger share of the register file, i.e. more bytes in flight per SM
  const int threads = std::min(512, std::max(32, (cols4 / 8 + 31) / 32 * 32));
  const int per = (cols4 + threads - 1) / threads;
  auto go = [&](auto per_tag) {
    constexpr int P = decltype(per_tag)::value;
    const int64_t grid = persistent_grid(softmax_rows_pipelined<P>, threads, rows);
    softmax_rows_pipelined<P><<<unsigned(grid), threads, 0, stream_of(ctx)>>>(
        reinterpret_cast<const float4*>(src), reinterpret_cast<float4*>(dst), rows, cols4, log);
  };
  if (per <= 1) go(std::integral_constant<int, 1>{});
  else if (per <= 2) go(std::integral_constant<int, 2>{});
  else if (per <= 4) go(std::integral_constant<int, 4>{});
  else if (per <= 8) go(std::integral_constant<int, 8>{});
  else return false;
  return true;
}

template <class T, class A>
bool softmax_in_registers(const ExecContext& ctx, const T* src, T* dst, int64_t rows, int64_t cols, bool log) {
  // ~16 values per thread in blocks of 32..512 threads: several rows in flight per SM hide the
  // latency of the load -> reduce -> store chain.
  const int threads = int(std::min<int64_t>(512, std::max<int64_t>(32, (cols / 16 + 31) / 32 * 32)));
  const int64_t per = (cols + threads - 1) / threads;
  auto go = [&](auto per_tag) {
    constexpr int PER = decltype(per_tag)::value;
    softmax_regs_kernel<T, A, PER><<<unsigned(rows), threads, 0, stream_of(ctx)>>>(src, dst, cols, log);
  };
  if (per <= 1) go(std::integral_constant<int, 1>{});
  else if (per <= 2) go(std::integral_constant<int, 2>{});
  else if (per <= 4) go(std::integral_constant<int, 4>{});
  else if (per <= 8) go(std::integral_constant<int, 8>{});
  else if (per <= 16) go(std::integral_constant<int, 16>{});
  else return false;
  return true;
}

}  // namespace

void launch_reduce_rows(const ExecContext& ctx, ReduceOp op, const View& dst, const View& src, int64_t rows,
                        int64_t cols) {
  if (!rows) return;
  if (op == ReduceOp::ArgMax) {
    dispatch_dtype(src.dtype, [&](auto tag) {
      using T = decltype(tag);
      argmax_rows<T><<<unsigned(rows), 256, 0, stream_of(ctx)>>>(static_cast<const T*>(src.data), static_cast<int64_t*>(dst.data), cols);
    });
    NX_CUDA_LAUNCH_CHECK();
    return;
  }
  const int threads = cols < 256 ? 32 : 256;
  const int64_t want_blocks = int64_t(sm_count()) * 8;
  int chunks = 1;
  if (rows < want_blocks && cols > 8192) chunks = int(std::min<int64_t>((cols + 8191) / 8192, (want_blocks + rows - 1) / rows));
  dispatch_dtype(src.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccOf<T>::type;
    Scratch partial(ctx, size_t(rows * chunks) * sizeof(A));
    rows_stage1<T, A><<<unsigned(rows * chunks), threads, 0, stream_of(ctx)>>>(op, static_cast<const T*>(src.data),
        static_cast<A*>(partial.ptr), cols, chunks);
    NX_CUDA_LAUNCH_CHECK();
    dispatch_dtype(dst.dtype, [&](auto dtag) {
      using D = decltype(dtag);
      rows_stage2<A, D><<<blocks_for(rows), kThreads, 0, stream_of(ctx)>>>(op, static_cast<const A*>(partial.ptr),
          static_cast<D*>(dst.data), rows, chunks);
    });
    NX_CUDA_LAUNCH_CHECK();
  });
}

namespace {

// Outputs at which one thread per output already keeps the device busy (middle_kernel).
constexpr int64_t kManyOutputs = int64_t(1) << 20;
// Blocks the chunked kernel aims for: several waves on any current GPU. A constant, not the
// device's SM count, so the chunking (and the bits of a sum) depend on the shape alone.
constexpr int64_t kTallTargetBlocks = 2048;

template <class T>
void reduce_tall(const ExecContext& ctx, ReduceOp op, const View& dst, const View& src_view, int64_t outer,
                 int64_t n, int64_t inner) {
  const T* src = static_cast<const T*>(src_view.data);
  using A = typename AccOf<T>::type;
  constexpr int kPack = Pack<T>::N;
  // 16-byte packs when every row of the tile starts on a 16-byte boundary
  const bool packed = inner % kPack == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0;
  const int v = packed ? kPack : 1;
  const int64_t col_groups = (inner + v - 1) / v;
  int tx = 1;
  while (tx < 32 && tx < col_groups) tx *= 2;  // a warp spans one row's columns where it can
  const int ty = 256 / tx;
  const int64_t col_tiles = (col_groups + tx - 1) / tx;
  const int64_t slices = outer * col_tiles;
  const int64_t want_chunks = std::max<int64_t>(1, kTallTargetBlocks / slices);
  // at least eight rows per thread: the loads of a thread overlap, and the partials stay few
  const int64_t rows_per_chunk = std::max<int64_t>(8 * int64_t(ty), (n + want_chunks - 1) / want_chunks);
  const int64_t chunks = std::max<int64_t>(1, (n + rows_per_chunk - 1) / rows_per_chunk);
  const dim3 block(tx, ty);
  const size_t smem = size_t(256) * size_t(v) * sizeof(A);
  auto launch = [&](auto out_tag, auto* out) {
    using O = decltype(out_tag);
    auto go = [&](auto kernel) {
      kernel<<<unsigned(chunks * slices), block, smem, stream_of(ctx)>>>(op, src, out, outer, n, inner, col_tiles,
                                                                          rows_per_chunk);
    };
    if (packed) go(tall_chunks<T, A, O, kPack>);
    else go(tall_chunks<T, A, O, 1>);
    NX_CUDA_LAUNCH_CHECK();
  };
  if (chunks == 1 && dst.dtype == src_view.dtype) {
    launch(T{}, static_cast<T*>(dst.data));
    return;
  }
  Scratch partial(ctx, size_t(chunks * outer * inner) * sizeof(A));
  launch(A{}, static_cast<A*>(partial.ptr));
  dispatch_dtype(dst.dtype, [&](auto dtag) {
    using D = decltype(dtag);
    const int64_t outputs = outer * inner;
    tall_combine_chunks<A, D><<<unsigned((outputs + 31) / 32), dim3(32, kCombineLanes), 0, stream_of(ctx)>>>(
        op, static_cast<const A*>(partial.ptr), static_cast<D*>(dst.data), outputs, chunks);
  });
  NX_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_reduce_middle(const ExecContext& ctx, ReduceOp op, const View& dst, const View& src, int64_t outer,
                          int64_t n, int64_t inner) {
  if (!outer || !inner) return;
  if (outer * inner < kManyOutputs) {
    dispatch_dtype(src.dtype, [&](auto tag) {
      using T = decltype(tag);
      reduce_tall<T>(ctx, op, dst, src, outer, n, inner);
    });
    return;
  }
  dispatch_dtype(src.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = typename AccOf<T>::type;
    dispatch_dtype(dst.dtype, [&](auto dtag) {
      using D = decltype(dtag);
      middle_kernel<T, A, D><<<blocks_for(outer * inner), kThreads, 0, stream_of(ctx)>>>(op, static_cast<const T*>(src.data),
          static_cast<D*>(dst.data), outer, n, inner);
    });
  });
  NX_CUDA_LAUNCH_CHECK();
}

void launch_softmax_rows(const ExecContext& ctx, const View& dst, const View& src, int64_t rows, int64_t cols,
                         bool log) {
  if (!rows) return;
  const int threads = cols <= 32 ? 32 : (cols <= 128 ? 128 : (cols <= 512 ? 256 : 512));
  if (dst.dtype == DType::F32 &&
      (softmax_pipelined(ctx, static_cast<const float*>(src.data), static_cast<float*>(dst.data), rows, cols, log) ||
       softmax_in_registers<float, float>(ctx, static_cast<const float*>(src.data), static_cast<float*>(dst.data),
                                          rows, cols, log))) {
    NX_CUDA_LAUNCH_CHECK();
    return;
  }
  // f16/bf16 rows are widened to f32 in registers and each output rounded once
  auto half_rows = [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(src.data);
    T* y = static_cast<T*>(dst.data);
    if (!softmax_in_registers<T, float>(ctx, x, y, rows, cols, log))
      softmax_kernel<T, float><<<unsigned(rows), threads, 0, stream_of(ctx)>>>(x, y, cols, log);
  };
  if (dst.dtype == DType::F32)
    softmax_kernel<float, float><<<unsigned(rows), threads, 0, stream_of(ctx)>>>(static_cast<const float*>(src.data), static_cast<float*>(dst.data), cols, log);
  else if (dst.dtype == DType::F64)
    softmax_kernel<double, double><<<unsigned(rows), threads, 0, stream_of(ctx)>>>(static_cast<const double*>(src.data), static_cast<double*>(dst.data), cols, log);
  else if (dst.dtype == DType::F16)
    half_rows(Half{});
  else if (dst.dtype == DType::BF16)
    half_rows(BFloat16{});
  else
    fail(NX_ERR_DTYPE, current_api(), ": no CUDA softmax kernel for ", dtype_name(dst.dtype));
  NX_CUDA_LAUNCH_CHECK();
}

}  // namespace nx::cuda
