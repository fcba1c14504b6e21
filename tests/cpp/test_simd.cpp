// The per-ISA kernel tables (src/cpu/simd.hpp) against scalar references computed in long
// double with <cmath>: every UnaryOp and arithmetic BinaryOp (with the fused add_relu, add_gelu,
// add_gelu_tanh, mul_tanh) in f32 and f64 (random data, special
// values, strided and broadcast inputs), sum, softmax and GEMM (tiny and packed paths); and that
// the unary/binary rows give every element the same bits wherever it lies (body or tail of a row,
// contiguous, strided or broadcast operand), which compiled plans' CPU fusion relies on; and the
// f16/bf16 <-> f32 run conversions against core's scalar converters, bit for bit.
//
// Accuracy model. An element passes when |y - ref| <= ulps * ulp_T(ref) + abs, with ulp_T the
// spacing of T at ref (denorm_min below the normal range; results below the normal range may
// also be flushed to 0). Exactly rounded operations (neg, abs, sqrt, reciprocal, add, mul, div,
// max, ...) must equal the correctly rounded result bit for bit. NaN and infinite references
// must be matched exactly. The bounds in kUnary are about 1.5-2x the maxima measured over the
// test domains, which the run prints. Measured (GCC 12, x86-64; scalar / avx2 tables):
//
//   f32 op     domain                  max error                  notes
//   exp        [-87.3, 88.72]          1.14 / 0.84 ulp            results < FLT_MIN flushed to 0
//   log        [1e-44, 3e38] log-unif  0.75 ulp                   subnormal inputs lifted
//   rsqrt      [1e-37, 3e38] log-unif  1.46 ulp                   1 / sqrt(x): two roundings
//   sin, cos   [-100, 100]             0.56 ulp                   libm sinf/cosf
//   tanh       [-10, 10]               1.15 / 1.21 ulp
//   sinh       [-88.7, 88.7]           1.53 ulp
//   cosh       [-88.7, 88.7]           1.30 / 1.14 ulp
//   sigmoid    [-30, 30]               2.26 ulp
//   erf        [-6, 6]                 3.0 / 2.84 ulp             Taylor |x| < 1, A&S 7.1.26 beyond
//   gelu       [-10, 10]               1.85 ulp, 3.3e-7 abs       1 + erf cancels for x < 0
//   gelu_tanh  [-10, 10]               1.14 ulp, 2.2e-7 abs       1 + tanh cancels for x < 0
//   silu       [-30, 30]               2.21 ulp
//   softplus   [-30, 30]               2.43 ulp                   log1p form, exact threshold 20
//   mish       [-30, 30]               3.06 ulp
//   pow (powf) a in [0.01, 100]        0.50 ulp
//   f64: exp/log/sin/cos/pow 0.50 ulp; rsqrt 1.45; tanh 1.86; sinh 1.19; cosh 0.99; sigmoid 1.89;
//   erf 0.88; silu 1.94; softplus 1.36; mish 3.24; gelu 1.18 ulp + 7.5e-16 abs; gelu_tanh 1.11 ulp
//   + 7.2e-16 abs.
//   softmax: <= 32 eps relative for rows up to 4099 (the row sum's rounding grows with n);
//   log_softmax <= 1.1 eps * (|x| + |log-sum| + 1). GEMM: <= 1.8 eps * sum_p |a_ip b_pj| (bound
//   asserted: (k + 2) eps / 2 * sum |a b|, and bit-exact on integer data). sum_f32 of 1e5 values:
//   error 8e-10 (scalar) / 4e-11 (avx2) of sum |x| (exact on dyadic data).
//
// Known limitations (not asserted): f32 cosh/sinh overflow to inf for |x| in (88.72, 89.41]
// where the true value is still finite (they are computed from exp(|x|)); likewise f64 cosh in
// (709.78, 710.48]; f32 tanh(-0) returns +0.
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "cpp_test_util.hpp"
#include "cpu/simd.hpp"

namespace {

using nx::BinaryOp;
using nx::UnaryOp;
using nx::cpu::SimdTable;
using nx::cpu::AdamF32;
using LD = long double;

bool cpu_has(const std::string& level) {
  __builtin_cpu_init();
  if (level == "scalar") return true;
  if (level == "avx2") {  // and F16C: CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports lacks "f16c")
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }
  if (level == "avx512") return __builtin_cpu_supports("avx512f");
  return false;
}

const SimdTable* table_of(const std::string& level) {
  if (level == "scalar") return &nx::cpu::simd_scalar;
  if (level == "avx2") return &nx::cpu::simd_avx2;
  if (level == "avx512") return &nx::cpu::simd_avx512;
  return nullptr;
}

template <class T> LD ulp_of(LD ref) {
  LD a = std::fabs(ref);
  if (!(a >= LD(std::numeric_limits<T>::min()))) return LD(std::numeric_limits<T>::denorm_min());
  int e;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  return std::ldexp(LD(1), e - std::numeric_limits<T>::digits);
}

// ---------------------------------------------------------------- references
template <class R> R softplus_ref(R x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

// Evaluated in R: long double for the approximated ops, T itself for the exactly rounded ones
// (rounding a long double result to double could double-round).
template <class R> R unary_ref(UnaryOp op, R x, R p0, R p1) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return 1 / std::sqrt(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sinh: return std::sinh(x);
    case UnaryOp::Cosh: return std::cosh(x);
    case UnaryOp::Sigmoid: return 1 / (1 + std::exp(-x));
    case UnaryOp::Relu: return x <= 0 ? R(0) : x;  // NaN stays NaN, as in torch
    case UnaryOp::LeakyRelu: return x > 0 ? x : x * p0;
    case UnaryOp::Gelu: return R(0.5) * x * (1 + std::erf(x / std::sqrt(R(2))));
    case UnaryOp::GeluTanh: {
      R c = std::sqrt(R(2) / R(3.14159265358979323846264338327950288L));
      return R(0.5) * x * (1 + std::tanh(c * (x + R(0.044715) * x * x * x)));
    }
    case UnaryOp::Silu: return x / (1 + std::exp(-x));
    case UnaryOp::Softplus: return x > 20 ? x : softplus_ref(x);  // torch's threshold 20
    case UnaryOp::Mish: return x * std::tanh(softplus_ref(x));
    case UnaryOp::Clamp: return x != x ? x : std::min(std::max(x, p0), p1);
    case UnaryOp::AddScalar: return x + p0;
    case UnaryOp::MulScalar: return x * p0;
    case UnaryOp::PowScalar: return std::pow(x, p0);
    case UnaryOp::Square: return x * x;
    case UnaryOp::Reciprocal: return 1 / x;
    case UnaryOp::Sign: return x > 0 ? R(1) : (x < 0 ? R(-1) : R(0));
    case UnaryOp::Erf: return std::erf(x);
    case UnaryOp::Step: return x > 0 ? R(1) : R(0);
    case UnaryOp::Cone: return 1 - std::fabs(x - 1);
    case UnaryOp::ParabolicCone: return x * (2 - x);
    case UnaryOp::ParCon: return 1 - std::pow(std::fabs(x - 1), p0);
  }
  return 0;
}

// Exactly rounded ops: result must equal the reference rounded to T (computed in T itself for
// f64, where rounding long double to double could double-round).
template <class T> T exact_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Maximum: return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
    case BinaryOp::Minimum: return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : std::min(a, b);
    default: return T(0);
  }
}

// ---------------------------------------------------------------- op specifications
struct UnarySpec {
  UnaryOp op;
  const char* name;
  double lo, hi;
  bool logscale;      // sample |x| log-uniformly in [lo, hi] (positive)
  double p0, p1;
  bool exact;         // must equal the reference rounded to T
  double ulps32, abs32, ulps64, abs64;
};

