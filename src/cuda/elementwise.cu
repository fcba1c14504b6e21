// Elementwise kernels: strided copy with cast, fill, unary, binary (with broadcasting through
// stride-0 views) and where. Layout: the output is contiguous; inputs are any strided views of
// the output's shape. Contiguous inputs take a vectorized path: 16-byte loads and stores, a
// grid-stride loop, so bandwidth-bound ops run near the copy rate. f16/bf16 elements are widened
// to f32 in registers and narrowed on the store (no f32 copy of a tensor, no cast kernel); a
// binary op on two floating dtypes (bf16 + f32) converts each operand while loading it. A binary op
// of a contiguous operand and one broadcast along leading dimensions (a bias row) indexes the
// latter as i % inner instead of through the strided geometry.
#include <cmath>

#include "core/f8_codec.hpp"
#include "core/int_math.hpp"
#include "core/cuda_iface.hpp"
#include "cuda/float_ops.cuh"
#include "cuda/fused_codegen.hpp"
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

// 16 bytes of elements, aligned so that a load or store is one 128-bit access (without alignas,
// a vector of 2-byte f16/bf16 structs compiles to eight 2-byte loads and runs at 0.6x the copy rate).
template <class T> struct alignas(16) Vec16 { static constexpr int N = 16 / sizeof(T); T v[N]; };

// The type an element is computed in: f16 and bf16 in f32 registers, every other dtype as itself.
template <class T> struct ComputeOf { using type = T; };
template <> struct ComputeOf<Half> { using type = float; };
template <> struct ComputeOf<BFloat16> { using type = float; };
template <class T> using Compute = typename ComputeOf<T>::type;
template <class T> __device__ __forceinline__ T widen(T v) { return v; }
__device__ __forceinline__ float widen(Half v) { return __half2float(__ushort_as_half(v.bits)); }
__device__ __forceinline__ float widen(BFloat16 v) { return __bfloat162float(__ushort_as_bfloat16(v.bits)); }
template <class T> __device__ __forceinline__ T narrow(Compute<T> v) { return v; }
template <> __device__ __forceinline__ Half narrow<Half>(float v) { return Half{__half_as_ushort(__float2half_rn(v))}; }
template <> __device__ __forceinline__ BFloat16 narrow<BFloat16>(float v) {
  return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}
// One element converted between two storage dtypes, giving the CPU backend's convert (src/cpu/
// cpu_backend.cpp) for every pair: among f32/f16/bf16 through f32 registers (one rounding);
// integer to integer directly, modulo 2^bits (a double holds int64 exactly only below 2^53, and
// an out-of-range double -> int is undefined); floating to integer as wrapping_from_double
// (NaN 0, beyond int64 saturated, then modulo 2^bits); to bool, nonzero; integer to floating as
// PyTorch converts: to f32/f64 in one rounding (not through f64, which rounds i64 -> f32 twice), to
// f16/bf16 through f32 (c10::Half and BFloat16 are made from a float).
template <class T> constexpr bool kF32Family = std::is_same_v<T, float> || std::is_same_v<T, Half> ||
                                               std::is_same_v<T, BFloat16>;
