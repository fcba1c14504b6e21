// Kernel bodies shared by every ISA. Included by simd_<isa>.cpp, each compiled with its own
// target flags and defining NX_SIMD_NS (namespace), NX_SIMD_LABEL and NX_VEC_BYTES (vector
// width for the GEMM micro-kernel). Loops are written so that GCC vectorizes them (`omp simd`);
// the f32 transcendental functions are branch-free polynomial versions for that reason (max
// error a few ulp, checked against the f64 reference in tests/cpp/test_simd.cpp).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__))
#include <immintrin.h>
#endif

#include "cpu/simd.hpp"

namespace nx::cpu::NX_SIMD_NS {

// Every helper here lives in this per-ISA namespace: an inline std:: template instantiated in an
// AVX-512 translation unit could otherwise be picked by the linker for all callers (ODR), and
// fault on processors without AVX-512. Hence no std::vector/std::min/std::fill below.
// Element helpers called inside vector loops are forced inline (NX_ELEMENT): GCC keeps an `inline`
// function out of line when it judges it large (vexp<float> with its polynomial), and a loop that
// calls one does not vectorize.
#define NX_ELEMENT [[gnu::always_inline]] inline
template <class T> NX_ELEMENT T vmin(T a, T b) { return b < a ? b : a; }
template <class T> NX_ELEMENT T vmax(T a, T b) { return a < b ? b : a; }
template <class T> struct Buffer {
  T* p;
  explicit Buffer(size_t n) : p(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64))) {}
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// f16/bf16 are stored as themselves and computed in f32 (f32 and f64 in their own type): widen()
// converts a stored element to its compute type, store_narrow() rounds a computed value into one
// (to nearest even). The half versions call core's converters (core/dtype.hpp); flatten inlines
// them here, so that this ISA's object never emits an out-of-line copy of those extern inline
// functions that the linker could pick for every caller (the ODR note above).
template <class S> using ComputeOf = std::conditional_t<sizeof(S) == 2, float, S>;
inline float widen(float v) { return v; }
inline double widen(double v) { return v; }
__attribute__((flatten)) inline float widen(Half v) { return f16_to_f32(v.bits); }
__attribute__((flatten)) inline float widen(BFloat16 v) { return bf16_to_f32(v.bits); }
inline void store_narrow(float* dst, float v) { *dst = v; }
inline void store_narrow(double* dst, double v) { *dst = v; }
__attribute__((flatten)) inline void store_narrow(Half* dst, float v) { dst->bits = f32_to_f16(v); }
__attribute__((flatten)) inline void store_narrow(BFloat16* dst, float v) { dst->bits = f32_to_bf16(v); }