// Bounds: see the header comment. abs64 values follow the same cancellation analysis in double.
const UnarySpec kUnary[] = {
    {UnaryOp::Neg, "neg", -1e6, 1e6, false, 0, 0, true, 0, 0, 0, 0},
    {UnaryOp::Abs, "abs", -1e6, 1e6, false, 0, 0, true, 0, 0, 0, 0},
    {UnaryOp::Exp, "exp", -87.3, 88.72, false, 0, 0, false, 2.5, 0, 1.0, 0},
    {UnaryOp::Log, "log", 1e-44, 3e38, true, 0, 0, false, 1.5, 0, 1.0, 0},
    {UnaryOp::Sqrt, "sqrt", 1e-44, 3e38, true, 0, 0, true, 0, 0, 0, 0},
    {UnaryOp::Rsqrt, "rsqrt", 1e-37, 3e38, true, 0, 0, false, 2.5, 0, 2.5, 0},
    {UnaryOp::Sin, "sin", -100, 100, false, 0, 0, false, 1.0, 0, 1.0, 0},
    {UnaryOp::Cos, "cos", -100, 100, false, 0, 0, false, 1.0, 0, 1.0, 0},
    {UnaryOp::Tanh, "tanh", -10, 10, false, 0, 0, false, 2.5, 0, 3.0, 0},
    {UnaryOp::Sinh, "sinh", -88.7, 88.7, false, 0, 0, false, 3.0, 0, 2.5, 0},
    {UnaryOp::Cosh, "cosh", -88.7, 88.7, false, 0, 0, false, 2.5, 0, 2.0, 0},
    {UnaryOp::Sigmoid, "sigmoid", -30, 30, false, 0, 0, false, 4.0, 0, 3.0, 0},
    {UnaryOp::Relu, "relu", -1e6, 1e6, false, 0, 0, true, 0, 0, 0, 0},
    {UnaryOp::LeakyRelu, "leaky_relu", -1e6, 1e6, false, 0.01, 0, true, 0, 0, 0, 0},
    {UnaryOp::Gelu, "gelu", -10, 10, false, 0, 0, false, 4.0, 3e-7, 3.0, 1e-15},
    {UnaryOp::GeluTanh, "gelu_tanh", -10, 10, false, 0, 0, false, 4.0, 3e-7, 3.0, 1e-15},
    {UnaryOp::Silu, "silu", -30, 30, false, 0, 0, false, 4.0, 0, 3.0, 0},
    {UnaryOp::Softplus, "softplus", -30, 30, false, 0, 0, false, 4.0, 0, 2.5, 0},
    {UnaryOp::Mish, "mish", -30, 30, false, 0, 0, false, 5.0, 1e-35, 5.0, 0},  // exp flushes below FLT_MIN
    {UnaryOp::Clamp, "clamp", -10, 10, false, -2.5, 3.25, true, 0, 0, 0, 0},
    {UnaryOp::AddScalar, "add_scalar", -1e3, 1e3, false, 0.375, 0, true, 0, 0, 0, 0},
    {UnaryOp::MulScalar, "mul_scalar", -1e3, 1e3, false, -1.75, 0, true, 0, 0, 0, 0},
    {UnaryOp::PowScalar, "pow_scalar", 1e-3, 1e3, true, 2.5, 0, false, 1.0, 0, 1.0, 0},
    {UnaryOp::Square, "square", -1e15, 1e15, false, 0, 0, true, 0, 0, 0, 0},
    {UnaryOp::Reciprocal, "reciprocal", 1e-30, 1e30, true, 0, 0, true, 0, 0, 0, 0},
    {UnaryOp::Sign, "sign", -10, 10, false, 0, 0, true, 0, 0, 0, 0},
    {UnaryOp::Erf, "erf", -6, 6, false, 0, 0, false, 5.0, 0, 1.5, 0},
    {UnaryOp::Step, "step", -10, 10, false, 0, 0, true, 0, 0, 0, 0},
    // 1 - |x - 1| and x (2 - x) round twice (x - 1, then the rest): an ulp of |x - 1| <= 11 near
    // the zeros at 0 and 2, where the result cancels to ~0
    {UnaryOp::Cone, "cone", -10, 10, false, 0, 0, false, 1.0, 2e-6, 1.0, 4e-15},
    {UnaryOp::ParabolicCone, "parabolic_cone", -10, 10, false, 0, 0, false, 1.5, 3e-6, 1.5, 6e-15},
    {UnaryOp::ParCon, "parcon", -10, 10, false, 1.5, 0, false, 3.0, 1e-5, 3.0, 2e-14},
};

template <class T> const char* tname() { return sizeof(T) == 4 ? "f32" : "f64"; }

template <class T> void run_unary(const SimdTable& t, UnaryOp op, T* out, const T* x, int64_t sx, int64_t n, T p0, T p1) {
  if constexpr (sizeof(T) == 4) t.unary_f32(op, out, x, sx, n, p0, p1);
  else t.unary_f64(op, out, x, sx, n, p0, p1);
}
template <class T> void run_binary(const SimdTable& t, BinaryOp op, T* out, const T* a, int64_t sa, const T* b, int64_t sb, int64_t n) {
  if constexpr (sizeof(T) == 4) t.binary_f32(op, out, a, sa, b, sb, n);
  else t.binary_f64(op, out, a, sa, b, sb, n);
}

template <class T> std::vector<T> sample(const UnarySpec& s, std::mt19937_64& g, size_t n) {
  std::vector<T> v(n);
  std::uniform_real_distribution<double> u(0, 1);
  for (auto& x : v) {
    double r = u(g);
    double lo = s.lo, hi = s.hi;
    if (sizeof(T) == 8 && s.logscale && lo < 1e-300) lo = 1e-300;
    x = T(s.logscale ? std::exp(std::log(lo) + r * (std::log(hi) - std::log(lo))) : lo + r * (hi - lo));
  }
  return v;
}

struct ErrStats {
  double max_ulp = 0;  // where the relative bound applies (|ref| eps > the op's absolute allowance)
  double max_abs = 0;  // elsewhere (the op's absolute regime), for ops with an absolute allowance
  double worst_x = 0;
  int64_t failures = 0;
  double first_bad_x = 0, first_bad_y = 0;
  LD first_bad_ref = 0;
};

// Checks y against the reference at x; special outcomes (NaN, inf) must match exactly.
template <class T>
bool check_one(const UnarySpec& s, T x, T y, T p0, T p1, ErrStats& st) {
  LD ref = s.exact ? LD(unary_ref<T>(s.op, x, p0, p1)) : unary_ref<LD>(s.op, LD(x), LD(p0), LD(p1));
  T reft = T(ref);
  bool ok;
  if (reft != reft) {
    ok = y != y;
  } else if (std::isinf(reft)) {
    ok = y == reft;
  } else if (s.exact) {
    ok = (y == reft) && (std::signbit(y) == std::signbit(reft) || y != 0);
  } else {
    LD err = std::fabs(LD(y) - ref);
    double ulps = double(err / ulp_of<T>(ref));
    double ub = sizeof(T) == 4 ? s.ulps32 : s.ulps64, ab = sizeof(T) == 4 ? s.abs32 : s.abs64;
    // absolute allowance: the op's own, plus flush of results below the normal range
    LD allow = LD(ub) * ulp_of<T>(ref) + LD(ab) + (std::fabs(ref) < LD(std::numeric_limits<T>::min()) ? LD(std::numeric_limits<T>::min()) : 0);
    ok = err <= allow && y == y;
    bool relative_regime = ab == 0 || std::fabs(ref) * LD(std::numeric_limits<T>::epsilon()) > LD(ab);
    if (std::fabs(ref) >= LD(std::numeric_limits<T>::min()) && relative_regime && ulps > st.max_ulp) {
      st.max_ulp = ulps;
      st.worst_x = double(x);
    }
    if (!relative_regime) st.max_abs = std::max(st.max_abs, double(err));
  }
  if (!ok) {
    if (st.failures == 0) { st.first_bad_x = double(x); st.first_bad_y = double(y); st.first_bad_ref = ref; }
    ++st.failures;
  }
  return ok;
}

class SimdLevels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cpu_has(GetParam())) GTEST_SKIP() << "this CPU lacks " << GetParam();
    t_ = table_of(GetParam());
    ASSERT_NE(t_, nullptr);
    ASSERT_STREQ(t_->name, GetParam().c_str());
  }
  const SimdTable* t_ = nullptr;

  template <class T> void unary_accuracy();
  template <class T> void unary_special();
  template <class T> void unary_strided();
  template <class T> void binary_all();
  template <class T> void sums();
  template <class T> void softmax_check();
  template <class T> void gemm_check();
  template <class T> void position_independence();
};

template <class T> void SimdLevels::unary_accuracy() {
  std::mt19937_64 g(1234);
  const size_t n = 20000;
  for (const auto& s : kUnary) {
    std::vector<T> x = sample<T>(s, g, n), y(n);
    if (s.op == UnaryOp::Log || s.op == UnaryOp::Sqrt) {  // include subnormal inputs (f32: down to 1e-44)
      for (size_t i = 0; i < 200; ++i)
        x[i] = T(std::ldexp(1.0 + double(i) / 200, -(std::numeric_limits<T>::max_exponent + int(i % 20) + 2)));
    }
    T p0 = T(s.p0), p1 = T(s.p1);
    run_unary<T>(*t_, s.op, y.data(), x.data(), 1, int64_t(n), p0, p1);
    ErrStats st;
    for (size_t i = 0; i < n; ++i) check_one<T>(s, x[i], y[i], p0, p1, st);
    std::printf("  [%s %s] %-11s max %.3f ulp (at x=%.9g)", t_->name, tname<T>(), s.name, st.max_ulp, st.worst_x);
    if ((sizeof(T) == 4 ? s.abs32 : s.abs64) > 0) std::printf(", max abs error %.3g where |ref| is small", st.max_abs);
    std::printf("\n");
    EXPECT_EQ(st.failures, 0) << s.name << " " << tname<T>() << ": first failure x=" << st.first_bad_x
                              << " y=" << st.first_bad_y << " ref=" << double(st.first_bad_ref);
  }
}