template <class S>
__device__ __forceinline__ bool nonzero(S s) {
  // on the bits: -0 is zero; NaN and subnormals are not, whatever the flush-to-zero mode
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) return (s.bits & 0x7fffu) != 0;
  else return s != S(0);
}
// The 8-bit floats convert through a double with the host's codec (core/f8_codec.hpp), as the
// CPU's cast does: decoding is exact, so the one rounding is the encode's.
template <class T> constexpr bool kFloat8 = std::is_same_v<T, Float8E4M3> || std::is_same_v<T, Float8E5M2>;
template <class S>
__device__ __forceinline__ double elem_to_f64(S s) {
  if constexpr (kFloat8<S>) return f8::decode(s.bits, std::is_same_v<S, Float8E4M3>);
  else if constexpr (std::is_integral_v<S>) return double(s);
  else return double(widen(s));
}
template <class D>
__device__ __forceinline__ D elem_from_f64(double d) {
  if constexpr (kFloat8<D>) return D{f8::encode(d, std::is_same_v<D, Float8E4M3>)};
  else if constexpr (std::is_same_v<D, bool>) return d != 0.0;
  else if constexpr (std::is_integral_v<D>) return wrapping_from_double<D>(d);
  else if constexpr (std::is_same_v<D, double>) return d;
  else return narrow<D>(float(d));  // exact: every 8-bit float is an f32, f16 and bf16 value
}
template <class D, class S>
__device__ __forceinline__ D convert_elem(S s) {
  if constexpr (kFloat8<D> || kFloat8<S>) {
    return elem_from_f64<D>(elem_to_f64(s));
  } else if constexpr (kF32Family<D> && kF32Family<S>) {
    return narrow<D>(float(widen(s)));
  } else if constexpr (std::is_same_v<D, bool>) {
    return nonzero(s);
  } else if constexpr (std::is_integral_v<D> && std::is_integral_v<S>) {
    return D(s);
  } else if constexpr (std::is_integral_v<D>) {
    return wrapping_from_double<D>(double(widen(s)));
  } else if constexpr (std::is_integral_v<S> && (std::is_same_v<D, float> || std::is_same_v<D, double>)) {
    return D(s);  // cvt.rn: one rounding
  } else if constexpr (std::is_integral_v<S>) {
    return narrow<D>(float(s));
  } else {
    D d;
    store_f64(&d, load_f64(&s));
    return d;
  }
}
// Elements of a runtime floating dtype, for the mixed-dtype binary kernel (the dtype is uniform
// across a launch, so the switch does not diverge). Floating dtypes only (ops cast integer operands
// first); f64 -> f32 rounds once and the rest widen exactly, as the CPU's tile loads do.
template <class C>
__device__ __forceinline__ C load_as(const void* p, int64_t i, DType dt) {
  switch (dt) {
    case DType::F32: return C(static_cast<const float*>(p)[i]);
    case DType::F64: return C(static_cast<const double*>(p)[i]);
    case DType::F16: return C(widen(static_cast<const Half*>(p)[i]));
    default: return C(widen(static_cast<const BFloat16*>(p)[i]));
  }
}

// Floating elements go through float_ops.cuh (shared with the generated fused kernels); integers
// wrap modulo 2^bits (core/int_math.hpp), as the CPU's kernels do.
template <class T>
__device__ __forceinline__ T unary_op(UnaryOp op, T x, T p0, T p1) {
  if constexpr (std::is_floating_point_v<T>) {
    return float_unary(op, x, p0, p1);
  } else {
    switch (op) {
      case UnaryOp::Neg: return wrapping_neg(x);
      case UnaryOp::Abs: return wrapping_abs(x);
      case UnaryOp::Relu: return x <= T(0) ? T(0) : x;
      case UnaryOp::Clamp: return x < p0 ? p0 : (x > p1 ? p1 : x);
      case UnaryOp::AddScalar: return wrapping_add(x, p0);
      case UnaryOp::MulScalar: return wrapping_mul(x, p0);
      case UnaryOp::Square: return wrapping_mul(x, x);
      case UnaryOp::Sign: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
      case UnaryOp::Step: return x > T(0) ? T(1) : T(0);
      case UnaryOp::PowScalar: return wrapping_pow(x, p0);  // core/int_math.hpp, as the CPU's
      default: return T(0);
    }
  }
}

template <class T>
__device__ __forceinline__ T binary_op(BinaryOp op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return float_binary(op, a, b);
  } else {
    switch (op) {
      case BinaryOp::Add: return wrapping_add(a, b);
      case BinaryOp::Sub: return wrapping_sub(a, b);
      case BinaryOp::Mul: return wrapping_mul(a, b);
      case BinaryOp::Div: return b == T(0) ? T(0) : wrapping_div(a, b);
      case BinaryOp::Pow: return wrapping_pow(a, b);  // exact, wrapping; bool: x^0 == 1, 0^1 == 0
      case BinaryOp::Maximum: return a > b ? a : b;
      case BinaryOp::Minimum: return a < b ? a : b;
      default: return T(0);
    }
  }
}

// Integers compare as themselves (through a double, 2^53 == 2^53 + 1), the rest in f64.
template <class C>
__device__ __forceinline__ bool compare_op(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    default: return false;
  }
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <class D, class S>
__global__ void copy_kernel(D* dst, const S* src, Geometry<2> g, int64_t n) {
  GRID_STRIDE(e, n) {
    int64_t off[2];
    g.offsets(e, off);
    dst[off[0]] = convert_elem<D>(src[off[1]]);
  }
}

