// f16 / bf16 <-> f32 conversions (src/core/dtype.hpp) against independent references:
//  - every one of the 65536 bit patterns of each format: decoded value (exact, computed with
//    ldexp from the fields) and the round trip back to the same bits;
//  - f32 -> f16/bf16 round to nearest even: an exact double-based reference on random and
//    exhaustive f32 inputs (every tie, every exponent, the subnormal and overflow boundaries),
//    and the F16C instructions (_cvtss_sh / _cvtsh_ss) when the CPU has them;
//  - the same conversions through the CPU backend's copy (tensor casts).
#include <cpuid.h>
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <limits>

#include "cpp_test_util.hpp"

namespace {

using nx::bf16_to_f32;
using nx::DType;
using nx::Tensor;
using nx::bits_f32;
using nx::f16_to_f32;
using nx::f32_bits;
using nx::f32_to_bf16;
using nx::f32_to_f16;

bool has_f16c() {  // CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports lacks "f16c")
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
}

__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

// ---------------------------------------------------------------- references
// Value of a finite binary16 / bfloat16 pattern, from the IEEE fields.
double f16_value(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), e - 25);
  return sign ? -v : v;
}
double bf16_value(uint16_t h) {
  int sign = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
  double v = e == 0 ? std::ldexp(double(m), -133) : std::ldexp(double(128 + m), e - 134);
  return sign ? -v : v;
}

// Round-to-nearest-even of a finite float into a format with `mant` stored mantissa bits, minimum
// normal exponent emin and maximum finite value maxv; returns the bits.
// The value is scaled so that one unit in the last place of the result is 1, rounded with
// nearbyint (ties to even in the default rounding mode), then re-encoded.
uint16_t rne_reference(float f, int mant, int emin, int ebias, int ebits, double maxv) {
  uint16_t sign = std::signbit(f) ? uint16_t(1u << (mant + ebits)) : 0;
  double a = std::fabs(double(f));
  if (std::isnan(f)) return 0xffff;  // handled by the caller
  if (std::isinf(f)) return uint16_t(sign | (((1u << ebits) - 1) << mant));
  int e = a == 0 ? emin : std::max(std::ilogb(a), emin);  // exponent of the result's binade
  double q = std::ldexp(1.0, e - mant);                    // ulp in that binade
  double n = std::nearbyint(a / q);                        // exact: a / q is a float times 2^k
  double r = n * q;
  // halfway past the largest finite value rounds to infinity: maxv + ulp/2 and above
  if (r > maxv) return uint16_t(sign | (((1u << ebits) - 1) << mant));
  if (r == 0) return sign;
  int re = std::ilogb(r);
  if (re < emin) return uint16_t(sign | uint16_t(std::ldexp(r, -(emin - mant))));  // subnormal
  uint32_t man = uint32_t(std::ldexp(r, mant - re)) - (1u << mant);
  return uint16_t(sign | (uint32_t(re + ebias) << mant) | man);
}
uint16_t f16_reference(float f) { return rne_reference(f, 10, -14, 15, 5, 65504.0); }
uint16_t bf16_reference(float f) { return rne_reference(f, 7, -126, 127, 8, double(bf16_value(0x7f7f))); }

bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

// ---------------------------------------------------------------- all 65536 patterns
TEST(HalfConversion, F16AllPatternsDecodeAndRoundTrip) {
  int64_t checked = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t h = uint16_t(b);
    float f = f16_to_f32(h);
    if (f16_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      EXPECT_EQ(std::signbit(f), bool(h & 0x8000)) << std::hex << b;
      uint16_t back = f32_to_f16(f);
      EXPECT_TRUE(f16_is_nan(back)) << std::hex << b << " -> " << back;
      EXPECT_EQ(back & 0x8000, h & 0x8000);
      if (has_f16c()) {
        EXPECT_TRUE(std::isnan(hw_f16_to_f32(h)));
      }
      continue;
    }
    if ((h & 0x7fff) == 0x7c00) {
      EXPECT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY);
    } else {
      EXPECT_EQ(double(f), f16_value(h)) << std::hex << b;
    }
    EXPECT_EQ(std::signbit(f), bool(h & 0x8000)) << std::hex << b;  // -0 stays -0
    if (has_f16c()) {
      EXPECT_EQ(f32_bits(f), f32_bits(hw_f16_to_f32(h))) << std::hex << b;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "round trip of 0x" << std::hex << b;
    ++checked;
  }
  EXPECT_EQ(checked, 65536 - 2 * 1023);  // every pattern except the 2046 NaNs
}