template <class T> void SimdLevels::unary_special() {
  using L = std::numeric_limits<T>;
  const std::vector<T> specials = {T(0), T(-0.0), L::infinity(), -L::infinity(), L::quiet_NaN(), -L::quiet_NaN(),
                                   T(1e30), T(-1e30), L::max(), L::lowest(), T(1e-30), T(-1e-30), L::min(), -L::min(),
                                   L::denorm_min(), -L::denorm_min(), T(L::min() / 3), T(-L::min() / 7), T(1), T(-1),
                                   T(0.5), T(-0.5), T(20.5), T(-20.5), T(88), T(-88), T(-100), T(-87.5), T(88.5),
                                   T(88.7), T(-103)};
  for (const auto& s : kUnary) {
    std::vector<T> y(specials.size());
    T p0 = T(s.p0), p1 = T(s.p1);
    run_unary<T>(*t_, s.op, y.data(), specials.data(), 1, int64_t(specials.size()), p0, p1);
    ErrStats st;
    for (size_t i = 0; i < specials.size(); ++i) {
      EXPECT_TRUE(check_one<T>(s, specials[i], y[i], p0, p1, st))
          << s.name << " " << tname<T>() << "(" << double(specials[i]) << ") = " << double(y[i])
          << ", reference " << double(unary_ref<LD>(s.op, LD(specials[i]), LD(p0), LD(p1)));
    }
  }
  // exp and log: explicit IEEE results
  auto one = [&](UnaryOp op, T x) {
    T y;
    run_unary<T>(*t_, op, &y, &x, 1, 1, T(0), T(0));
    return y;
  };
  EXPECT_EQ(one(UnaryOp::Exp, T(0)), T(1));
  EXPECT_EQ(one(UnaryOp::Exp, T(-0.0)), T(1));
  EXPECT_EQ(one(UnaryOp::Exp, L::infinity()), L::infinity());
  EXPECT_EQ(one(UnaryOp::Exp, -L::infinity()), T(0));
  EXPECT_TRUE(std::isnan(one(UnaryOp::Exp, L::quiet_NaN())));
  EXPECT_EQ(one(UnaryOp::Exp, T(1000)), L::infinity());
  EXPECT_EQ(one(UnaryOp::Log, T(1)), T(0));
  EXPECT_EQ(one(UnaryOp::Log, T(0)), -L::infinity());
  EXPECT_EQ(one(UnaryOp::Log, T(-0.0)), -L::infinity());
  EXPECT_EQ(one(UnaryOp::Log, L::infinity()), L::infinity());
  EXPECT_TRUE(std::isnan(one(UnaryOp::Log, T(-1))));
  EXPECT_TRUE(std::isnan(one(UnaryOp::Log, -L::infinity())));
  EXPECT_TRUE(std::isnan(one(UnaryOp::Log, L::quiet_NaN())));
  // subnormal inputs: log of the smallest subnormal, to a few ulp
  T ls = one(UnaryOp::Log, L::denorm_min());
  EXPECT_NEAR(double(ls), double(std::log(LD(L::denorm_min()))), 4 * double(ulp_of<T>(std::log(LD(L::denorm_min())))));
  EXPECT_EQ(one(UnaryOp::Tanh, L::infinity()), T(1));
  EXPECT_EQ(one(UnaryOp::Tanh, -L::infinity()), T(-1));
  EXPECT_EQ(one(UnaryOp::Sigmoid, L::infinity()), T(1));
  EXPECT_EQ(one(UnaryOp::Sigmoid, -L::infinity()), T(0));
  EXPECT_EQ(one(UnaryOp::Erf, L::infinity()), T(1));
  EXPECT_EQ(one(UnaryOp::Erf, -L::infinity()), T(-1));
}

template <class T> void SimdLevels::unary_strided() {
  std::mt19937_64 g(99);
  for (const auto& s : kUnary) {
    for (int64_t n : {1, 7, 33, 1001}) {
      for (int64_t sx : {int64_t(0), int64_t(3), int64_t(-2)}) {
        std::vector<T> buf = sample<T>(s, g, size_t(n * 3 + 3)), y(size_t(n), T(-12345));
        const T* x = sx < 0 ? buf.data() + (n - 1) * (-sx) : buf.data();  // negative stride walks backwards
        T p0 = T(s.p0), p1 = T(s.p1);
        run_unary<T>(*t_, s.op, y.data(), x, sx, n, p0, p1);
        ErrStats st;
        for (int64_t i = 0; i < n; ++i) check_one<T>(s, x[i * sx], y[size_t(i)], p0, p1, st);
        EXPECT_EQ(st.failures, 0) << s.name << " " << tname<T>() << " n=" << n << " sx=" << sx << " first bad x="
                                  << st.first_bad_x << " y=" << st.first_bad_y;
      }
    }
  }
}

template <class T> void SimdLevels::binary_all() {
  std::mt19937_64 g(7);
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow, BinaryOp::Maximum, BinaryOp::Minimum};
  const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"};
  const std::pair<int64_t, int64_t> strides[] = {{1, 1}, {1, 0}, {0, 1}, {3, 2}, {0, 0}, {2, 1}, {1, 3}};
  for (size_t k = 0; k < 7; ++k) {
    BinaryOp op = ops[k];
    double max_ulp = 0;
    for (int64_t n : {1, 5, 64, 1003}) {
      for (auto [sa, sb] : strides) {
        std::vector<T> a(size_t(n * 3 + 5)), b(size_t(n * 3 + 5)), y(size_t(n), T(-777));  // +5: the tie/NaN slots below
        std::uniform_real_distribution<double> ua(op == BinaryOp::Pow ? 0.01 : -100, 100), ub(op == BinaryOp::Pow ? -6 : -100, op == BinaryOp::Pow ? 6 : 100);
        for (auto& v : a) v = T(ua(g));
        for (auto& v : b) v = T(ub(g));
        if (op == BinaryOp::Maximum || op == BinaryOp::Minimum) {  // ties, NaNs on either side
          a[1] = b[1] = T(2.5);
          a[2] = std::numeric_limits<T>::quiet_NaN();
          b[3] = std::numeric_limits<T>::quiet_NaN();
          b[4] = a[4];
        }
        run_binary<T>(*t_, op, y.data(), a.data(), sa, b.data(), sb, n);
        int64_t bad = 0;
        std::string first;
        for (int64_t i = 0; i < n; ++i) {
          T av = a[size_t(i * sa)], bv = b[size_t(i * sb)], yv = y[size_t(i)];
          bool ok;
          if (op == BinaryOp::Pow) {
            LD ref = std::pow(LD(av), LD(bv));
            double u = double(std::fabs(LD(yv) - ref) / ulp_of<T>(ref));
            max_ulp = std::max(max_ulp, u);
            ok = u <= 1.0;  // glibc's pow/powf: < 1 ulp
          } else {
            T ref = exact_binary<T>(op, av, bv);
            ok = ref != ref ? yv != yv : yv == ref;
          }
          if (!ok && !bad++) first = std::to_string(double(av)) + ", " + std::to_string(double(bv)) + " -> " + std::to_string(double(yv));
        }
        EXPECT_EQ(bad, 0) << names[k] << " " << tname<T>() << " n=" << n << " sa=" << sa << " sb=" << sb << " first: " << first;
      }
    }
    if (op == BinaryOp::Pow) std::printf("  [%s %s] pow max %.3f ulp\n", t_->name, tname<T>(), max_ulp);
  }
  // fused ops: relu/gelu/gelu_tanh of the rounded sum a + b, and a * tanh(b)
  auto spec = [](UnaryOp op) -> const UnarySpec& {
    for (const auto& s : kUnary)
      if (s.op == op) return s;
    return kUnary[0];
  };
  const BinaryOp fused[] = {BinaryOp::AddRelu, BinaryOp::AddGelu, BinaryOp::AddGeluTanh, BinaryOp::MulTanh};
  const UnaryOp inner[] = {UnaryOp::Relu, UnaryOp::Gelu, UnaryOp::GeluTanh, UnaryOp::Tanh};
  for (size_t k = 0; k < 4; ++k) {
    const UnarySpec& s = spec(inner[k]);
    for (int64_t n : {1, 9, 1003}) {
      for (auto [sa, sb] : strides) {
        std::vector<T> a(size_t(n * 3 + 5)), b(size_t(n * 3 + 5)), y(size_t(n), T(-777));  // +5: the tie/NaN slots below
        std::uniform_real_distribution<double> d(-6, 6);
        for (auto& v : a) v = T(d(g));
        for (auto& v : b) v = T(d(g));
        run_binary<T>(*t_, fused[k], y.data(), a.data(), sa, b.data(), sb, n);
        ErrStats st;
        for (int64_t i = 0; i < n; ++i) {
          T av = a[size_t(i * sa)], bv = b[size_t(i * sb)], yv = y[size_t(i)];
          if (fused[k] == BinaryOp::MulTanh) {
            // a * tanh(b): tanh's bound plus the rounding of the product
            LD ref = LD(av) * std::tanh(LD(bv));
            double ub = (sizeof(T) == 4 ? s.ulps32 : s.ulps64) + 1;
            if (!(std::fabs(LD(yv) - ref) <= LD(ub) * ulp_of<T>(ref) + LD(std::numeric_limits<T>::min()))) {
              if (!st.failures) { st.first_bad_x = double(bv); st.first_bad_y = double(yv); }
              ++st.failures;
            }
          } else {
            check_one<T>(s, T(av + bv), yv, T(0), T(0), st);
          }
        }
        EXPECT_EQ(st.failures, 0) << "fused op " << int(fused[k]) << " (" << s.name << " of a + b) " << tname<T>()
                                  << " sa=" << sa << " sb=" << sb << " first bad a+b=" << st.first_bad_x
                                  << " y=" << st.first_bad_y;
      }
    }
  }
  // IEEE specials for the arithmetic ops
  using L = std::numeric_limits<T>;
  const T inf = L::infinity();
  std::vector<T> a = {inf, inf, T(1), T(0), T(-0.0), L::max(), L::denorm_min(), T(1)};
  std::vector<T> b = {-inf, inf, T(0), T(0), T(0), L::max(), T(0.5), L::quiet_NaN()};
  for (size_t k = 0; k < 4; ++k) {
    std::vector<T> y(a.size());
    run_binary<T>(*t_, ops[k], y.data(), a.data(), 1, b.data(), 1, int64_t(a.size()));
    for (size_t i = 0; i < a.size(); ++i) {
      T ref = exact_binary<T>(ops[k], a[i], b[i]);
      if (ref != ref) EXPECT_TRUE(y[i] != y[i]) << names[k] << " " << a[i] << " " << b[i];
      else EXPECT_TRUE(y[i] == ref && std::signbit(y[i]) == std::signbit(ref)) << names[k] << " " << a[i] << " " << b[i] << " -> " << y[i];
    }
  }
}