// A cast between contiguous tensors, N elements per step with aligned vector loads and stores.
// N makes the wider side one 16-byte access (bf16 -> f32: an 8-byte load, a 16-byte store), so a
// warp's stores are contiguous: 8 elements per thread there (two 16-byte stores 32 bytes apart)
// reached 0.74 of the copy rate on the H200, 4 per thread 0.97 (.gpu probe, session 10).
template <class T, int N> struct alignas(sizeof(T) * N >= 16 ? 16 : sizeof(T) * N) PackN { T v[N]; };
template <class D, class S>
__host__ __device__ constexpr int cast_pack() { return sizeof(D) > sizeof(S) ? int(16 / sizeof(D)) : 8; }
template <class D, class S>
__global__ void cast_contig_kernel(D* dst, const S* src, int64_t n) {
  constexpr int N = cast_pack<D, S>();
  const int64_t packs = n / N;
  GRID_STRIDE(i, packs) {
    PackN<S, N> in = reinterpret_cast<const PackN<S, N>*>(src)[i];
    PackN<D, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = convert_elem<D>(in.v[k]);
    reinterpret_cast<PackN<D, N>*>(dst)[i] = out;
  }
  GRID_STRIDE(j, n - packs * N) dst[packs * N + j] = convert_elem<D>(src[packs * N + j]);
}

template <class T>
__global__ void copy_same_kernel(T* dst, const T* src, Geometry<2> g, int64_t n) {
  GRID_STRIDE(e, n) {
    int64_t off[2];
    g.offsets(e, off);
    dst[off[0]] = src[off[1]];
  }
}

template <class T>
__global__ void fill_kernel(T* dst, Geometry<1> g, int64_t n, T value) {
  GRID_STRIDE(e, n) {
    int64_t off[1];
    g.offsets(e, off);
    dst[off[0]] = value;
  }
}

// One element of a unary or binary op in its compute type (f32 for f16/bf16).
template <class T>
__device__ __forceinline__ T unary_elem(UnaryOp op, T x, Compute<T> p0, Compute<T> p1) {
  return narrow<T>(unary_op<Compute<T>>(op, widen(x), p0, p1));
}
template <class T>
__device__ __forceinline__ T binary_elem(BinaryOp op, T a, T b) {
  return narrow<T>(binary_op<Compute<T>>(op, widen(a), widen(b)));
}

template <class T>
__global__ void unary_contig_kernel(UnaryOp op, T* out, const T* x, int64_t n, Compute<T> p0, Compute<T> p1) {
  using V = Vec16<T>;
  const int64_t nv = n / V::N;
  const V* xv = reinterpret_cast<const V*>(x);
  V* ov = reinterpret_cast<V*>(out);
  GRID_STRIDE(i, nv) {
    V v = xv[i];
#pragma unroll
    for (int k = 0; k < V::N; ++k) v.v[k] = unary_elem(op, v.v[k], p0, p1);
    ov[i] = v;
  }
  GRID_STRIDE(j, n - nv * V::N) out[nv * V::N + j] = unary_elem(op, x[nv * V::N + j], p0, p1);
}

template <class T>
__global__ void unary_strided_kernel(UnaryOp op, T* out, const T* x, Geometry<2> g, int64_t n, Compute<T> p0,
                                     Compute<T> p1) {
  GRID_STRIDE(e, n) {
    int64_t off[2];
    g.offsets(e, off);
    out[off[0]] = unary_elem(op, x[off[1]], p0, p1);
  }
}

template <class T>
__global__ void binary_contig_kernel(BinaryOp op, T* out, const T* a, const T* b, int64_t n) {
  using V = Vec16<T>;
  const int64_t nv = n / V::N;
  GRID_STRIDE(i, nv) {
    V va = reinterpret_cast<const V*>(a)[i], vb = reinterpret_cast<const V*>(b)[i];
#pragma unroll
    for (int k = 0; k < V::N; ++k) va.v[k] = binary_elem(op, va.v[k], vb.v[k]);
    reinterpret_cast<V*>(out)[i] = va;
  }
  GRID_STRIDE(j, n - nv * V::N) out[nv * V::N + j] = binary_elem(op, a[nv * V::N + j], b[nv * V::N + j]);
}

template <class T>
__global__ void binary_strided_kernel(BinaryOp op, T* out, const T* a, const T* b, Geometry<3> g, int64_t n) {
  GRID_STRIDE(e, n) {
    int64_t off[3];
    g.offsets(e, off);
    out[off[0]] = binary_elem(op, a[off[1]], b[off[2]]);
  }
}