// Runs of n contiguous elements: widen_n / narrow_n convert kHalfLanes at a time with the vector
// unit (F16C's vcvtph2ps / vcvtps2ph, or their AVX-512 forms, for f16; shifts and the integer
// rounding of f32_to_bf16 for bf16), giving bit for bit what widen() / store_narrow() give, NaN
// payloads included (tests/cpp/test_simd.cpp, HalfConversionsBitExact). The scalar build converts
// one element at a time. Used for the runs the kernels convert: GEMM panels and the rounding of C,
// attention tiles and outputs, and (through the table's widen_f16 .. narrow_bf16) the elementwise
// tiles, fused chains and casts of cpu_backend.cpp and fused_elementwise.cpp.
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__))
constexpr int64_t kHalfLanes = NX_VEC_BYTES / 4;
typedef uint16_t HalfVec __attribute__((vector_size(kHalfLanes * 2)));
typedef uint32_t BitsVec __attribute__((vector_size(kHalfLanes * 4)));
typedef float FloatVec __attribute__((vector_size(kHalfLanes * 4)));
// F16C. AVX-512: the maskz forms with every lane set, as GCC 12's unmasked _mm512_cvtph_ps and
// _mm512_cvtps_ph pass _mm512_undefined_*(), which its -Wmaybe-uninitialized flags (GCC PR 105593).
#if defined(__AVX512F__)
inline FloatVec f16c_widen(HalfVec h) { return FloatVec(_mm512_maskz_cvtph_ps(0xffff, __m256i(h))); }
inline HalfVec f16c_narrow(FloatVec x) {
  return HalfVec(_mm512_maskz_cvtps_ph(0xffff, __m512(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#else
inline FloatVec f16c_widen(HalfVec h) { return FloatVec(_mm256_cvtph_ps(__m128i(h))); }
inline HalfVec f16c_narrow(FloatVec x) {
  return HalfVec(_mm256_cvtps_ph(__m256(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif
template <class V, class S> inline V load_vec(const S* s) { V v; std::memcpy(&v, s, sizeof(V)); return v; }
template <class V, class D> inline void store_vec(D* d, V v) { std::memcpy(d, &v, sizeof(V)); }
// All ones in the lanes holding a NaN.
inline BitsVec nan_lanes(FloatVec x) { return BitsVec(x != x); }

// vcvtph2ps quiets a signaling NaN (sets the f32 quiet bit 0x400000); f16_to_f32 keeps it clear,
// so the bit is cleared again in the NaN lanes whose f16 quiet bit (0x200) is clear.
inline void widen_block(float* d, const Half* s) {
  const HalfVec h = load_vec<HalfVec>(s);
  const BitsVec w = __builtin_convertvector(h, BitsVec);
  const BitsVec signaling = BitsVec((w & 0x7fff) > 0x7c00) & BitsVec((w & 0x200) == 0);
  store_vec(d, BitsVec(f16c_widen(h)) ^ (signaling & 0x400000));
}
inline void widen_block(float* d, const BFloat16* s) {
  store_vec(d, __builtin_convertvector(load_vec<HalfVec>(s), BitsVec) << 16);
}
// vcvtps2ph keeps the top of a NaN's payload; f32_to_f16 gives the sign and 0x7e00 alone, what
// vcvtps2ph makes of the f32 quiet NaN without payload (0x7fc00000), which NaN lanes become.
inline void narrow_block(Half* d, const float* s) {
  const BitsVec u = load_vec<BitsVec>(s), nan = nan_lanes(FloatVec(u));
  const BitsVec quiet = (u & 0x80000000u) | 0x7fc00000u;
  store_vec(d, f16c_narrow(FloatVec((u & ~nan) | (quiet & nan))));
}
// f32_to_bf16: the top half of u + 0x7fff + (bit 16 of u); a NaN is its top half with the quiet bit.
inline void narrow_block(BFloat16* d, const float* s) {
  const BitsVec u = load_vec<BitsVec>(s), nan = nan_lanes(FloatVec(u)), top = u >> 16;
  const BitsVec rounded = (u + 0x7fffu + (top & 1u)) >> 16;
  store_vec(d, __builtin_convertvector((rounded & ~nan) | ((top | 0x40u) & nan), HalfVec));
}
#else
constexpr int64_t kHalfLanes = 1;
template <class S> inline void widen_block(float* d, const S* s) { *d = widen(*s); }
template <class S> inline void narrow_block(S* d, const float* s) { store_narrow(d, *s); }
#endif

// dst[0, n) = src[0, n) in the compute type (a copy for f32 and f64).
template <class S>
inline void widen_n(ComputeOf<S>* dst, const S* src, int64_t n) {
  int64_t i = 0;
  if constexpr (sizeof(S) == 2) {
    for (; i + kHalfLanes <= n; i += kHalfLanes) widen_block(dst + i, src + i);
    if (i < n) {  // the tail through a zero-padded block
      S in[kHalfLanes] = {};
      float out[kHalfLanes];
      std::memcpy(in, src + i, size_t(n - i) * sizeof(S));
      widen_block(out, in);
      std::memcpy(dst + i, out, size_t(n - i) * sizeof(float));
    }
  } else {
    for (; i < n; ++i) dst[i] = src[i];
  }
}
// dst[0, n) = src[0, n) rounded to S (to nearest even; a copy for f32 and f64).
template <class S>
inline void narrow_n(S* dst, const ComputeOf<S>* src, int64_t n) {
  int64_t i = 0;
  if constexpr (sizeof(S) == 2) {
    for (; i + kHalfLanes <= n; i += kHalfLanes) narrow_block(dst + i, src + i);
    if (i < n) {
      float in[kHalfLanes] = {};
      S out[kHalfLanes];
      std::memcpy(in, src + i, size_t(n - i) * sizeof(float));
      narrow_block(out, in);
      std::memcpy(dst + i, out, size_t(n - i) * sizeof(S));
    }
  } else {
    for (; i < n; ++i) dst[i] = src[i];
  }
}

NX_ELEMENT float as_float(int32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
NX_ELEMENT int32_t as_int(float f) { int32_t i; std::memcpy(&i, &f, 4); return i; }

// exp for f32: range reduction x = k ln2 + r, |r| <= ln2/2, degree-7 Taylor on r.
// These element functions are always inlined: a loop that calls one out of line does not
// vectorize (GCC left exp_f32 out of line in scale_exp_f32 and softmax_kernel: the f32
// cross-entropy backward ran one element at a time, 10% of the CPU GPT step).
NX_ELEMENT float exp_f32(float x) {
  // hi: the largest float whose exp is finite (ln FLT_MAX rounded down); results below FLT_MIN
  // are flushed to 0.
  const float hi = 88.7228317f, lo = -87.3365f;
  float xc = vmin(vmax(x, lo), hi);
  xc = xc != xc ? 0.f : xc;  // NaN (returned below) must not reach the float-to-int conversion
  // round to nearest by the 1.5 * 2^23 trick: plain arithmetic, so the loop vectorizes (a call
  // to nearbyintf would not)
  float k = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;
  float r = xc - k * 0.693145751953125f;
  r = r - k * 1.428606765330187045e-06f;
  float p = 1.f / 5040.f;
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  // 2^k in two halves: k reaches 128 near the top of the range, where 2^k alone is not a float.
  int32_t k1 = int32_t(k) >> 1, k2 = int32_t(k) - k1;
  float y = (p * as_float((k1 + 127) << 23)) * as_float((k2 + 127) << 23);
  y = x > hi ? std::numeric_limits<float>::infinity() : y;
  y = x < lo ? 0.f : y;
  return x != x ? x : y;
}

// log for f32 (Cephes logf): x = m 2^e, m in [sqrt(1/2), sqrt(2)).
NX_ELEMENT float log_f32(float x) {
  float xs = x < 1.17549435e-38f ? x * 8388608.f : x;  // lift subnormals
  float eadj = x < 1.17549435e-38f ? -23.f : 0.f;
  int32_t u = as_int(xs);
  float e = float(((u >> 23) & 0xff) - 126) + eadj;
  float m = as_float((u & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  bool small = m < 0.707106781186547524f;
  e = small ? e - 1.f : e;
  m = small ? m + m - 1.f : m - 1.f;
  float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  float r = m + y + 0.693359375f * e;
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  r = x == 0.f ? -std::numeric_limits<float>::infinity() : r;
  r = x < 0.f ? std::numeric_limits<float>::quiet_NaN() : r;
  return x != x ? x : r;
}

// tanh for f32: polynomial near 0 (no cancellation), 1 - 2/(e^{2|x|}+1) elsewhere.
NX_ELEMENT float tanh_f32(float x) {
  float ax = std::fabs(x);
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = x + x * z * p;
  float big = 1.f - 2.f / (exp_f32(2.f * ax) + 1.f);
  big = std::copysign(big, x);
  return ax < 0.625f ? small : big;
}

// erf for f32: |x| < 1 the odd Taylor series x P(x^2) (12 terms, truncation < 1e-10 relative);
// elsewhere Abramowitz-Stegun 7.1.26 (absolute error < 1.5e-7), odd-extended. A&S alone cancels
// in 1 - (...) near 0 and loses all relative accuracy there.
NX_ELEMENT float erf_f32(float x) {
  float ax = std::fabs(x);
  float t = 1.f / (1.f + 0.3275911f * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  float r = 1.f - p * t * exp_f32(-ax * ax);
  float z = x * x;
  float q = -1.2290555301717926e-09f;
  q = q * z + 1.4807192815879218e-08f;
  q = q * z - 1.6365844691234924e-07f;
  q = q * z + 1.6462114365889246e-06f;
  q = q * z - 1.492565035840625e-05f;
  q = q * z + 0.00012055332981789664f;
  q = q * z - 0.0008548327023450852f;
  q = q * z + 0.005223977625442188f;
  q = q * z - 0.026866170645131252f;
  q = q * z + 0.11283791670955126f;
  q = q * z - 0.37612638903183754f;
  q = q * z + 1.1283791670955126f;
  return ax < 1.f ? x * q : std::copysign(r, x);
}

template <class T> NX_ELEMENT T vexp(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x); else return std::exp(x);
}
template <class T> NX_ELEMENT T vlog(T x) {
  if constexpr (std::is_same_v<T, float>) return log_f32(x); else return std::log(x);
}
template <class T> NX_ELEMENT T vtanh(T x) {
  if constexpr (std::is_same_v<T, float>) return tanh_f32(x); else return std::tanh(x);
}
template <class T> NX_ELEMENT T verf(T x) {
  if constexpr (std::is_same_v<T, float>) return erf_f32(x); else return std::erf(x);
}
template <class T> NX_ELEMENT T vsigmoid(T x) { return T(1) / (T(1) + vexp(-x)); }
template <class T> NX_ELEMENT T vsoftplus(T x) {
  // torch's threshold: x > 20 gives x itself. log1p(u) for f32 as log(w) u / (w - 1), w = 1 + u
  // (u itself where w rounds to 1): log(1 + u) alone loses u's low bits for very negative x.
  T u = vexp(-std::fabs(x)), l1p;
  if constexpr (std::is_same_v<T, float>) {
    T w = T(1) + u;
    l1p = w == T(1) ? u : vlog(w) * (u / (w - T(1)));
  } else {
    l1p = std::log1p(u);
  }
  T sp = vmax(x, T(0)) + l1p;
  return x > T(20) ? x : sp;
}

// Activation derivatives for the fused backward ops (grad * f'(x)), in torch's gelu_backward and
// silu_backward formulas, so that infinities and NaN give what torch gives.
template <class T> NX_ELEMENT T gelu_derivative(T v) {
  T cdf = T(0.5) * (T(1) + verf(v * T(0.70710678118654752440)));
  T pdf = T(0.39894228040143267794) * vexp(T(-0.5) * v * v);
  return cdf + v * pdf;
}
template <class T> NX_ELEMENT T gelu_tanh_derivative(T v) {
  const T beta = T(0.79788456080286535588), kappa = T(0.044715);
  T t = vtanh(beta * (v + kappa * v * v * v));
  return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * beta * (T(1) + T(3) * kappa * v * v);
}
template <class T> NX_ELEMENT T silu_derivative(T v) {
  T s = vsigmoid(v);
  return s * (T(1) + v * (T(1) - s));
}

// Every element of a unary or binary row is computed by the one vector loop of its op (the loop in
// map1 / map2), which is only ever given whole blocks of kLanes elements: a row's tail is padded
// to a block, and strided or broadcast operands are gathered into blocks first. GCC contracts
// multiplies and adds into FMAs differently in a vector loop, in its scalar remainder and in a
// strided or broadcast loop, so gelu(x) of one value used to differ in its last bit between the
// body of a row, its tail and a strided view. A result now depends on the operand values only, not
// on where they lie or how the caller cuts its rows: compiled plans rely on it, as their fused
// chains (src/cpu/fused_elementwise.cpp) compute in tiles of their own and must give eager's bits.
constexpr int64_t kLanes = 16;    // a multiple of every table's vector length (AVX-512: 16 f32)
constexpr int64_t kGather = 256;  // elements per gathered block (a multiple of kLanes)

// A broadcast operand (stride 0) fills its block buffer once, for every block of the row.
template <class T>
inline void fill_broadcast(T* buf, const T* x, int64_t sx, int64_t n) {
  if (sx != 0) return;
  const T v = x[0];
  for (int64_t j = 0, e = vmin(kGather, (n + kLanes - 1) / kLanes * kLanes); j < e; ++j) buf[j] = v;
}
// Block [i, i + m) of an operand with stride sx, padded to `padded` elements: the operand itself
// when it is contiguous and the block whole, else buf (filled here, or by fill_broadcast).
template <class T>
inline const T* block_of(T* buf, const T* x, int64_t sx, int64_t i, int64_t m, int64_t padded) {
  if (sx == 1 && m == padded) return x + i;
  if (sx == 0) return buf;
  for (int64_t j = 0; j < m; ++j) buf[j] = x[(i + j) * sx];
  for (int64_t j = m; j < padded; ++j) buf[j] = T(0);
  return buf;
}
// The blocks of a row of n: the contiguous whole lanes at once (when every operand is contiguous),
// then kGather at a time.
inline int64_t block_size(int64_t i, int64_t body, int64_t n) { return i < body ? body - i : vmin(kGather, n - i); }
inline int64_t padded_size(int64_t m) { return (m + kLanes - 1) / kLanes * kLanes; }

template <class T, class F>
inline void map1(T* out, const T* x, int64_t sx, int64_t n, F f) {
  alignas(64) T xb[kGather], ob[kGather];
  const int64_t body = sx == 1 ? n - n % kLanes : 0;
  fill_broadcast(xb, x, sx, n);
  for (int64_t i = 0, m; i < n; i += m) {
    m = block_size(i, body, n);
    const int64_t padded = padded_size(m);
    const T* xp = block_of(xb, x, sx, i, m, padded);
    T* op = m == padded ? out + i : ob;
    if (padded % kLanes != 0) __builtin_unreachable();
#pragma omp simd
    for (int64_t j = 0; j < padded; ++j) op[j] = f(xp[j]);
    if (op == ob)
      for (int64_t j = 0; j < m; ++j) out[i + j] = ob[j];
  }
}

template <class T>
void unary_kernel(UnaryOp op, T* out, const T* x, int64_t sx, int64_t n, T p0, T p1) {
  switch (op) {
    case UnaryOp::Neg: map1(out, x, sx, n, [](T v) { return -v; }); break;
    case UnaryOp::Abs: map1(out, x, sx, n, [](T v) { return std::fabs(v); }); break;
    case UnaryOp::Exp: map1(out, x, sx, n, [](T v) { return vexp(v); }); break;
    case UnaryOp::Log: map1(out, x, sx, n, [](T v) { return vlog(v); }); break;
    case UnaryOp::Sqrt: map1(out, x, sx, n, [](T v) { return std::sqrt(v); }); break;
    case UnaryOp::Rsqrt: map1(out, x, sx, n, [](T v) { return T(1) / std::sqrt(v); }); break;
    case UnaryOp::Sin: map1(out, x, sx, n, [](T v) { return std::sin(v); }); break;
    case UnaryOp::Cos: map1(out, x, sx, n, [](T v) { return std::cos(v); }); break;
    case UnaryOp::Tanh: map1(out, x, sx, n, [](T v) { return vtanh(v); }); break;
    case UnaryOp::Sinh:
      map1(out, x, sx, n, [](T v) {
        if constexpr (std::is_same_v<T, float>) {
          // small |x|: series avoids the cancellation of (e^x - e^-x)/2
          T z = v * v, s = v + v * z * (T(1) / 6 + z * (T(1) / 120 + z * (T(1) / 5040)));
          T e = vexp(std::fabs(v)), b = std::copysign(T(0.5) * (e - T(1) / e), v);
          return std::fabs(v) < T(0.5) ? s : b;
        } else {
          return std::sinh(v);
        }
      });
      break;
    case UnaryOp::Cosh:
      map1(out, x, sx, n, [](T v) { T e = vexp(std::fabs(v)); return T(0.5) * (e + T(1) / e); });
      break;
    case UnaryOp::Sigmoid: map1(out, x, sx, n, [](T v) { return vsigmoid(v); }); break;
    case UnaryOp::Relu: map1(out, x, sx, n, [](T v) { return v <= T(0) ? T(0) : v; }); break;  // NaN stays NaN
    case UnaryOp::LeakyRelu: map1(out, x, sx, n, [p0](T v) { return v > T(0) ? v : v * p0; }); break;
    case UnaryOp::Gelu:
      map1(out, x, sx, n, [](T v) { return T(0.5) * v * (T(1) + verf(v * T(0.70710678118654752440))); });
      break;
    case UnaryOp::GeluTanh:
      map1(out, x, sx, n, [](T v) {
        T inner = T(0.79788456080286535588) * (v + T(0.044715) * v * v * v);
        return T(0.5) * v * (T(1) + vtanh(inner));
      });
      break;
    case UnaryOp::Silu: map1(out, x, sx, n, [](T v) { return v * vsigmoid(v); }); break;
    case UnaryOp::Softplus: map1(out, x, sx, n, [](T v) { return vsoftplus(v); }); break;
    case UnaryOp::Mish: map1(out, x, sx, n, [](T v) { return v * vtanh(vsoftplus(v)); }); break;
    case UnaryOp::Cone: map1(out, x, sx, n, [](T v) { return T(1) - std::fabs(v - T(1)); }); break;
    case UnaryOp::ParabolicCone: map1(out, x, sx, n, [](T v) { return v * (T(2) - v); }); break;
    case UnaryOp::ParCon: map1(out, x, sx, n, [p0](T v) { return T(1) - std::pow(std::fabs(v - T(1)), p0); }); break;
    case UnaryOp::Clamp:
      map1(out, x, sx, n, [p0, p1](T v) { return v != v ? v : vmin(vmax(v, p0), p1); });
      break;
    case UnaryOp::AddScalar: map1(out, x, sx, n, [p0](T v) { return v + p0; }); break;
    case UnaryOp::MulScalar: map1(out, x, sx, n, [p0](T v) { return v * p0; }); break;
    case UnaryOp::PowScalar: map1(out, x, sx, n, [p0](T v) { return std::pow(v, p0); }); break;
    case UnaryOp::Square: map1(out, x, sx, n, [](T v) { return v * v; }); break;
    case UnaryOp::Reciprocal: map1(out, x, sx, n, [](T v) { return T(1) / v; }); break;
    case UnaryOp::Sign:
      map1(out, x, sx, n, [](T v) { return v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0)); });
      break;
    case UnaryOp::Erf: map1(out, x, sx, n, [](T v) { return verf(v); }); break;
    case UnaryOp::Step: map1(out, x, sx, n, [](T v) { return v > T(0) ? T(1) : T(0); }); break;
  }
}

template <class T, class F>
inline void map2(T* out, const T* a, int64_t sa, const T* b, int64_t sb, int64_t n, F f) {
  alignas(64) T ab[kGather], bb[kGather], ob[kGather];
  const int64_t body = sa == 1 && sb == 1 ? n - n % kLanes : 0;
  fill_broadcast(ab, a, sa, n);
  fill_broadcast(bb, b, sb, n);
  for (int64_t i = 0, m; i < n; i += m) {
    m = block_size(i, body, n);
    const int64_t padded = padded_size(m);
    const T* ap = block_of(ab, a, sa, i, m, padded);
    const T* bp = block_of(bb, b, sb, i, m, padded);
    T* op = m == padded ? out + i : ob;
    if (padded % kLanes != 0) __builtin_unreachable();
#pragma omp simd
    for (int64_t j = 0; j < padded; ++j) op[j] = f(ap[j], bp[j]);
    if (op == ob)
      for (int64_t j = 0; j < m; ++j) out[i + j] = ob[j];
  }
}

template <class T>
void binary_kernel(BinaryOp op, T* out, const T* a, int64_t sa, const T* b, int64_t sb, int64_t n) {
  switch (op) {
    case BinaryOp::Add: map2(out, a, sa, b, sb, n, [](T x, T y) { return x + y; }); break;
    case BinaryOp::Sub: map2(out, a, sa, b, sb, n, [](T x, T y) { return x - y; }); break;
    case BinaryOp::Mul: map2(out, a, sa, b, sb, n, [](T x, T y) { return x * y; }); break;
    case BinaryOp::Div: map2(out, a, sa, b, sb, n, [](T x, T y) { return x / y; }); break;
    case BinaryOp::Pow: map2(out, a, sa, b, sb, n, [](T x, T y) { return std::pow(x, y); }); break;
    case BinaryOp::Maximum:
      map2(out, a, sa, b, sb, n, [](T x, T y) { return (x != x || x > y) ? x : (y != y ? y : vmax(x, y)); });
      break;
    case BinaryOp::Minimum:
      map2(out, a, sa, b, sb, n, [](T x, T y) { return (x != x || x < y) ? x : (y != y ? y : vmin(x, y)); });
      break;
    case BinaryOp::AddRelu:
      // a NaN x is returned as itself: x86 gives the first operand's NaN when both are NaN, and GCC
      // orders the operands of x + y differently in the gathered loop, so x + y alone is not stable
      map2(out, a, sa, b, sb, n, [](T x, T y) { T s = x != x ? x + x : x + y; return s <= T(0) ? T(0) : s; });
      break;
    case BinaryOp::AddGelu:
      map2(out, a, sa, b, sb, n, [](T x, T y) { T s = x + y; return T(0.5) * s * (T(1) + verf(s * T(0.70710678118654752440))); });
      break;
    case BinaryOp::AddGeluTanh:
      map2(out, a, sa, b, sb, n, [](T x, T y) {
        T s = x + y, inner = T(0.79788456080286535588) * (s + T(0.044715) * s * s * s);
        return T(0.5) * s * (T(1) + vtanh(inner));
      });
      break;
    case BinaryOp::MulTanh: map2(out, a, sa, b, sb, n, [](T x, T y) { return x * vtanh(y); }); break;
    case BinaryOp::SiluMul: map2(out, a, sa, b, sb, n, [](T x, T y) { return x * vsigmoid(x) * y; }); break;
    case BinaryOp::GeluBackward: map2(out, a, sa, b, sb, n, [](T g, T x) { return g * gelu_derivative(x); }); break;
    case BinaryOp::GeluTanhBackward:
      map2(out, a, sa, b, sb, n, [](T g, T x) { return g * gelu_tanh_derivative(x); });
      break;
    case BinaryOp::SiluBackward: map2(out, a, sa, b, sb, n, [](T g, T x) { return g * silu_derivative(x); }); break;
    default: break;  // comparisons are handled by the generic path
  }
}

template <class T>
double sum_kernel(const T* x, int64_t n) {
  // Blocks of 1024 summed with the vector unit, blocks combined in double: error grows with
  // the block, not with n.
  double total = 0;
  for (int64_t start = 0; start < n; start += 1024) {
    int64_t end = vmin(n, start + 1024);
    T acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = start; i < end; ++i) acc += x[i];
    total += double(acc);
  }
  return total;
}

template <class T>
void softmax_kernel(T* out, const T* x, int64_t n, bool log) {
  T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = vmax(mx, x[i]);
  if (mx == -std::numeric_limits<T>::infinity()) mx = 0;  // all -inf: avoid inf - inf
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    T e = vexp(x[i] - mx);
    out[i] = e;
    s += e;
  }
  if (log) {
    // (x - max) - log(sum), not x - (max + log(sum)): the latter loses the low bits of x - max
    // when the logits are large (~ulp(max) absolute error).
    T ls = vlog(s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - mx) - ls;
  } else {
    T inv = T(1) / s;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] *= inv;
  }
}

double sum_exp_f32(const float* x, int64_t n, float shift) {
  double total = 0;
  for (int64_t start = 0; start < n; start += 1024) {
    const int64_t end = vmin(n, start + 1024);
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = start; i < end; ++i) acc += exp_f32(x[i] - shift);
    total += double(acc);
  }
  return total;
}

void scale_exp_f32(float* out, const float* x, int64_t n, float shift, float scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = scale * exp_f32(x[i] - shift);
}

// Lanes of running maxima with std::max's rule (m < x ? x : m: a NaN x is skipped), then the
// lanes folded with the same rule: max is exact, so any grouping gives the sequential result.
float max_f32(const float* x, int64_t n) {
  constexpr int64_t L = 16;
  float lane[L];
  for (int64_t j = 0; j < L; ++j) lane[j] = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + L <= n; i += L)
#pragma omp simd
    for (int64_t j = 0; j < L; ++j) lane[j] = lane[j] < x[i + j] ? x[i + j] : lane[j];
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < L; ++j) m = m < lane[j] ? lane[j] : m;
  for (; i < n; ++i) m = m < x[i] ? x[i] : m;
  return m;
}

// ---------------------------------------------------------------- clipping and Adam
double sumsq_f32(const float* x, int64_t n) {
  constexpr int64_t L = 8;
  double lane[L];
  for (int64_t j = 0; j < L; ++j) lane[j] = 0;
  int64_t i = 0;
  for (; i + L <= n; i += L)
#pragma omp simd
    for (int64_t j = 0; j < L; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
  for (int64_t j = 0; i + j < n; ++j) lane[j] += double(x[i + j]) * double(x[i + j]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// The step in the generic kernel's order (cpu/fused.cpp), on a vector of lanes or one float. std::sqrt
// does not vectorize here (errno), hence the vector square roots.
typedef float AdamVec __attribute__((vector_size(NX_VEC_BYTES)));
inline float adam_sqrt(float x) { return std::sqrt(x); }
#if defined(__AVX512F__)
inline AdamVec adam_sqrt(AdamVec x) { return AdamVec(_mm512_maskz_sqrt_ps(0xffff, __m512(x))); }  // maskz: GCC PR 105593
#elif defined(__AVX2__)
inline AdamVec adam_sqrt(AdamVec x) { return AdamVec(_mm256_sqrt_ps(__m256(x))); }
#else
inline AdamVec adam_sqrt(AdamVec x) {
  for (int j = 0; j < int(sizeof(AdamVec) / 4); ++j) x[j] = std::sqrt(x[j]);
  return x;
}
#endif
template <int MODE, class V>
inline void adam_update(V& w, V& m, V& v, V g, const AdamF32& a) {
  if constexpr (MODE == 1) g += a.wd * w;
  if constexpr (MODE == 2) w *= a.decay;
  m = a.b1 * m + (1.f - a.b1) * g;
  v = a.b2 * v + (1.f - a.b2) * g * g;
  w = w - a.step * (m / (adam_sqrt(v) * a.inv_sqrt_bc2 + a.eps));
}
template <int MODE>
void adam_run(float* p, float* m, float* v, const float* g, int64_t n, const AdamF32& a) {
  constexpr int64_t W = int64_t(sizeof(AdamVec) / 4);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    AdamVec w, mv, vv, gv;
    std::memcpy(&w, p + i, sizeof w), std::memcpy(&mv, m + i, sizeof mv), std::memcpy(&vv, v + i, sizeof vv);
    std::memcpy(&gv, g + i, sizeof gv);
    adam_update<MODE>(w, mv, vv, gv, a);
    std::memcpy(p + i, &w, sizeof w), std::memcpy(m + i, &mv, sizeof mv), std::memcpy(v + i, &vv, sizeof vv);
  }
  for (; i < n; ++i) adam_update<MODE>(p[i], m[i], v[i], g[i], a);
}
void adam_f32(float* p, float* m, float* v, const float* g, int64_t n, const AdamF32& a) {
  if (a.mode == 1) adam_run<1>(p, m, v, g, n, a);
  else if (a.mode == 2) adam_run<2>(p, m, v, g, n, a);
  else adam_run<0>(p, m, v, g, n, a);
}

// ---------------------------------------------------------------- GEMM
// Goto/BLIS structure: B packed in KC x NR panels, A in MR x KC panels, an MR x NR register
// micro-kernel of NV vectors per row. Vector width comes from NX_VEC_BYTES. AVX-512 has 32 vector
// registers: 6 x 4 accumulators (a 6 x 64 f32 tile) ran 9% faster than 6 x 2 on this project's
// 2-core Xeon (188 against 173 GFLOP/s a core at k = 128, peak 210; session 26), as each
// broadcast of A feeds four FMAs instead of two. AVX2's 16 registers hold 6 x 2.
template <class T> struct GemmShape {
  static constexpr int W = NX_VEC_BYTES / int(sizeof(T));
  static constexpr int NV = NX_VEC_BYTES >= 64 ? 4 : 2;
  static constexpr int MR = 6, NR = NV * W;
  static constexpr int64_t KC = 256, MC = 120, NC = 3072;
  typedef T vec __attribute__((vector_size(NX_VEC_BYTES)));
};

// A is a packed panel (element (i, p) at ap[p MR + i]) or, IN_PLACE, MR whole rows of a row-major
// A (at ap[i rsa + p]; see gemm_packed).
template <class T, bool IN_PLACE>
void micro_kernel(int64_t kc, const T* __restrict ap, int64_t rsa, const T* __restrict bp, T* c, int64_t ldc, int mr,
                  int nr, bool accumulate) {
  using G = GemmShape<T>;
  using V = typename G::vec;
  constexpr int W = G::W, MR = G::MR, NR = G::NR, NV = G::NV;
  const T* ar[MR];
  for (int i = 0; i < MR; ++i) ar[i] = IN_PLACE ? ap + i * rsa : ap + i;
  constexpr int64_t step = IN_PLACE ? 1 : MR;
  V acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (int64_t p = 0; p < kc; ++p) {
    V b[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&b[v], bp + p * NR + v * W, sizeof(V));
    for (int i = 0; i < MR; ++i) {
      V a = ar[i][p * step] - V{};  // a broadcast: x - (+0) folds to x (x + 0 would not: -0 + 0 = +0)
      for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v];
    }
  }
  if (mr == MR && nr == NR) {
    for (int i = 0; i < MR; ++i) {
      T* row = c + i * ldc;
      for (int v = 0; v < NV; ++v) {
        if (accumulate) {
          V cv;
          std::memcpy(&cv, row + v * W, sizeof(V));
          acc[i][v] += cv;
        }
        std::memcpy(row + v * W, &acc[i][v], sizeof(V));
      }
    }
    return;
  }
  T tile[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) std::memcpy(&tile[i][v * W], &acc[i][v], sizeof(V));
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : T(0)) + tile[i][j];
}

// One packed panel: dst[p * R + i] = src[i * rs + p * ps] widened, for i < width and p < kc, and
// zeros for width <= i < R (R: MR for A, with rs, ps = rsa, csa; NR for B, with csb, rsb). A run
// contiguous along the panel (B row-major) is widened at once; runs contiguous along k (A
// row-major, B transposed) of a half type are widened kChunk at a time into a buffer and
// transposed from it, and of f32/f64 transposed 8 keys at a time through registers (the kChunk
// buffer, which serves half types for their vector widening, measured 5-25% slower GEMMs there);
// other strides are gathered one element at a time.
template <int R, class T, class S>
inline void pack_panel(T* dst, const S* src, int64_t rs, int64_t ps, int64_t width, int64_t kc) {
  if (rs == 1) {
    if constexpr (std::is_same_v<S, T>) {
      if (width == R) {  // whole runs of a fixed size: inline moves, not a library memcpy per k
        for (int64_t p = 0; p < kc; ++p) std::memcpy(dst + p * R, src + p * ps, sizeof(T) * R);
        return;
      }
    }
    for (int64_t p = 0; p < kc; ++p) {
      widen_n(dst + p * R, src + p * ps, width);
      for (int64_t i = width; i < R; ++i) dst[p * R + i] = T(0);
    }
    return;
  }
  if constexpr (!std::is_same_v<S, T>) {
    if (ps == 1) {
      constexpr int64_t kChunk = 64;
      alignas(64) T rows[R][kChunk];
      for (int64_t p0 = 0; p0 < kc; p0 += kChunk) {
        const int64_t len = vmin(kChunk, kc - p0);
        for (int64_t i = 0; i < width; ++i) widen_n(rows[i], src + i * rs + p0, len);
        for (int64_t p = 0; p < len; ++p) {
          T* d = dst + (p0 + p) * R;
          for (int64_t i = 0; i < width; ++i) d[i] = rows[i][p];
          for (int64_t i = width; i < R; ++i) d[i] = T(0);
        }
      }
      return;
    }
  }
  if (ps == 1 && width == R) {
    // runs along k (a transposed B): 8 keys of every row at a time, so each row's reads are one
    // contiguous run and the writes fill whole panel rows
    constexpr int64_t kRun = 8;
    int64_t p0 = 0;
    for (; p0 + kRun <= kc; p0 += kRun) {
      T run[R][kRun];
      for (int64_t i = 0; i < R; ++i)
        for (int64_t p = 0; p < kRun; ++p) run[i][p] = widen(src[i * rs + p0 + p]);
      for (int64_t p = 0; p < kRun; ++p)
        for (int64_t i = 0; i < R; ++i) dst[(p0 + p) * R + i] = run[i][p];
    }
    for (; p0 < kc; ++p0)
      for (int64_t i = 0; i < R; ++i) dst[p0 * R + i] = widen(src[i * rs + p0]);
    return;
  }
  for (int64_t p = 0; p < kc; ++p) {
    int64_t i = 0;
    for (; i < width; ++i) dst[p * R + i] = widen(src[i * rs + p * ps]);
    for (; i < R; ++i) dst[p * R + i] = T(0);
  }
}

// The MR-row panels of a block of mc rows and kc keys of a transposed A (element (i, p) at
// a[p * csa + i]): row p of the block is one contiguous run that fills an MR-wide slice of every
// panel, so it is read in order (panel by panel, every k read a new cache line for MR values: the
// pack was 15-20% of an A^T B GEMM's time). The last panel's missing rows are zeros.
template <int MR, class T>
void pack_transposed_block(T* ap, const T* a, int64_t csa, int64_t mc, int64_t kc) {
  const int64_t whole = mc / MR, mpanels = (mc + MR - 1) / MR;
#pragma omp parallel for schedule(static) if (mpanels * kc * MR > 4096)
  for (int64_t p = 0; p < kc; ++p) {
    const T* row = a + p * csa;
    for (int64_t ip = 0; ip < whole; ++ip) std::memcpy(ap + ip * kc * MR + p * MR, row + ip * MR, sizeof(T) * MR);
    for (int64_t i = 0; i < MR && whole < mpanels; ++i)
      ap[whole * kc * MR + p * MR + i] = whole * MR + i < mc ? row[whole * MR + i] : T(0);
  }
}

// C (compute type T, row stride ldc) = A @ B, A and B stored as S and widened to T while they are
// packed: the packed panels and the micro-kernel are T, whatever the storage. A row-major f32/f64
// A is read in place: packing it cost one scalar copy per element, about a quarter of the
// multiply-adds' time at the small shapes of a CPU model (32 (m + n) / (m n) of it at 32 FMAs a
// cycle), and a parallel region per block of rows. A transposed A is still packed: read in
// place, each k was a new cache line and the GEMM 30% slower.
template <class T, class S>
void gemm_packed(T* c, int64_t ldc, const S* a, int64_t rsa, int64_t csa, const S* b, int64_t rsb, int64_t csb,
                 int64_t m, int64_t n, int64_t k) {
  using G = GemmShape<T>;
  constexpr int MR = G::MR, NR = G::NR;
  bool a_in_place = false;
  if constexpr (std::is_same_v<S, T>) a_in_place = csa == 1;
  // In place there is no A panel to keep in L2, so a block of rows is all of m. Packed, the blocks
  // are of even size (m = 128 made a block of 120 rows and one of 8: a parallel region of 4 tasks).
  const int64_t a_blocks = vmax<int64_t>(1, (m + G::MC - 1) / G::MC);
  const int64_t mc_max = a_in_place ? m : ((m + a_blocks - 1) / a_blocks + MR - 1) / MR * MR;
  Buffer<T> bpack(size_t(G::KC) * size_t(((vmin(n, G::NC) + NR - 1) / NR) * NR));
  // in place, apack holds only the last rows when they are fewer than MR (the kernel reads MR rows)
  Buffer<T> apack(a_in_place ? size_t(m % MR ? G::KC * MR : 0)
                             : size_t(G::KC) * size_t(((vmin(m, mc_max) + MR - 1) / MR) * MR));
  for (int64_t jc = 0; jc < n; jc += G::NC) {
    int64_t nc = vmin(G::NC, n - jc);
    int64_t npanels = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < k; pc += G::KC) {
      int64_t kc = vmin(G::KC, k - pc);
      T* bp = bpack.p;
#pragma omp parallel for schedule(static) if (npanels * kc * NR > 4096)
      for (int64_t jp = 0; jp < npanels; ++jp) {
        int64_t j0 = jc + jp * NR;
        pack_panel<NR>(bp + jp * kc * NR, b + pc * rsb + j0 * csb, csb, rsb, vmin<int64_t>(NR, n - j0), kc);
      }
      for (int64_t ic = 0; ic < m; ic += mc_max) {
        int64_t mc = vmin(mc_max, m - ic);
        int64_t mpanels = (mc + MR - 1) / MR;
        T* ap = apack.p;
        bool a_transposed = false;  // A^T: its rows contiguous along m (f32/f64 only)
        if constexpr (std::is_same_v<S, T>) a_transposed = !a_in_place && rsa == 1;
        if (a_transposed) {
          if constexpr (std::is_same_v<S, T>) pack_transposed_block<MR>(ap, a + ic + pc * csa, csa, mc, kc);
        } else if (!a_in_place) {
#pragma omp parallel for schedule(static) if (mpanels * kc * MR > 4096)
          for (int64_t ip = 0; ip < mpanels; ++ip) {
            int64_t i0 = ic + ip * MR;
            pack_panel<MR>(ap + ip * kc * MR, a + i0 * rsa + pc * csa, rsa, csa, vmin<int64_t>(MR, m - i0), kc);
          }
        } else if (m % MR) {
          pack_panel<MR>(ap, a + (m - m % MR) * rsa + pc, rsa, 1, m % MR, kc);
        }
        bool accumulate = pc > 0;
        // The threads split the column panels (each reads all of this A block, its B panels stay in
        // L1) or, where B's panels are few and small enough to stay in L2 (<= 256 KB) while A has
        // more row panels, the row panels (each reads its share of A and all of B): split by
        // columns, both threads streamed all of a large in-place A in the CPU GPT's backward GEMMs.
        const bool rows_split = mpanels > npanels && npanels * kc * NR * int64_t(sizeof(T)) <= (int64_t(256) << 10);
#pragma omp parallel for schedule(static) if (mpanels * npanels * kc > 4096)
        for (int64_t task = 0; task < mpanels * npanels; ++task) {
          const int64_t jp = rows_split ? task % npanels : task / mpanels;
          const int64_t ip = rows_split ? task / npanels : task % mpanels;
          int64_t i0 = ic + ip * MR, j0 = jc + jp * NR;
          const int mr = int(vmin<int64_t>(MR, m - i0)), nr = int(vmin<int64_t>(NR, n - j0));
          T* ct = c + i0 * ldc + j0;
          const T* bpanel = bp + jp * kc * NR;
          if (a_in_place && mr == MR)
            micro_kernel<T, true>(kc, reinterpret_cast<const T*>(a) + i0 * rsa + pc, rsa, bpanel, ct, ldc, mr, nr,
                                  accumulate);
          else  // packed: every panel, or in place the last rows' (apack's only panel)
            micro_kernel<T, false>(kc, a_in_place ? ap : ap + ip * kc * MR, 0, bpanel, ct, ldc, mr, nr, accumulate);
        }
      }
    }
  }
}

// C[m,n] (row stride ldc) = A[m,k] @ B[k,n], all three stored as S (f32, f64, f16 or bf16), summed
// in ComputeOf<S> over the whole of k and stored once.
template <class S>
void gemm_kernel(S* c, int64_t ldc, const S* a, int64_t rsa, int64_t csa, const S* b, int64_t rsb, int64_t csb,
                 int64_t m, int64_t n, int64_t k) {
  using T = ComputeOf<S>;
  using G = GemmShape<T>;
  if (m * n * k <= 32 * 32 * 32) {  // tiny (or k = 0: zeros): packing costs more than it saves
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j0 = 0; j0 < n; j0 += kGather) {
        const int64_t cols = vmin(kGather, n - j0);
        alignas(64) T acc[kGather];
        for (int64_t j = 0; j < cols; ++j) acc[j] = T(0);
        for (int64_t p = 0; p < k; ++p) {
          const T av = widen(a[i * rsa + p * csa]);
          const S* brow = b + p * rsb + j0 * csb;
          for (int64_t j = 0; j < cols; ++j) acc[j] += av * widen(brow[j * csb]);
        }
        narrow_n(c + i * ldc + j0, acc, cols);
      }
    }
    return;
  }
  if constexpr (std::is_same_v<S, T>) {
    gemm_packed<T, S>(c, ldc, a, rsa, csa, b, rsb, csb, m, n, k);
  } else {
    // A half C cannot take the micro-kernel's partial sums (one per KC block of k) without being
    // rounded after each: blocks of C are summed in an f32 buffer and rounded once. B is packed
    // again for each block of rows, which costs one conversion per 4 MC multiply-adds.
    constexpr int64_t kBlockRows = 4 * G::MC;
    const int64_t block_rows = vmin(m, kBlockRows), block_cols = vmin(n, G::NC);
    Buffer<T> block(size_t(block_rows * block_cols));
    for (int64_t i0 = 0; i0 < m; i0 += kBlockRows) {
      for (int64_t j0 = 0; j0 < n; j0 += G::NC) {
        const int64_t rows = vmin(kBlockRows, m - i0), cols = vmin(G::NC, n - j0);
        gemm_packed<T, S>(block.p, cols, a + i0 * rsa, rsa, csa, b + j0 * csb, rsb, csb, rows, cols, k);
        T* sums = block.p;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
        for (int64_t r = 0; r < rows; ++r) narrow_n(c + (i0 + r) * ldc + j0, sums + r * cols, cols);
      }
    }
  }
}