TEST(HalfConversion, Bf16AllPatternsDecodeAndRoundTrip) {
  int64_t checked = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t h = uint16_t(b);
    float f = bf16_to_f32(h);
    EXPECT_EQ(f32_bits(f), uint32_t(h) << 16);  // bf16 is the top half of an f32, always
    if (bf16_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f));
      uint16_t back = f32_to_bf16(f);
      EXPECT_TRUE(bf16_is_nan(back)) << std::hex << b << " -> " << back;
      EXPECT_EQ(back & 0x8000, h & 0x8000);
      continue;
    }
    if ((h & 0x7fff) == 0x7f80) EXPECT_TRUE(std::isinf(f));
    else EXPECT_EQ(double(f), bf16_value(h)) << std::hex << b;
    ASSERT_EQ(f32_to_bf16(f), h) << "round trip of 0x" << std::hex << b;
    ++checked;
  }
  EXPECT_EQ(checked, 65536 - 2 * 127);
}

// ---------------------------------------------------------------- rounding f32 -> half
// Checks f32_to_f16 / f32_to_bf16 on one input against the references; counts mismatches.
struct Mismatch {
  int64_t n = 0;
  uint32_t first = 0;
  void add(uint32_t bits) { if (!n++) first = bits; }
};

void check_f16(uint32_t bits, bool hw, Mismatch& ref_bad, Mismatch& hw_bad) {
  float f = bits_f32(bits);
  uint16_t got = f32_to_f16(f);
  if (std::isnan(f)) {
    if (!f16_is_nan(got) || (got & 0x8000) != ((bits >> 16) & 0x8000)) ref_bad.add(bits);
    return;
  }
  if (got != f16_reference(f)) ref_bad.add(bits);
  if (hw && got != hw_f32_to_f16(f)) hw_bad.add(bits);
}

void check_bf16(uint32_t bits, Mismatch& bad) {
  float f = bits_f32(bits);
  uint16_t got = f32_to_bf16(f);
  if (std::isnan(f)) {
    if (!bf16_is_nan(got) || (got & 0x8000) != ((bits >> 16) & 0x8000)) bad.add(bits);
    return;
  }
  if (got != bf16_reference(f)) bad.add(bits);
}

TEST(HalfConversion, F16RoundToNearestEvenRandom) {
  const bool hw = has_f16c();
  std::mt19937_64 g(2024);
  Mismatch ref_bad, hw_bad;
  // random bit patterns (every exponent, NaNs included) and random values in the f16 range
  for (int i = 0; i < 2000000; ++i) check_f16(uint32_t(g()), hw, ref_bad, hw_bad);
  std::uniform_real_distribution<float> d(-70000.f, 70000.f);
  for (int i = 0; i < 1000000; ++i) check_f16(f32_bits(d(g)), hw, ref_bad, hw_bad);
  EXPECT_EQ(ref_bad.n, 0) << "first mismatch: f32 bits 0x" << std::hex << ref_bad.first;
  EXPECT_EQ(hw_bad.n, 0) << "first mismatch with F16C: f32 bits 0x" << std::hex << hw_bad.first;
  if (!hw) std::printf("  (no F16C on this CPU: checked against the double-based reference only)\n");
}

TEST(HalfConversion, F16RoundToNearestEvenExhaustiveTies) {
  // For every sign, f32 exponent and top 10 mantissa bits, the low 13 bits at the rounding
  // boundaries: exactly on a tie (0x1000), either side of it, zero and all ones. In the f16
  // subnormal range the rounding point moves up; there every low pattern of the dropped bits is
  // covered by the exhaustive sweep below.
  const bool hw = has_f16c();
  Mismatch ref_bad, hw_bad;
  const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x0800, 0x17ff};
  for (uint32_t top = 0; top < (1u << 19); ++top)
    for (uint32_t low : lows) check_f16((top << 13) | low, hw, ref_bad, hw_bad);
  // f16 subnormal range (f32 exponents 100..112, values 2^-27 .. 2^-14): 13 + (113 - e) mantissa
  // bits are dropped; every kept pattern with the dropped bits at the boundaries, plus random ones.
  std::mt19937_64 g(4);
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t e = 100; e <= 112; ++e) {
      const uint32_t dropped = std::min(23u, 13u + (113u - e)), half = 1u << (dropped - 1);
      const uint32_t kept = 1u << (23 - dropped);
      const uint32_t dlows[] = {0, 1, half - 1, half, half + 1, (half << 1) - 1};
      for (uint32_t k = 0; k < kept; ++k)
        for (uint32_t low : dlows) check_f16(sign | (e << 23) | (k << dropped) | low, hw, ref_bad, hw_bad);
      for (int i = 0; i < 100000; ++i) check_f16(sign | (e << 23) | uint32_t(g() & 0x7fffff), hw, ref_bad, hw_bad);
    }
  }
  EXPECT_EQ(ref_bad.n, 0) << "first mismatch: f32 bits 0x" << std::hex << ref_bad.first;
  EXPECT_EQ(hw_bad.n, 0) << "first mismatch with F16C: f32 bits 0x" << std::hex << hw_bad.first;
}