// Operands of two floating dtypes (bf16 + f32 -> f32): each converted while loading, computed in
// the output's type T (f32 or f64). All contiguous: plain indices, no geometry.
template <class T>
__global__ void binary_mixed_contig_kernel(BinaryOp op, T* out, const void* a, DType da, const void* b, DType db,
                                           int64_t n) {
  GRID_STRIDE(i, n) out[i] = binary_op<T>(op, load_as<T>(a, i, da), load_as<T>(b, i, db));
}
// The mixed pair of a training step (a bf16/f16 tensor with an f32 one, into f32: a half gradient
// added to an f32 .grad): typed packs of 4, an 8-byte half load and 16-byte f32 accesses, as
// cast_contig_kernel (the per-element dtype switch above streamed at 0.56 of the copy rate).
// half_first keeps the operand order for sub, div and the rest.
template <class H>
__global__ void binary_half_f32_contig_kernel(BinaryOp op, float* out, const H* h, const float* f, bool half_first,
                                              int64_t n) {
  constexpr int N = 4;
  const int64_t packs = n / N;
  auto elem = [&](H x, float y) {
    return half_first ? binary_op<float>(op, widen(x), y) : binary_op<float>(op, y, widen(x));
  };
  GRID_STRIDE(i, packs) {
    const PackN<H, N> hv = reinterpret_cast<const PackN<H, N>*>(h)[i];
    PackN<float, N> fv = reinterpret_cast<const PackN<float, N>*>(f)[i];
#pragma unroll
    for (int k = 0; k < N; ++k) fv.v[k] = elem(hv.v[k], fv.v[k]);
    reinterpret_cast<PackN<float, N>*>(out)[i] = fv;
  }
  GRID_STRIDE(j, n - packs * N) out[packs * N + j] = elem(h[packs * N + j], f[packs * N + j]);
}
template <class T>
__global__ void binary_mixed_kernel(BinaryOp op, T* out, const void* a, DType da, const void* b, DType db,
                                    Geometry<3> g, int64_t n) {
  GRID_STRIDE(e, n) {
    int64_t off[3];
    g.offsets(e, off);
    out[off[0]] = binary_op<T>(op, load_as<T>(a, off[1], da), load_as<T>(b, off[2], db));
  }
}

// The common broadcast (a bias [N] against [M, N], [1, T, D] against [B, T, D]): `full` is
// contiguous with the output's shape, `bcast` contiguous over trailing dimensions of `inner`
// elements and broadcast over the leading ones, so output element i reads bcast[i % inner];
// bcast_first says which operand of op it is. Each thread keeps its position in bcast and moves it
// by the grid stride's remainder: no division inside the loop.
__device__ __forceinline__ int64_t advance_mod(int64_t j, int64_t step, int64_t inner) {
  j += step;
  return j >= inner ? j - inner : j;
}
// 16-byte loads and stores of out and full like binary_contig_kernel; bcast's elements as one
// vector too when whole vectors of it line up (kVectorBroadcast: inner a multiple of the vector
// width, bcast aligned), else one by one (they are few, and read from cache).
template <class T, bool kVectorBroadcast>
__global__ void binary_bcast_kernel(BinaryOp op, T* out, const T* full, const T* bcast, bool bcast_first, int64_t n,
                                    int64_t inner) {
  using V = Vec16<T>;
  const int64_t nv = n / V::N;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t step = stride * V::N % inner;
  int64_t j = first * V::N % inner;
  for (int64_t i = first; i < nv; i += stride, j = advance_mod(j, step, inner)) {
    V vf = reinterpret_cast<const V*>(full)[i], vb;
    if constexpr (kVectorBroadcast) {
      vb = *reinterpret_cast<const V*>(bcast + j);
    } else {
      int64_t jk = j;
#pragma unroll
      for (int k = 0; k < V::N; ++k, jk = jk + 1 == inner ? 0 : jk + 1) vb.v[k] = bcast[jk];
    }
#pragma unroll
    for (int k = 0; k < V::N; ++k) {
      T x = bcast_first ? vb.v[k] : vf.v[k], y = bcast_first ? vf.v[k] : vb.v[k];
      vf.v[k] = binary_elem(op, x, y);
    }
    reinterpret_cast<V*>(out)[i] = vf;
  }
  GRID_STRIDE(t, n - nv * V::N) {
    const int64_t e = nv * V::N + t;
    T f = full[e], b = bcast[e % inner];
    out[e] = binary_elem(op, bcast_first ? b : f, bcast_first ? f : b);
  }
}
// The same broadcast with operands of two floating dtypes, converted while loading.
template <class T>
__global__ void binary_mixed_bcast_kernel(BinaryOp op, T* out, const void* full, DType dfull, const void* bcast,
                                          DType dbcast, bool bcast_first, int64_t n, int64_t inner) {
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t step = stride % inner;
  int64_t j = first % inner;
  for (int64_t i = first; i < n; i += stride, j = advance_mod(j, step, inner)) {
    T f = load_as<T>(full, i, dfull), b = load_as<T>(bcast, j, dbcast);
    out[i] = binary_op<T>(op, bcast_first ? b : f, bcast_first ? f : b);
  }
}