template <class T> void SimdLevels::sums() {
  auto sum = [&](const T* x, int64_t n) {
    if constexpr (sizeof(T) == 4) return t_->sum_f32(x, n);
    else return t_->sum_f64(x, n);
  };
  std::mt19937_64 g(5);
  for (int64_t n : {0, 1, 7, 1023, 1024, 1025, 100000}) {
    // (a) dyadic values: every partial sum is exact in T, so the result must be exact.
    std::vector<T> x(size_t(n) + 1);
    std::uniform_int_distribution<int> di(-128, 128);
    long long exact16 = 0;
    for (int64_t i = 0; i < n; ++i) { int v = di(g); exact16 += v; x[size_t(i)] = T(v) / T(16); }
    x[size_t(n)] = T(1e30);  // a sentinel past the end that must not be read
    EXPECT_EQ(sum(x.data(), n), double(exact16) / 16.0) << tname<T>() << " n=" << n;
    // (b) random values against a long double sum, bounded by the blocked-summation error
    LD ref = 0, abs_sum = 0;
    std::uniform_real_distribution<double> du(-1, 1);
    for (int64_t i = 0; i < n; ++i) { x[size_t(i)] = T(du(g)); ref += LD(x[size_t(i)]); abs_sum += std::fabs(LD(x[size_t(i)])); }
    double s = sum(x.data(), n);
    // blocks of 1024: each lane sums <= 1024 terms in T, lanes and blocks are combined in double
    LD bound = LD(1024 + 16) * LD(std::numeric_limits<T>::epsilon()) / 2 * abs_sum + LD(1e-300);
    EXPECT_LE(std::fabs(LD(s) - ref), bound) << tname<T>() << " n=" << n;
    if (n == 100000)
      std::printf("  [%s %s] sum n=%" PRId64 ": error %.3g (relative to sum|x| %.3g)\n", t_->name, tname<T>(), n,
                  double(std::fabs(LD(s) - ref)), double(std::fabs(LD(s) - ref) / abs_sum));
  }
  // NaN and inf propagate
  std::vector<T> x(2000, T(1));
  x[1500] = std::numeric_limits<T>::quiet_NaN();
  EXPECT_TRUE(std::isnan(sum(x.data(), 2000)));
  x[1500] = std::numeric_limits<T>::infinity();
  EXPECT_EQ(sum(x.data(), 2000), std::numeric_limits<double>::infinity());
}

template <class T> void SimdLevels::softmax_check() {
  auto sm = [&](T* out, const T* x, int64_t n, bool log) {
    if constexpr (sizeof(T) == 4) t_->softmax_f32(out, x, n, log);
    else t_->softmax_f64(out, x, n, log);
  };
  std::mt19937_64 g(11);
  const T ninf = -std::numeric_limits<T>::infinity();
  double worst_rel = 0, worst_log = 0;
  for (int64_t n : {1, 2, 5, 17, 64, 1000, 4099}) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<T> x(static_cast<size_t>(n)), y(x.size()), z(x.size());
      std::uniform_real_distribution<double> d(variant == 2 ? 990 : -20, variant == 2 ? 1010 : 20);
      for (auto& v : x) v = T(d(g));
      if (variant == 1 && n > 1)  // -inf entries (masked logits)
        for (int64_t i = 0; i < n; i += 3) x[size_t(i)] = ninf;
      sm(y.data(), x.data(), n, false);
      sm(z.data(), x.data(), n, true);
      LD mx = -INFINITY;
      for (T v : x) mx = std::max(mx, LD(v));
      LD s = 0;
      for (T v : x) s += std::exp(LD(v) - mx);
      LD ls = std::log(s) + mx;
      double total = 0;
      int64_t bad_p = 0, bad_lp = 0;
      for (int64_t i = 0; i < n; ++i) {
        LD p = std::exp(LD(x[size_t(i)]) - mx) / s, lp = LD(x[size_t(i)]) - ls;
        total += double(y[size_t(i)]);
        if (x[size_t(i)] == ninf) {
          EXPECT_EQ(y[size_t(i)], T(0));
          EXPECT_EQ(z[size_t(i)], ninf);
          continue;
        }
        // softmax: relative to p (exp's few ulp + the 1/s rounding); log_softmax: absolute,
        // scaled by the magnitudes that are subtracted
        double rel = double(std::fabs(LD(y[size_t(i)]) - p) / std::max(p, LD(std::numeric_limits<T>::min())));
        double lerr = double(std::fabs(LD(z[size_t(i)]) - lp) / (std::fabs(LD(x[size_t(i)])) + std::fabs(ls) + 1));
        worst_rel = std::max(worst_rel, rel);
        worst_log = std::max(worst_log, lerr);
        // the sum of n positive terms carries up to (n - 1) eps relative error, whatever the order
        if (!(rel <= double(8 + n) * double(std::numeric_limits<T>::epsilon()))) ++bad_p;
        if (!(lerr <= 4 * double(std::numeric_limits<T>::epsilon()))) ++bad_lp;
      }
      EXPECT_EQ(bad_p, 0) << tname<T>() << " softmax n=" << n << " variant " << variant;
      EXPECT_EQ(bad_lp, 0) << tname<T>() << " log_softmax n=" << n << " variant " << variant;
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
  }
  std::printf("  [%s %s] softmax max rel err %.3g eps, log_softmax max err %.3g eps (scaled)\n", t_->name, tname<T>(),
              worst_rel / double(std::numeric_limits<T>::epsilon()), worst_log / double(std::numeric_limits<T>::epsilon()));
  // a row of only -inf: 0/0 like PyTorch (NaN), never a crash or a finite value
  std::vector<T> x(4, ninf), y(4), z(4);
  sm(y.data(), x.data(), 4, false);
  sm(z.data(), x.data(), 4, true);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::isnan(y[size_t(i)]));
    EXPECT_TRUE(std::isnan(z[size_t(i)]));
  }
  // one finite entry among -inf: probability exactly 1, log-probability exactly 0
  x = {ninf, T(3), ninf, ninf};
  sm(y.data(), x.data(), 4, false);
  sm(z.data(), x.data(), 4, true);
  EXPECT_EQ(y[1], T(1));
  EXPECT_EQ(z[1], T(0));
  EXPECT_EQ(y[0], T(0));
}