static void unary_f32(UnaryOp op, float* o, const float* x, int64_t sx, int64_t n, float p0, float p1) {
  unary_kernel<float>(op, o, x, sx, n, p0, p1);
}
static void unary_f64(UnaryOp op, double* o, const double* x, int64_t sx, int64_t n, double p0, double p1) {
  unary_kernel<double>(op, o, x, sx, n, p0, p1);
}

#include "cpu/attention_kernels.inl"

}  // namespace nx::cpu::NX_SIMD_NS

namespace nx::cpu {
const SimdTable NX_SIMD_TABLE = {
    NX_SIMD_LABEL,
    &NX_SIMD_NS::unary_f32,
    &NX_SIMD_NS::unary_f64,
    &NX_SIMD_NS::binary_kernel<float>,
    &NX_SIMD_NS::binary_kernel<double>,
    &NX_SIMD_NS::sum_kernel<float>,
    &NX_SIMD_NS::sum_kernel<double>,
    &NX_SIMD_NS::softmax_kernel<float>,
    &NX_SIMD_NS::softmax_kernel<double>,
    &NX_SIMD_NS::gemm_kernel<float>,
    &NX_SIMD_NS::gemm_kernel<double>,
    &NX_SIMD_NS::gemm_kernel<Half>,
    &NX_SIMD_NS::gemm_kernel<BFloat16>,
    &NX_SIMD_NS::attn_forward<float>,
    &NX_SIMD_NS::attn_forward<double>,
    &NX_SIMD_NS::attn_forward<Half>,
    &NX_SIMD_NS::attn_forward<BFloat16>,
    &NX_SIMD_NS::attn_backward<float>,
    &NX_SIMD_NS::attn_backward<double>,
    &NX_SIMD_NS::attn_backward<Half>,
    &NX_SIMD_NS::attn_backward<BFloat16>,
    &NX_SIMD_NS::widen_n<Half>,
    &NX_SIMD_NS::widen_n<BFloat16>,
    &NX_SIMD_NS::narrow_n<Half>,
    &NX_SIMD_NS::narrow_n<BFloat16>,
    &NX_SIMD_NS::sum_exp_f32,
    &NX_SIMD_NS::scale_exp_f32,
    &NX_SIMD_NS::max_f32,
    &NX_SIMD_NS::sumsq_f32,
    &NX_SIMD_NS::adam_f32,
};
}  // namespace nx::cpu