template <class T>
__global__ void compare_kernel(BinaryOp op, bool* out, const T* a, const T* b, Geometry<3> g, int64_t n) {
  GRID_STRIDE(e, n) {
    int64_t off[3];
    g.offsets(e, off);
    if constexpr (std::is_integral_v<T>) out[off[0]] = compare_op<T>(op, a[off[1]], b[off[2]]);
    else out[off[0]] = compare_op<double>(op, load_f64(a + off[1]), load_f64(b + off[2]));
  }
}

template <class T>
__global__ void where_kernel(T* out, const bool* c, const T* a, const T* b, Geometry<4> g, int64_t n) {
  GRID_STRIDE(e, n) {
    int64_t off[4];
    g.offsets(e, off);
    out[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]];
  }
}

bool contiguous(const View& v) {
  int64_t expected = 1;
  for (size_t i = v.shape.size(); i-- > 0;) {
    if (v.shape[i] == 1) continue;
    if (v.strides[i] != expected) return false;
    expected *= v.shape[i];
  }
  return true;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// How a binary op's operands fit binary_bcast_kernel: `full` contiguous with the output's shape and
// `bcast` broadcast along the leading dimensions (inner > 0), or not at all (inner == 0).
struct TrailingBroadcast {
  const View* full = nullptr;
  const View* bcast = nullptr;
  bool bcast_first = false;
  int64_t inner = 0;
};
// The element count of v's trailing dimensions when v is contiguous over them and has stride 0
// over every leading dimension (a [N] bias viewed as [M, N]: N); 0 when v is not laid out so.
int64_t broadcast_inner(const View& v) {
  int64_t inner = 1;
  size_t d = v.shape.size();
  for (; d > 0 && (v.shape[d - 1] == 1 || v.strides[d - 1] == inner); --d) inner *= v.shape[d - 1];
  for (; d > 0; --d)
    if (v.shape[d - 1] != 1 && v.strides[d - 1] != 0) return 0;
  return inner;
}
TrailingBroadcast trailing_broadcast(const View& a, const View& b) {
  TrailingBroadcast tb;
  if (contiguous(a) && (tb.inner = broadcast_inner(b)) > 0) {
    tb.full = &a;
    tb.bcast = &b;
  } else if (contiguous(b) && (tb.inner = broadcast_inner(a)) > 0) {
    tb.full = &b;
    tb.bcast = &a;
    tb.bcast_first = true;
  }
  return tb;
}

// Same-size integer types for moving elements whose arithmetic does not matter.
template <size_t Bytes> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };

// A fused chain (core/fused_program.hpp): per element, the instructions in f32 registers, each
// the unfused kernel's own function, rounded to its output's dtype as a store and reload would.
__device__ __forceinline__ float round_to(DType dt, float v) {
  switch (dt) {
    case DType::F16: return widen(narrow<Half>(v));
    case DType::BF16: return widen(narrow<BFloat16>(v));
    default: return v;
  }
}
__device__ __forceinline__ void store_as(void* p, int64_t i, DType dt, float v) {
  switch (dt) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::F16: static_cast<Half*>(p)[i] = narrow<Half>(v); break;
    default: static_cast<BFloat16*>(p)[i] = narrow<BFloat16>(v); break;
  }
}
// Register reads and offsets with compile-time indices only (loops unrolled to the maximum and
// guarded): an array indexed at run time would live in local memory, not in registers.
__device__ __forceinline__ float pick(const float (&reg)[kFuseMaxInstrs], int i) {
  float v = 0.f;
#pragma unroll
  for (int k = 0; k < kFuseMaxInstrs; ++k) v = k == i ? reg[k] : v;
  return v;
}
__device__ __forceinline__ int64_t offset_of(const int64_t* strides, const int64_t (&index)[kFuseMaxRank], int rank) {
  int64_t off = 0;
#pragma unroll
  for (int d = 0; d < kFuseMaxRank; ++d)
    if (d < rank) off += index[d] * strides[d];
  return off;
}
// One instruction's op, out of line: inlining the op switches once per unrolled instruction
// would multiply the kernel's size by kFuseMaxInstrs.
__device__ __noinline__ float fused_op(const FusedInstr& ins, float a, float b) {
  if (ins.kind == FusedInstr::Unary) return unary_op<float>(UnaryOp(ins.op), a, ins.p0, ins.p1);
  if (ins.kind == FusedInstr::Binary) return binary_op<float>(BinaryOp(ins.op), a, b);
  return a;
}