template <class T> void SimdLevels::gemm_check() {
  auto gemm = [&](T* c, int64_t ldc, const T* a, int64_t rsa, int64_t csa, const T* b, int64_t rsb, int64_t csb,
                  int64_t m, int64_t n, int64_t k) {
    if constexpr (sizeof(T) == 4) t_->gemm_f32(c, ldc, a, rsa, csa, b, rsb, csb, m, n, k);
    else t_->gemm_f64(c, ldc, a, rsa, csa, b, rsb, csb, m, n, k);
  };
  struct Case { int64_t m, n, k; };
  // tiny path: m n k <= 32^3; packed path above (k > KC = 256, m > MC = 120, n > NC = 3072 too)
  const Case cases[] = {{1, 1, 1}, {7, 13, 5}, {32, 32, 32}, {33, 32, 32}, {64, 64, 64}, {129, 65, 300},
                        {6, 16, 400}, {5, 3100, 4}, {121, 7, 257}, {1, 300, 200}, {300, 1, 200}, {3, 4, 0},
                        {250, 130, 520}};  // three blocks of rows (transposed A packed row by row), of k
  std::mt19937_64 g(3);
  double worst = 0;
  for (const auto& cs : cases) {
    // bit 0: A transposed, bit 1: B transposed, bit 2: A with no unit stride (every other element:
    // packed, where unit strides are read in place)
    for (int layout = 0; layout < 8; ++layout) {
      const int64_t m = cs.m, n = cs.n, k = cs.k;
      const bool ta = layout & 1, tb = layout & 2;
      const int64_t spread = layout & 4 ? 2 : 1;
      for (int exact = 0; exact < 2; ++exact) {
        std::vector<T> a(size_t(std::max<int64_t>(spread * m * k, 1))), b(size_t(std::max<int64_t>(k * n, 1)));
        std::uniform_real_distribution<double> d(-1, 1);
        std::uniform_int_distribution<int> di(-8, 8);
        for (auto& v : a) v = exact ? T(di(g)) : T(d(g));
        for (auto& v : b) v = exact ? T(di(g)) : T(d(g));
        // A is m x k: row-major (rsa = k, csa = 1) or stored transposed (rsa = 1, csa = m)
        int64_t rsa = spread * (ta ? 1 : k), csa = spread * (ta ? m : 1), rsb = tb ? 1 : n, csb = tb ? k : 1;
        const int64_t ldc = n + 3;
        std::vector<T> c(size_t(m * ldc), T(12345));
        gemm(c.data(), ldc, a.data(), rsa, csa, b.data(), rsb, csb, m, n, k);
        int64_t bad = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < ldc; ++j) {
            T got = c[size_t(i * ldc + j)];
            if (j >= n) {  // padding between rows untouched
              if (got != T(12345)) ++bad;
              continue;
            }
            LD ref = 0, mag = 0;
            for (int64_t p = 0; p < k; ++p) {
              LD prod = LD(a[size_t(i * rsa + p * csa)]) * LD(b[size_t(p * rsb + j * csb)]);
              ref += prod;
              mag += std::fabs(prod);
            }
            if (exact) {
              if (LD(got) != ref) ++bad;
            } else {
              // gamma_k bound of any summation order, with FMA or not
              LD err = std::fabs(LD(got) - ref);
              LD bound = LD(k + 2) * LD(std::numeric_limits<T>::epsilon()) / 2 * mag;
              if (mag > 0) worst = std::max(worst, double(err / (mag * LD(std::numeric_limits<T>::epsilon()))));
              if (!(err <= bound)) ++bad;
            }
          }
        }
        EXPECT_EQ(bad, 0) << tname<T>() << " gemm " << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb << " spread=" << spread
                          << (exact ? " (integer data, exact)" : " (random data)");
      }
    }
  }
  std::printf("  [%s %s] gemm max error %.3g eps * sum|a_ip b_pj|\n", t_->name, tname<T>(), worst);
}

// ---------------------------------------------------------------- position independence
// A row kernel's result for an element must depend on the operand values only, bit for bit (NaN
// signs and payloads included), not on where the element lies: in the vector body or the tail of
// a row, at which offset the caller cut its row, or whether the operands are contiguous, strided
// (positive or negative) or broadcast (stride 0). Compiled plans fuse elementwise chains into tiles
// of their own (src/cpu/fused_elementwise.cpp) and must reproduce eager's bits; GCC used to
// contract FMAs differently in a row's tail and in strided loops (gelu, add_gelu, gelu_backward
// differed in the last bit; sigmoid, silu, softplus, mish in the sign of a NaN). Every UnaryOp and
// every non-comparison BinaryOp (enumerated from src/core/op_enums.inc) is computed once as one
// long contiguous row, then in random pieces of 1..40 elements and with strided and broadcast
// copies of its operands, and the results are compared with memcmp. The rows mix moderate values,
// magnitudes from subnormal to overflow and special values (NaNs of both signs, with payloads and
// signaling, +-inf, +-0, the kernels' branch points), and hold every pair of a dozen specials as
// the two operands somewhere (NaN with NaN: which NaN comes out must not depend on the position
// either).

template <class T> T from_bits(uint64_t u) {
  T v;
  if constexpr (sizeof(T) == 4) { uint32_t w = uint32_t(u); std::memcpy(&v, &w, 4); }
  else std::memcpy(&v, &u, 8);
  return v;
}

template <class T> std::string bits_str(T v) {
  char buf[64];
  if constexpr (sizeof(T) == 4) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    std::snprintf(buf, sizeof buf, "%.9g [0x%08" PRIx32 "]", double(v), u);
  } else {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    std::snprintf(buf, sizeof buf, "%.17g [0x%016" PRIx64 "]", double(v), u);
  }
  return buf;
}

// The values that select a kernel's branches or IEEE corner cases.
template <class T> std::vector<T> row_specials() {
  using L = std::numeric_limits<T>;
  const bool f = sizeof(T) == 4;
  return {L::quiet_NaN(), -L::quiet_NaN(),
          from_bits<T>(f ? 0x7fc12345u : 0x7ff8000012345678ull),  // quiet NaNs with payloads
          from_bits<T>(f ? 0xffc00abcu : 0xfff80000000abcdeull),
          from_bits<T>(f ? 0x7f800001u : 0x7ff0000000000001ull),  // signaling NaN
          L::infinity(), -L::infinity(), T(0), T(-0.0), L::denorm_min(), -L::denorm_min(), T(L::min() / 3),
          T(-L::min() / 7), L::min(), -L::min(), L::max(), L::lowest(), T(f ? 1e30 : 1e300), T(f ? -1e30 : -1e300),
          T(1e-30), T(-1e-30), T(1), T(-1), T(0.5), T(-0.5), T(0.625), T(-0.625), T(20), T(20.5), T(-20.5), T(88.7),
          T(-88.7), T(-87.5), T(100), T(-100), T(710), T(-745)};
}

// n values: mostly moderate random ones, with log-uniform magnitudes over the whole exponent range
// (subnormals to overflow) and every special value, scattered over the row.
template <class T> std::vector<T> position_row(std::mt19937_64& g, size_t n) {
  const std::vector<T> sp = row_specials<T>();
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<size_t> pick(0, sp.size() - 1);
  const int emin = std::numeric_limits<T>::min_exponent - std::numeric_limits<T>::digits - 1;
  const int emax = std::numeric_limits<T>::max_exponent + 1;
  std::vector<T> v(n);
  for (auto& x : v) {
    double r = u(g), sign = u(g) < 0.5 ? -1 : 1;
    if (r < 0.3) x = T(2 * u(g) - 1);
    else if (r < 0.55) x = T(20 * u(g) - 10);
    else if (r < 0.7) x = T(200 * u(g) - 100);
    else if (r < 0.88) x = std::ldexp(T(sign * (1 + u(g))), emin + int(u(g) * (emax - emin)));
    else x = sp[pick(g)];
  }
  return v;
}

// Random cut of [0, n) into pieces of 1..40 elements: (start, length).
inline std::vector<std::pair<int64_t, int64_t>> random_pieces(std::mt19937_64& g, int64_t n) {
  std::uniform_int_distribution<int64_t> len(1, 40);
  std::vector<std::pair<int64_t, int64_t>> p;
  for (int64_t i = 0; i < n;) {
    int64_t m = std::min(len(g), n - i);
    p.push_back({i, m});
    i += m;
  }
  return p;
}

// x laid out with stride s (s != 0; negative walks backwards); the gaps hold a filler that must
// not be read. at(i) is element i.
template <class T> struct StridedCopy {
  std::vector<T> buf;
  int64_t s, off;
  StridedCopy(const std::vector<T>& x, int64_t stride) : s(stride) {
    const int64_t n = int64_t(x.size()), as = std::abs(s);
    buf.assign(size_t((n - 1) * as + 1), T(-12345.5));
    off = s < 0 ? (n - 1) * as : 0;
    for (int64_t i = 0; i < n; ++i) buf[size_t(off + i * s)] = x[size_t(i)];
  }
  const T* at(int64_t i) const { return buf.data() + off + i * s; }
};

// Index of the first element whose bits differ, or -1.
template <class T> int64_t first_diff(const T* got, const T* want, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(got + i, want + i, sizeof(T)) != 0) return i;
  return -1;
}

struct PosUnaryOp { UnaryOp op; const char* name; double p0, p1; };
struct PosBinaryOp { BinaryOp op; const char* name; };