TEST(HalfConversion, F16SpecialValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);           // largest finite
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);         // just below the overflow tie
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);           // the tie rounds to even: infinity
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(5.9604645e-8f), 0x0001);      // smallest subnormal 2^-24
  EXPECT_EQ(f32_to_f16(2.9802322e-8f), 0x0000);      // 2^-25: tie between 0 and 2^-24 -> even (0)
  EXPECT_EQ(f32_to_f16(std::nextafter(2.9802322e-8f, 1.f)), 0x0001);
  EXPECT_EQ(f32_to_f16(8.9406967e-8f), 0x0002);      // 1.5 * 2^-24: tie -> even (2)
  EXPECT_EQ(f32_to_f16(6.1035156e-5f), 0x0400);      // smallest normal 2^-14
  EXPECT_EQ(f32_to_f16(6.1001629e-5f), 0x03ff);      // largest subnormal
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);    // tie between 1 and 1+2^-10 -> 1
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie -> even mantissa 2
  EXPECT_EQ(f32_to_f16(FLT_MIN), 0x0000);
  EXPECT_EQ(f32_to_f16(-FLT_TRUE_MIN), 0x8000);      // underflow keeps the sign
  EXPECT_TRUE(f16_is_nan(f32_to_f16(NAN)));
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
}

TEST(HalfConversion, Bf16RoundToNearestEven) {
  Mismatch bad;
  std::mt19937_64 g(77);
  for (int i = 0; i < 3000000; ++i) check_bf16(uint32_t(g()), bad);
  // every exponent and sign with the dropped 16 bits at the rounding boundaries
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xbfff};
  for (uint32_t top = 0; top < 65536; ++top)
    for (uint32_t low : lows) check_bf16((top << 16) | low, bad);
  EXPECT_EQ(bad.n, 0) << "first mismatch: f32 bits 0x" << std::hex << bad.first;
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(FLT_MAX), 0x7f80);               // rounds past the largest bf16: inf
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f7f7fff)), 0x7f7f);  // just below the overflow tie
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00008000)), 0x0000);  // subnormal tie -> even (0)
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00018000)), 0x0002);
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(bits_f32(0x7f800001))));  // signalling NaN whose top half is inf
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(bits_f32(0xff800001))));
}

// ---------------------------------------------------------------- through the backend (casts)
TEST(HalfConversion, TensorCastsMatchScalarConversions) {
  std::mt19937_64 g(31);
  std::vector<float> src(4099);
  std::uniform_real_distribution<float> d(-1000.f, 1000.f);
  for (auto& v : src) v = d(g);
  src[0] = 65520.f;
  src[1] = -0.0f;
  src[2] = 2.9802322e-8f;
  src[3] = NAN;
  Tensor f32 = nx::from_data(src.data(), {int64_t(src.size())}, DType::F32, nxt::cpu());
  nx::GradModeGuard off(false);
  Tensor h = nx::cast(f32, DType::F16), b = nx::cast(f32, DType::BF16);
  const uint16_t* hp = h.data_as<uint16_t>();
  const uint16_t* bp = b.data_as<uint16_t>();
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(hp[i], f32_to_f16(src[i])) << i;
    ASSERT_EQ(bp[i], f32_to_bf16(src[i])) << i;
  }
  // back to f32 and f64: exact decode
  Tensor h32 = nx::cast(h, DType::F32), h64 = nx::cast(h, DType::F64), b64 = nx::cast(b, DType::F64);
  for (size_t i = 4; i < src.size(); ++i) {
    ASSERT_EQ(h32.data_as<float>()[i], f16_to_f32(hp[i])) << i;
    ASSERT_EQ(h64.data_as<double>()[i], f16_value(hp[i])) << i;
    ASSERT_EQ(b64.data_as<double>()[i], bf16_value(bp[i])) << i;
  }
  // a strided (transposed) half view converts element by element
  Tensor m = nxt::make(nxt::uniform(g, 12, -4, 4), {3, 4}, DType::F16);
  Tensor mt = nx::transpose(m, 0, 1);
  Tensor c = nx::cast(mt, DType::F32);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(c.data_as<float>()[i * 3 + j], f16_to_f32(m.data_as<uint16_t>()[j * 4 + i]));
}

}  // namespace