template <bool kContiguous>
__global__ void fused_kernel(const __grid_constant__ FusedProgram p) {
  GRID_STRIDE(e, p.numel) {
    int64_t index[kFuseMaxRank] = {};
    if (!kContiguous) {
      int64_t rem = e;
#pragma unroll
      for (int d = kFuseMaxRank - 1; d >= 0; --d)
        if (d < p.rank) {
          index[d] = rem % p.shape[d];
          rem /= p.shape[d];
        }
    }
    float reg[kFuseMaxInstrs] = {};
    auto operand = [&](int8_t x) -> float {
      if (x >= 0) return pick(reg, x);
      const FusedOperand& in = p.inputs[-x - 1];
      return load_as<float>(in.data, kContiguous ? e : offset_of(in.strides, index, p.rank), in.dtype);
    };
#pragma unroll
    for (int k = 0; k < kFuseMaxInstrs; ++k) {
      if (k >= p.ninstrs) break;
      const FusedInstr& ins = p.instrs[k];
      const float a = operand(ins.a), b = ins.kind == FusedInstr::Binary ? operand(ins.b) : 0.f;
      reg[k] = round_to(ins.dtype, fused_op(ins, a, b));
    }
#pragma unroll
    for (int o = 0; o < kFuseMaxOutputs; ++o) {
      if (o >= p.noutputs) break;
      const FusedOperand& out = p.outputs[o];
      store_as(out.data, kContiguous ? e : offset_of(out.strides, index, p.rank), out.dtype, pick(reg, p.output_reg[o]));
    }
  }
}

}  // namespace

void launch_copy(const ExecContext& ctx, const View& dst, const View& src) {
  const int64_t n = dst.numel();
  if (!n) return;
  auto g = make_geometry<2>(dst.shape, {&dst.strides, &src.strides});
  if (dst.dtype == src.dtype) {
    if (contiguous(dst) && contiguous(src)) {
      NX_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, size_t(n) * dtype_size(dst.dtype), cudaMemcpyDeviceToDevice, stream_of(ctx)));
      return;
    }
    if (copy_rows_vectorized(ctx, dst, src, g)) return;
    dispatch_bits(dtype_size(dst.dtype), [&](auto tag) {
      using B = decltype(tag);
      copy_same_kernel<B><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(static_cast<B*>(dst.data), static_cast<const B*>(src.data), g, n);
    });
  } else {
    const bool contig = contiguous(dst) && contiguous(src) && aligned16(dst.data) && aligned16(src.data);
    dispatch_storage_dtype(dst.dtype, [&](auto dtag) {
      using D = decltype(dtag);
      dispatch_storage_dtype(src.dtype, [&](auto stag) {
        using S = decltype(stag);
        if (contig)
          cast_contig_kernel<D, S><<<blocks_for(n, 2 * cast_pack<D, S>()), kThreads, 0, stream_of(ctx)>>>(
              static_cast<D*>(dst.data), static_cast<const S*>(src.data), n);
        else
          copy_kernel<D, S><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(static_cast<D*>(dst.data),
                                                                            static_cast<const S*>(src.data), g, n);
      });
    });
  }
  NX_CUDA_LAUNCH_CHECK();
}

void launch_fill(const ExecContext& ctx, const View& dst, double value) {
  const int64_t n = dst.numel();
  if (!n) return;
  auto g = make_geometry<1>(dst.shape, {&dst.strides});
  if (is_storage_only(dst.dtype)) {  // the byte is made on the host, with the CPU's conversion
    const uint8_t bits = dst.dtype == DType::I8 ? uint8_t(wrapping_from_double<int8_t>(value)) : f8_from_f64(value, dst.dtype);
    fill_kernel<uint8_t><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(static_cast<uint8_t*>(dst.data), g, n, bits);
    NX_CUDA_LAUNCH_CHECK();
    return;
  }
  dispatch_dtype(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, Half>) v = Half{f32_to_f16(float(value))};
    else if constexpr (std::is_same_v<T, BFloat16>) v = BFloat16{f32_to_bf16(float(value))};
    else if constexpr (std::is_same_v<T, bool>) v = value != 0;
    else if constexpr (std::is_integral_v<T>) v = wrapping_from_double<T>(value);  // as the CPU's fill; T(NaN) is UB
    else v = T(value);
    using B = typename Bits<sizeof(T)>::type;
    B bits;
    std::memcpy(&bits, &v, sizeof(T));
    fill_kernel<B><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(static_cast<B*>(dst.data), g, n, bits);
  });
  NX_CUDA_LAUNCH_CHECK();
}