// Every UnaryOp, the parameterized ones with a few parameters each.
std::vector<PosUnaryOp> position_unary_ops() {
  std::vector<PosUnaryOp> v;
  auto add = [&](UnaryOp op, const char* name) {
    switch (op) {
      case UnaryOp::LeakyRelu: v.push_back({op, name, 0.01, 0}); v.push_back({op, name, 0.2, 0}); return;
      case UnaryOp::ParCon:
        for (double beta : {1.5, 1.0, 0.5, 2.7}) v.push_back({op, name, beta, 0});
        return;
      case UnaryOp::Clamp: v.push_back({op, name, -2.5, 3.25}); v.push_back({op, name, 0, 6}); return;
      case UnaryOp::AddScalar: v.push_back({op, name, 0.375, 0}); v.push_back({op, name, -3, 0}); return;
      case UnaryOp::MulScalar: v.push_back({op, name, -1.75, 0}); v.push_back({op, name, 1e-3, 0}); return;
      case UnaryOp::PowScalar:
        for (double e : {2.5, 2.0, 3.0, 0.5, -1.5}) v.push_back({op, name, e, 0});
        return;
      default: v.push_back({op, name, 0, 0}); return;
    }
  };
#define NX_TEST_UNARY(Enum, name, ...) add(UnaryOp::Enum, name);
  NX_UNARY_OPS(NX_TEST_UNARY)
#undef NX_TEST_UNARY
  return v;
}

// Every BinaryOp the row kernels implement: all but the comparisons (generic path).
std::vector<PosBinaryOp> position_binary_ops() {
  std::vector<PosBinaryOp> v;
#define NX_TEST_BINARY(Enum, name, result) \
  if (nx::BinaryResult::result != nx::BinaryResult::Bool) v.push_back({BinaryOp::Enum, name});
  NX_BINARY_OPS(NX_TEST_BINARY)
#undef NX_TEST_BINARY
  return v;
}

template <class T> void SimdLevels::position_independence() {
  std::mt19937_64 g(2024);
  const int64_t n = 1037;  // whole 16-lane blocks, gathered blocks of 256 and a tail of 13
  std::vector<T> x = position_row<T>(g, size_t(n)), x2 = position_row<T>(g, size_t(n));
  {  // every pair of a few specials as (x[i], x2[i]) somewhere in the rows: NaN with NaN and so on
    using L = std::numeric_limits<T>;
    const T pair_vals[] = {L::quiet_NaN(), -L::quiet_NaN(), from_bits<T>(sizeof(T) == 4 ? 0x7fc12345u : 0x7ff8000012345678ull),
                           from_bits<T>(sizeof(T) == 4 ? 0x7f800001u : 0x7ff0000000000001ull), L::infinity(), -L::infinity(),
                           T(0), T(-0.0), L::denorm_min(), T(-1), T(2.5), L::max()};
    std::vector<size_t> pos(static_cast<size_t>(n));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = i;
    std::shuffle(pos.begin(), pos.end(), g);
    size_t k = 0;
    for (T va : pair_vals)
      for (T vb : pair_vals) { x[pos[k]] = va; x2[pos[k]] = vb; ++k; }
  }
  int64_t cases = 0, failed = 0;
  std::vector<T> ref(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  // Compares got[0, m) with want[0, m); inputs a (and b) at the first difference for the message.
  auto check = [&](const std::string& op, const std::string& pattern, const T* want, int64_t m,
                   const std::function<std::string(int64_t)>& inputs) {
    ++cases;
    int64_t i = first_diff(got.data(), want, m);
    if (i < 0) return;
    ++failed;
    ADD_FAILURE() << t_->name << " " << tname<T>() << " " << op << " " << pattern
                  << ": element " << i << " of " << m << ", inputs " << inputs(i) << ": got " << bits_str(got[size_t(i)])
                  << ", one contiguous row gives " << bits_str(want[i]);
  };
  const std::pair<int64_t, bool> unary_layouts[] = {{1, true}, {2, false}, {2, true}, {3, false}, {3, true}, {-2, true}};
  for (const auto& u : position_unary_ops()) {
    const T p0 = T(u.p0), p1 = T(u.p1);
    char label_buf[96];
    std::snprintf(label_buf, sizeof label_buf, "%s(p0=%g, p1=%g)", u.name, u.p0, u.p1);
    const std::string label = label_buf;
    std::fill(ref.begin(), ref.end(), T(-777));
    run_unary<T>(*t_, u.op, ref.data(), x.data(), 1, n, p0, p1);
    auto in = [&](int64_t i) { return bits_str(x[size_t(i)]); };
    for (auto [s, split] : unary_layouts) {
      StridedCopy<T> xs(x, s);
      std::fill(got.begin(), got.end(), T(-999));
      if (split)
        for (auto [i, m] : random_pieces(g, n)) run_unary<T>(*t_, u.op, got.data() + i, xs.at(i), s, m, p0, p1);
      else
        run_unary<T>(*t_, u.op, got.data(), xs.at(0), s, n, p0, p1);
      check(label, std::string(split ? "pieces" : "one row") + ", stride " + std::to_string(s), ref.data(), n, in);
    }
    // broadcast: each of a third of the elements (and every special one) repeated over a row of
    // 1..40 (every 50th: 300, past a gathered block) must give its value from the long row
    {
      std::uniform_int_distribution<int64_t> len(1, 40);
      std::string bad;
      for (int64_t i = 0; i < n && bad.empty(); ++i) {
        const T v = x[size_t(i)];
        const bool ordinary = std::isfinite(v) && std::fabs(v) >= std::numeric_limits<T>::min() && std::fabs(v) <= T(1e30);
        if (i % 3 != 0 && ordinary) continue;
        const int64_t m = i % 50 == 0 ? 300 : len(g);
        run_unary<T>(*t_, u.op, got.data(), &v, 0, m, p0, p1);
        for (int64_t j = 0; j < m && bad.empty(); ++j)
          if (std::memcmp(&got[size_t(j)], &ref[size_t(i)], sizeof(T)) != 0)
            bad = "x[" + std::to_string(i) + "] = " + bits_str(v) + " over " + std::to_string(m) + ": got " +
                  bits_str(got[size_t(j)]) + ", one contiguous row gives " + bits_str(ref[size_t(i)]);
      }
      ++cases;  // one case: the broadcast pattern over all the chosen elements
      if (!bad.empty()) {
        ++failed;
        ADD_FAILURE() << t_->name << " " << tname<T>() << " " << label << " broadcast: " << bad;
      }
    }
  }
  // binary: (stride a, stride b, cut into pieces)
  struct Layout { int64_t sa, sb; bool split; };
  const Layout binary_layouts[] = {{1, 1, true}, {2, 3, false}, {2, 3, true}, {3, 1, true}, {1, 2, false}, {1, 2, true}, {-2, 1, true}, {1, -3, true}};
  const std::vector<T> sp = row_specials<T>();
  for (const auto& b : position_binary_ops()) {
    auto in = [&](int64_t i) { return bits_str(x[size_t(i)]) + ", " + bits_str(x2[size_t(i)]); };
    std::fill(ref.begin(), ref.end(), T(-777));
    run_binary<T>(*t_, b.op, ref.data(), x.data(), 1, x2.data(), 1, n);
    for (const auto& l : binary_layouts) {
      StridedCopy<T> as(x, l.sa), bs(x2, l.sb);
      std::fill(got.begin(), got.end(), T(-999));
      if (l.split)
        for (auto [i, m] : random_pieces(g, n)) run_binary<T>(*t_, b.op, got.data() + i, as.at(i), l.sa, bs.at(i), l.sb, m);
      else
        run_binary<T>(*t_, b.op, got.data(), as.at(0), l.sa, bs.at(0), l.sb, n);
      check(b.name, std::string(l.split ? "pieces" : "one row") + ", strides " + std::to_string(l.sa) + ", " + std::to_string(l.sb),
            ref.data(), n, in);
    }
    // one operand broadcast: every special value and a few random ones against the whole other
    // row, whose reference is the long row against a contiguous row of copies of the value
    std::vector<T> vals = sp;
    for (int k = 0; k < 4; ++k) vals.push_back(x2[size_t(g() % uint64_t(n))]);
    for (int side = 0; side < 2; ++side) {  // 0: b broadcast, 1: a broadcast
      // (stride of the other operand, cut into pieces)
      const std::pair<int64_t, bool> other_layouts[] = {{1, false}, {1, true}, {3, true}};
      std::vector<std::string> first_bad(3);
      for (T v : vals) {
        std::vector<T> full(static_cast<size_t>(n), v), want(static_cast<size_t>(n));
        const std::vector<T>& row = side == 0 ? x : x2;
        if (side == 0) run_binary<T>(*t_, b.op, want.data(), row.data(), 1, full.data(), 1, n);
        else run_binary<T>(*t_, b.op, want.data(), full.data(), 1, row.data(), 1, n);
        for (size_t k = 0; k < 3; ++k) {
          const auto [stride, split] = other_layouts[k];
          const auto s = stride;  // a copy: clang 14 cannot capture a structured binding
          StridedCopy<T> os(row, s);
          std::fill(got.begin(), got.end(), T(-999));
          auto call = [&](int64_t i, int64_t m) {
            if (side == 0) run_binary<T>(*t_, b.op, got.data() + i, os.at(i), s, &v, 0, m);
            else run_binary<T>(*t_, b.op, got.data() + i, &v, 0, os.at(i), s, m);
          };
          if (split) for (auto [i, m] : random_pieces(g, n)) call(i, m);
          else call(0, n);
          int64_t i = first_diff(got.data(), want.data(), n);
          if (i >= 0 && first_bad[k].empty())
            first_bad[k] = "element " + std::to_string(i) + ", inputs " +
                           (side == 0 ? bits_str(row[size_t(i)]) + ", " + bits_str(v) : bits_str(v) + ", " + bits_str(row[size_t(i)])) +
                           ": got " + bits_str(got[size_t(i)]) + ", contiguous rows give " + bits_str(want[size_t(i)]);
        }
      }
      for (size_t k = 0; k < 3; ++k) {
        ++cases;
        if (first_bad[k].empty()) continue;
        ++failed;
        ADD_FAILURE() << t_->name << " " << tname<T>() << " " << b.name << " " << (side == 0 ? "b" : "a") << " broadcast, "
                      << (other_layouts[k].second ? "pieces" : "one row") << ", other stride " << other_layouts[k].first
                      << ": " << first_bad[k];
      }
    }
    // both broadcast: (a[i], b[i]) repeated over 1..40 elements gives ref[i]
    {
      std::uniform_int_distribution<int64_t> len(1, 40);
      std::string bad;
      for (int64_t i = 0; i < n && bad.empty(); i += 3) {
        const int64_t m = len(g);
        run_binary<T>(*t_, b.op, got.data(), &x[size_t(i)], 0, &x2[size_t(i)], 0, m);
        for (int64_t j = 0; j < m && bad.empty(); ++j)
          if (std::memcmp(&got[size_t(j)], &ref[size_t(i)], sizeof(T)) != 0)
            bad = "element " + std::to_string(i) + " over " + std::to_string(m) + ", inputs " + in(i) + ": got " +
                  bits_str(got[size_t(j)]) + ", one contiguous row gives " + bits_str(ref[size_t(i)]);
      }
      ++cases;
      if (!bad.empty()) {
        ++failed;
        ADD_FAILURE() << t_->name << " " << tname<T>() << " " << b.name << " both broadcast: " << bad;
      }
    }
  }
  std::printf("  [%s %s] position independence: %" PRId64 " (op, pattern) cases, %" PRId64 " failed\n", t_->name,
              tname<T>(), cases, failed);
}

TEST_P(SimdLevels, UnaryF32Accuracy) { unary_accuracy<float>(); }
TEST_P(SimdLevels, UnaryF64Accuracy) { unary_accuracy<double>(); }
TEST_P(SimdLevels, UnaryF32SpecialValues) { unary_special<float>(); }
TEST_P(SimdLevels, UnaryF64SpecialValues) { unary_special<double>(); }
TEST_P(SimdLevels, UnaryF32Strided) { unary_strided<float>(); }
TEST_P(SimdLevels, UnaryF64Strided) { unary_strided<double>(); }
TEST_P(SimdLevels, BinaryF32) { binary_all<float>(); }
TEST_P(SimdLevels, BinaryF64) { binary_all<double>(); }
TEST_P(SimdLevels, SumF32) { sums<float>(); }
TEST_P(SimdLevels, SumF64) { sums<double>(); }
TEST_P(SimdLevels, SoftmaxF32) { softmax_check<float>(); }
TEST_P(SimdLevels, SoftmaxF64) { softmax_check<double>(); }
TEST_P(SimdLevels, GemmF32) { gemm_check<float>(); }
TEST_P(SimdLevels, GemmF64) { gemm_check<double>(); }
TEST_P(SimdLevels, PositionIndependentF32) { position_independence<float>(); }
TEST_P(SimdLevels, PositionIndependentF64) { position_independence<double>(); }

// exp near the top of its range: finite results up to ln(FLT_MAX), monotone, no early overflow.
TEST_P(SimdLevels, ExpF32NearOverflow) {
  std::vector<float> x;
  for (float v = 88.0f; v <= 88.72283f; v = std::nextafter(v, 100.f)) x.push_back(v);
  std::vector<float> y(x.size());
  t_->unary_f32(UnaryOp::Exp, y.data(), x.data(), 1, int64_t(x.size()), 0, 0);
  int64_t bad = 0;
  float first_bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    LD ref = std::exp(LD(x[i]));
    if (!(std::fabs(LD(y[i]) - ref) <= 3 * ulp_of<float>(ref))) {
      if (!bad) first_bad = x[i];
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << "exp_f32 wrong for " << bad << " of " << x.size() << " inputs in [88, ln FLT_MAX], first at x="
                    << first_bad;
}

// max_f32 (the cross-entropy's row max) equals std::max folded from -inf, bit for bit: random
// rows of every length from 0 to 70 (every tail of 16 lanes), the max at the first and last
// position, NaNs anywhere (skipped, as std::max(m, NaN) keeps m), +-inf, -0 and +0.
TEST_P(SimdLevels, MaxF32IsStdMaxFold) {
  std::mt19937 g(11);
  std::uniform_real_distribution<float> u(-50.f, 50.f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.f, 0.f};
  for (int64_t n = 0; n <= 70; ++n)
    for (int round = 0; round < 20; ++round) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = u(g);
      if (n && round % 4 == 1) x[size_t(g() % n)] = specials[g() % 5];
      if (n && round % 4 == 2) x[0] = 60.f;
      if (n && round % 4 == 3) x[size_t(n - 1)] = 60.f;
      float want = -std::numeric_limits<float>::infinity();
      for (float v : x) want = std::max(want, v);
      const float got = t_->max_f32(x.data(), n);
      EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "n " << n << " round " << round << ": " << got
                                                          << ", std::max gives " << want;
    }
}

// sumsq_f32 (gradient clipping's norm) against its definition: 8 f64 lanes, lane j summing the
// squares of elements j, j + 8, ..., folded pairwise; every tail length 0..70 and a long run. Each
// square is exact in f64, so the scalar, avx2 and avx512 tables all give these bits.
TEST_P(SimdLevels, SumSquaresF32IsEightLanesOfF64) {
  std::mt19937 g(12);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 70, 100003}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = u(g) * (g() % 7 == 0 ? 1e3f : 1.f);
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i) lane[i % 8] += double(x[size_t(i)]) * double(x[size_t(i)]);
    const double want = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    const double got = t_->sumsq_f32(x.data(), n);
    EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "n " << n << ": " << got << " want " << want;
  }
}