template <class T>
static void unary_typed(const ExecContext& ctx, UnaryOp op, const View& dst, const View& src, double p0, double p1) {
  const int64_t n = dst.numel();
  T* out = static_cast<T*>(dst.data);
  const T* x = static_cast<const T*>(src.data);
  using C = Compute<T>;
  // Integer scalars without an undefined out-of-range conversion: clamp bounds saturate, the
  // operands of add/mul/pow wrap (as the CPU kernels convert them).
  auto scalar = [op](double v) -> C {
    if constexpr (std::is_integral_v<C>) return op == UnaryOp::Clamp ? saturating_from_double<C>(v) : wrapping_from_double<C>(v);
    else return C(v);
  };
  const C s0 = scalar(p0), s1 = scalar(p1);
  if (contiguous(src) && aligned16(out) && aligned16(x)) {
    unary_contig_kernel<T><<<blocks_for(n, Vec16<T>::N * 2), kThreads, 0, stream_of(ctx)>>>(op, out, x, n, s0, s1);
  } else {
    auto g = make_geometry<2>(dst.shape, {&dst.strides, &src.strides});
    unary_strided_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(op, out, x, g, n, s0, s1);
  }
  NX_CUDA_LAUNCH_CHECK();
}

void launch_unary(const ExecContext& ctx, UnaryOp op, const View& dst, const View& src, double p0, double p1) {
  if (!dst.numel()) return;
  switch (dst.dtype) {
    case DType::F32: unary_typed<float>(ctx, op, dst, src, p0, p1); break;
    case DType::F64: unary_typed<double>(ctx, op, dst, src, p0, p1); break;
    case DType::F16: unary_typed<Half>(ctx, op, dst, src, p0, p1); break;
    case DType::BF16: unary_typed<BFloat16>(ctx, op, dst, src, p0, p1); break;
    case DType::I32: unary_typed<int32_t>(ctx, op, dst, src, p0, p1); break;
    case DType::I64: unary_typed<int64_t>(ctx, op, dst, src, p0, p1); break;
    default: fail(NX_ERR_DTYPE, current_api(), ": no CUDA unary kernel for ", dtype_name(dst.dtype));
  }
}

template <class T>
static void binary_typed(const ExecContext& ctx, BinaryOp op, const View& dst, const View& a, const View& b) {
  const int64_t n = dst.numel();
  T* out = static_cast<T*>(dst.data);
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  const TrailingBroadcast tb = trailing_broadcast(a, b);
  if (contiguous(a) && contiguous(b) && aligned16(out) && aligned16(pa) && aligned16(pb)) {
    binary_contig_kernel<T><<<blocks_for(n, Vec16<T>::N * 2), kThreads, 0, stream_of(ctx)>>>(op, out, pa, pb, n);
  } else if (tb.inner && aligned16(out) && aligned16(tb.full->data)) {
    const T* full = static_cast<const T*>(tb.full->data);
    const T* bcast = static_cast<const T*>(tb.bcast->data);
    const unsigned blocks = blocks_for(n, Vec16<T>::N * 2);
    if (tb.inner % Vec16<T>::N == 0 && aligned16(bcast))
      binary_bcast_kernel<T, true><<<blocks, kThreads, 0, stream_of(ctx)>>>(op, out, full, bcast, tb.bcast_first, n, tb.inner);
    else
      binary_bcast_kernel<T, false><<<blocks, kThreads, 0, stream_of(ctx)>>>(op, out, full, bcast, tb.bcast_first, n, tb.inner);
  } else {
    auto g = make_geometry<3>(dst.shape, {&dst.strides, &a.strides, &b.strides});
    binary_strided_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(op, out, pa, pb, g, n);
  }
  NX_CUDA_LAUNCH_CHECK();
}

void launch_binary(const ExecContext& ctx, BinaryOp op, const View& dst, const View& a, const View& b) {
  const int64_t n = dst.numel();
  if (!n) return;
  if (is_comparison(op)) {
    auto g = make_geometry<3>(dst.shape, {&dst.strides, &a.strides, &b.strides});
    dispatch_dtype(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      compare_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(op, static_cast<bool*>(dst.data),
          static_cast<const T*>(a.data), static_cast<const T*>(b.data), g, n);
    });
    NX_CUDA_LAUNCH_CHECK();
    return;
  }
  if (a.dtype != dst.dtype || b.dtype != dst.dtype) {  // two floating dtypes: convert while loading
    auto g = make_geometry<3>(dst.shape, {&dst.strides, &a.strides, &b.strides});
    const bool contig = contiguous(a) && contiguous(b);
    const TrailingBroadcast tb = trailing_broadcast(a, b);
    const bool a_half = is_half(a.dtype), b_half = is_half(b.dtype);
    if (contig && dst.dtype == DType::F32 && ((a_half && b.dtype == DType::F32) || (b_half && a.dtype == DType::F32)) &&
        aligned16(dst.data) && aligned16(a.data) && aligned16(b.data)) {
      const View& h = a_half ? a : b;
      const float* f = static_cast<const float*>(a_half ? b.data : a.data);
      float* o = static_cast<float*>(dst.data);
      if (h.dtype == DType::F16)
        binary_half_f32_contig_kernel<Half><<<blocks_for(n, 8), kThreads, 0, stream_of(ctx)>>>(
            op, o, static_cast<const Half*>(h.data), f, a_half, n);
      else
        binary_half_f32_contig_kernel<BFloat16><<<blocks_for(n, 8), kThreads, 0, stream_of(ctx)>>>(
            op, o, static_cast<const BFloat16*>(h.data), f, a_half, n);
      NX_CUDA_LAUNCH_CHECK();
      return;
    }
    auto mixed = [&](auto tag) {
      using T = decltype(tag);
      if (contig)
        binary_mixed_contig_kernel<T><<<blocks_for(n, 4), kThreads, 0, stream_of(ctx)>>>(
            op, static_cast<T*>(dst.data), a.data, a.dtype, b.data, b.dtype, n);
      else if (tb.inner)
        binary_mixed_bcast_kernel<T><<<blocks_for(n, 4), kThreads, 0, stream_of(ctx)>>>(
            op, static_cast<T*>(dst.data), tb.full->data, tb.full->dtype, tb.bcast->data, tb.bcast->dtype,
            tb.bcast_first, n, tb.inner);
      else
        binary_mixed_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(op, static_cast<T*>(dst.data), a.data,
                                                                              a.dtype, b.data, b.dtype, g, n);
    };
    if (dst.dtype == DType::F32) mixed(float{});
    else if (dst.dtype == DType::F64) mixed(double{});
    else fail(NX_ERR_DTYPE, current_api(), ": no CUDA kernel for ", dtype_name(a.dtype), " and ", dtype_name(b.dtype),
              " into ", dtype_name(dst.dtype));
    NX_CUDA_LAUNCH_CHECK();
    return;
  }
  switch (dst.dtype) {
    case DType::F32: binary_typed<float>(ctx, op, dst, a, b); break;
    case DType::F64: binary_typed<double>(ctx, op, dst, a, b); break;
    case DType::F16: binary_typed<Half>(ctx, op, dst, a, b); break;
    case DType::BF16: binary_typed<BFloat16>(ctx, op, dst, a, b); break;
    case DType::I32: binary_typed<int32_t>(ctx, op, dst, a, b); break;
    case DType::I64: binary_typed<int64_t>(ctx, op, dst, a, b); break;
    case DType::Bool: binary_typed<bool>(ctx, op, dst, a, b); break;
    default: fail(NX_ERR_DTYPE, current_api(), ": no CUDA binary kernel for ", dtype_name(dst.dtype));
  }
}

void launch_where(const ExecContext& ctx, const View& dst, const View& cond, const View& a, const View& b) {
  const int64_t n = dst.numel();
  if (!n) return;
  auto g = make_geometry<4>(dst.shape, {&dst.strides, &cond.strides, &a.strides, &b.strides});
  dispatch_bits(dtype_size(dst.dtype), [&](auto tag) {
    using B = decltype(tag);
    where_kernel<B><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(static_cast<B*>(dst.data), static_cast<const bool*>(cond.data),
        static_cast<const B*>(a.data), static_cast<const B*>(b.data), g, n);
  });
  NX_CUDA_LAUNCH_CHECK();
}

void fused_elementwise(int device, void* stream, const FusedProgram& program, bool generated) {
  if (!program.numel) return;
  NX_CUDA_CHECK(cudaSetDevice(device));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (const void* kernel = generated ? generated_kernel(device, program) : nullptr) {
    FusedKernelArgs args = fused_kernel_args(program);
    void* params[] = {&args};
    const unsigned blocks = blocks_for(program.numel, args.vectorized ? 4 : 1);
    NX_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(blocks), dim3(kFusedThreads), params, 0, s));
    return;
  }
  if (program.contiguous) fused_kernel<true><<<blocks_for(program.numel), kThreads, 0, s>>>(program);
  else fused_kernel<false><<<blocks_for(program.numel), kThreads, 0, s>>>(program);
  NX_CUDA_LAUNCH_CHECK();
}

}  // namespace nx::cuda