// adam_f32 against the step in f64 on random parameters, gradients and moments, in each mode (no
// decay, Adam's, AdamW's), for lengths that leave every tail of 8 and 16 lanes; f32 rounding of a
// few operations: relative error 1e-5.
TEST_P(SimdLevels, AdamF32MatchesTheStepInF64) {
  std::mt19937 g(13);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int mode = 0; mode < 3; ++mode)
    for (int64_t n : {1, 5, 16, 17, 33, 1000}) {
      const AdamF32 a{0.9f, 0.999f, 1e-8f, 0.1f, 1.f - 1e-3f * 0.1f, 1e-3f / 0.19f, 1.f / std::sqrt(0.0199f), mode};
      const size_t len = static_cast<size_t>(n);
      std::vector<float> p(len), m(len), v(len), gr(len);
      for (int64_t i = 0; i < n; ++i)
        p[size_t(i)] = u(g), m[size_t(i)] = 0.1f * u(g), v[size_t(i)] = 0.01f * std::fabs(u(g)), gr[size_t(i)] = u(g);
      std::vector<float> p0 = p, m0 = m, v0 = v;
      t_->adam_f32(p.data(), m.data(), v.data(), gr.data(), n, a);
      for (int64_t i = 0; i < n; ++i) {
        double w = p0[size_t(i)], gg = gr[size_t(i)];
        if (mode == 1) gg += double(a.wd) * w;
        if (mode == 2) w *= double(a.decay);
        const double mm = double(a.b1) * m0[size_t(i)] + (1 - double(a.b1)) * gg;
        const double vv = double(a.b2) * v0[size_t(i)] + (1 - double(a.b2)) * gg * gg;
        const double pw = w - double(a.step) * (mm / (std::sqrt(vv) * double(a.inv_sqrt_bc2) + double(a.eps)));
        EXPECT_NEAR(m[size_t(i)], mm, 1e-5 * (std::fabs(mm) + 1e-3)) << "mode " << mode << " n " << n << " i " << i;
        EXPECT_NEAR(v[size_t(i)], vv, 1e-5 * (std::fabs(vv) + 1e-6)) << "mode " << mode << " n " << n << " i " << i;
        EXPECT_NEAR(p[size_t(i)], pw, 1e-5 * (std::fabs(pw) + 1e-3)) << "mode " << mode << " n " << n << " i " << i;
      }
    }
}

// ---------------------------------------------------------------- f16 / bf16 runs
// The tables' run conversions (widen_f16, widen_bf16, narrow_f16, narrow_bf16; the vector unit's
// in the avx2 and avx512 builds) against core's scalar converters (core/dtype.hpp), bit for bit:
// all 65536 f16 and 65536 bf16 patterns widened; f32 patterns narrowed: both signs, all 256
// exponents, the 1024 values of the top 10 mantissa bits, each with the low 13 bits 0, 1, 0xfff,
// 0x1000, 0x1001, 0x1fff (about the f16 rounding point; with the top bits these also put values
// on, just below and just above every bf16 tie and every tie of the f16 subnormal range), which
// covers NaN payloads quiet and signaling, +-inf, f32 subnormals, +-65504 and the overflow tie;
// then a million random patterns. Each array is converted in one call, then again in runs of 1,
// 2, ..., 37 elements (every tail length of 8 and 16 lanes).
std::vector<uint32_t> f32_test_patterns() {
  std::vector<uint32_t> u;
  const uint32_t lows[] = {0, 1, 0xfff, 0x1000, 0x1001, 0x1fff};
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t e = 0; e < 256; ++e)
      for (uint32_t hi = 0; hi < 1024; ++hi)
        for (uint32_t lo : lows) u.push_back(sign << 31 | e << 23 | hi << 13 | lo);
  std::mt19937 g(7);
  for (int i = 0; i < 1000000; ++i) u.push_back(uint32_t(g()));
  return u;
}

// convert(dst, src, n) on [0, n): whole, then in runs of 1, 2, ..., 37, 1, 2, ... elements into
// a second output; the number of elements whose bits differ from ref(src[i]) in either.
template <class In, class Out, class Convert, class Ref>
int64_t run_mismatches(const char* what, const std::vector<In>& src, Convert convert, Ref ref) {
  const size_t n = src.size();
  std::vector<Out> whole(n), pieces(n);
  convert(whole.data(), src.data(), int64_t(n));
  size_t len = 1;
  for (size_t i = 0; i < n; i += len, len = len % 37 + 1)
    convert(pieces.data() + i, src.data() + i, int64_t(std::min(len, n - i)));
  int64_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto want = ref(src[i]);
    for (int piece = 0; piece < 2; ++piece) {
      const Out& got = piece ? pieces[i] : whole[i];
      if (std::memcmp(&got, &want, sizeof(Out)) == 0) continue;
      if (bad++ < 5) {
        uint32_t g = 0, w = 0, x = 0;
        std::memcpy(&g, &got, sizeof(Out));
        std::memcpy(&w, &want, sizeof(Out));
        std::memcpy(&x, &src[i], sizeof(In));
        ADD_FAILURE() << what << (piece ? " in runs" : " whole") << " of 0x" << std::hex << x << ": 0x" << g
                      << ", the scalar converter 0x" << w;
      }
    }
  }
  return bad;
}

TEST_P(SimdLevels, HalfConversionsBitExact) {
  std::vector<nx::Half> f16(65536);
  std::vector<nx::BFloat16> bf16(65536);
  for (uint32_t i = 0; i < 65536; ++i) f16[i].bits = bf16[i].bits = uint16_t(i);
  const std::vector<uint32_t> bits = f32_test_patterns();
  std::vector<float> f32(bits.size());
  std::memcpy(f32.data(), bits.data(), bits.size() * sizeof(float));
  const int64_t bad_wf = run_mismatches<nx::Half, float>("widen_f16", f16, t_->widen_f16,
                                                          [](nx::Half h) { return nx::f16_to_f32(h.bits); });
  const int64_t bad_wb = run_mismatches<nx::BFloat16, float>("widen_bf16", bf16, t_->widen_bf16,
                                                              [](nx::BFloat16 h) { return nx::bf16_to_f32(h.bits); });
  const int64_t bad_nf = run_mismatches<float, nx::Half>("narrow_f16", f32, t_->narrow_f16,
                                                          [](float f) { return nx::Half{nx::f32_to_f16(f)}; });
  const int64_t bad_nb = run_mismatches<float, nx::BFloat16>("narrow_bf16", f32, t_->narrow_bf16,
                                                              [](float f) { return nx::BFloat16{nx::f32_to_bf16(f)}; });
  std::printf("  [%s] f16/bf16 runs: 65536 f16 and 65536 bf16 patterns widened, %zu f32 patterns narrowed to each "
              "(whole and in runs of 1..37); mismatches %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n",
              t_->name, f32.size(), bad_wf, bad_wb, bad_nf, bad_nb);
  EXPECT_EQ(bad_wf + bad_wb + bad_nf + bad_nb, 0);
}

// The f16/bf16 GEMM packs its operands with widen_n (runs along a panel, or along k into a
// buffer it transposes) and rounds C with narrow_n: with the same blocking as the f32 GEMM, every
// element of C must be the f32 GEMM's on the widened operands, rounded once, bit for bit (tiny and
// packed paths, partial panels, k blocks not a multiple of the transposing chunk, more rows than a
// block of C, more columns than NC, each operand row-major or transposed).
template <class H>
int64_t half_gemm_mismatches(const SimdTable& t, int64_t m, int64_t n, int64_t k, bool ta, bool tb, std::mt19937_64& g) {
  std::normal_distribution<float> d(0.f, 1.f);
  auto narrow = [](float f) {
    if constexpr (std::is_same_v<H, nx::Half>) return H{nx::f32_to_f16(f)}; else return H{nx::f32_to_bf16(f)};
  };
  auto wide = [](H h) {
    if constexpr (std::is_same_v<H, nx::Half>) return nx::f16_to_f32(h.bits); else return nx::bf16_to_f32(h.bits);
  };
  std::vector<H> a(size_t(m * k)), b(size_t(k * n));
  for (auto& v : a) v = narrow(d(g));
  for (auto& v : b) v = narrow(d(g));
  std::vector<float> af(a.size()), bf(b.size());
  std::transform(a.begin(), a.end(), af.begin(), wide);
  std::transform(b.begin(), b.end(), bf.begin(), wide);
  const int64_t rsa = ta ? 1 : k, csa = ta ? m : 1, rsb = tb ? 1 : n, csb = tb ? k : 1, ldc = n + 3;
  std::vector<H> c(size_t(m * ldc), H{0x1234});
  std::vector<float> cf(size_t(m * ldc));
  if constexpr (std::is_same_v<H, nx::Half>) t.gemm_f16(c.data(), ldc, a.data(), rsa, csa, b.data(), rsb, csb, m, n, k);
  else t.gemm_bf16(c.data(), ldc, a.data(), rsa, csa, b.data(), rsb, csb, m, n, k);
  t.gemm_f32(cf.data(), ldc, af.data(), rsa, csa, bf.data(), rsb, csb, m, n, k);
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const uint16_t want = j < n ? narrow(cf[size_t(i * ldc + j)]).bits : uint16_t(0x1234);  // padding untouched
      bad += c[size_t(i * ldc + j)].bits != want;
    }
  return bad;
}

TEST_P(SimdLevels, HalfGemmIsRoundedF32Gemm) {
  struct Case { int64_t m, n, k; };
  const Case cases[] = {{7, 13, 5}, {32, 32, 32}, {129, 65, 300}, {6, 16, 400}, {500, 70, 333}, {5, 3100, 40}, {121, 7, 257}};
  std::mt19937_64 g(11);
  for (const auto& cs : cases)
    for (int layout = 0; layout < 4; ++layout) {  // bit 0: A transposed, bit 1: B transposed
      const bool ta = layout & 1, tb = layout & 2;
      EXPECT_EQ(half_gemm_mismatches<nx::Half>(*t_, cs.m, cs.n, cs.k, ta, tb, g), 0)
          << "f16 " << cs.m << "x" << cs.n << "x" << cs.k << " layout " << layout;
      EXPECT_EQ(half_gemm_mismatches<nx::BFloat16>(*t_, cs.m, cs.n, cs.k, ta, tb, g), 0)
          << "bf16 " << cs.m << "x" << cs.n << "x" << cs.k << " layout " << layout;
    }
}

TEST(SimdSelect, SetLevel) {
  const SimdTable& before = nx::cpu::simd();
  EXPECT_TRUE(nx::cpu::set_simd_level("scalar"));
  EXPECT_EQ(&nx::cpu::simd(), &nx::cpu::simd_scalar);
  EXPECT_EQ(nx::cpu::set_simd_level("avx2"), cpu_has("avx2"));
  EXPECT_EQ(nx::cpu::set_simd_level("avx512"), cpu_has("avx512"));
  EXPECT_FALSE(nx::cpu::set_simd_level("sse9"));
  // the default is the best level the CPU has
  const SimdTable* best = cpu_has("avx512") ? &nx::cpu::simd_avx512 : cpu_has("avx2") ? &nx::cpu::simd_avx2 : &nx::cpu::simd_scalar;
  EXPECT_EQ(&before, best);
  ASSERT_TRUE(nx::cpu::set_simd_level(before.name));
  EXPECT_EQ(&nx::cpu::simd(), &before);
}

INSTANTIATE_TEST_SUITE_P(Levels, SimdLevels, ::testing::Values("scalar", "avx2", "avx512"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
