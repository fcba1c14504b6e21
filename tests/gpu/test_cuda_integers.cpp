// CUDA dtype conversions and integer sums against the CPU backend, bit for bit (issue 17), through
// the C API: every pair of the seven dtypes on values at the edges (INT64_MIN/MAX, 2^53 + 1, 2^31,
// -2^31 - 1, NaN, +-Inf, 1e30, -0.0, subnormals, every f16 and bf16 bit pattern, random bits),
// from contiguous, transposed and misaligned sources (the vectorized cast kernel and the strided
// one); integer sums that overflow int64 wrap modulo 2^64, and int32 sums are exact in int64, on
// every CUDA reduction path (one row, chunked rows, tall chunks, one thread per output).
// NaN results compare as NaN: the hardware's conversions give the canonical NaN where the CPU's
// software ones keep the sign and payload, which no result of a cast depends on.
// PyTorch's own results (torch 1.13, as literals) on both devices: integer -> f32/f64 rounds once,
// integer -> f16/bf16 through f32; integer pow is exact and wraps; int64 comparisons and argmax
// compare the integers, not doubles (tests/capi/test_integer_semantics.c checks the CPU alone).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "capi_test_util.hpp"
#include "nexus.h"

namespace {

const nx_device kCpu = {NX_CPU, 0};
const nx_device kGpu = {NX_CUDA, 0};

#define REQUIRE_GPU() \
  do { if (nx_cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; } while (0)

const nx_dtype kDtypes[] = {NX_F64, NX_F32, NX_F16, NX_BF16, NX_I64, NX_I32, NX_BOOL};

// A fixed 64-bit generator (PCG's LCG step, the high half mixed in): the same bits every run.
struct Bits64 {
  uint64_t s;
  uint64_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s ^ (s >> 29);
  }
};

template <class T> void append(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}
template <class T> T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

std::vector<double> edge_doubles() {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  return {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.9999999, -0.9999999,
          nan, std::copysign(nan, -1.0), from_bits<double>(0x7ff0000000000001ull) /* signaling */,
          from_bits<double>(0xfff8000000000123ull) /* payload */, inf, -inf, 1e30, -1e30, 1e300, -1e300,
          2147483647.0, 2147483648.0 /* 2^31 */, -2147483648.0, -2147483649.0 /* -2^31 - 1 */, 4294967295.0,
          4294967296.0, 4294967301.0, 3e9, -3e9, 9007199254740992.0 /* 2^53 */, 9007199254740994.0,
          -9007199254740994.0, 9223372036854774784.0 /* the largest double below 2^63 */, -9223372036854774784.0,
          9223372036854775808.0 /* 2^63 */, -9223372036854775808.0, 18446744073709551616.0 /* 2^64 */,
          -18446744073709551616.0, 65504.0, 65519.99, 65520.0 /* rounds to f16 inf */, 5.9604644775390625e-08,
          2.98023223876953125e-08 /* 2^-25: f16 tie to 0 */, 4.4703483581542969e-08, 6.103515625e-05,
          1.401298464324817e-45 /* f32 smallest subnormal */, 1e-40, -1e-40, 1.1754942e-38, 5e-324, -5e-324,
          2.2250738585072014e-308, -1e-310, 3.4028234663852886e38 /* FLT_MAX */,
          3.4028235677973366e38 /* rounds to f32 inf */, 1.0000000596046448 /* 1 + 2^-24: f32 tie */,
          1.0000001788139343, 16777217.0, 1.00390625 /* 1 + 2^-8: bf16 tie */, 1.01171875, 0.1, 1.0 / 3.0,
          123456789.0, -123456789.987, 2.5e-8, -7.0e4, 3.0e38};
}

std::vector<int64_t> edge_int64s() {
  const int64_t mn = std::numeric_limits<int64_t>::min(), mx = std::numeric_limits<int64_t>::max();
  const int64_t p53 = int64_t(1) << 53, p31 = int64_t(1) << 31, p32 = int64_t(1) << 32;
  return {mn, mn + 1, mx, mx - 1, 0, 1, -1, p53, p53 + 1, -(p53 + 1), p53 - 1, p31, p31 - 1, -p31, -p31 - 1,
          p32, p32 + 5, p32 - 1, -p32 - 7, (int64_t(1) << 24) + 1, -((int64_t(1) << 24) + 1),
          (int64_t(1) << 60) + (int64_t(1) << 36) + 1 /* f32 via f64 rounds differently than directly */,
          mx - (int64_t(1) << 39) /* the largest f32 below 2^63 */, mx - (int64_t(1) << 39) + 1,
          mx - 1023 /* the largest f64 below 2^63 */, mx - 511, 65504, 65519, 65520, 65536, -65520};
}

std::vector<int32_t> edge_int32s() {
  const int32_t mn = std::numeric_limits<int32_t>::min(), mx = std::numeric_limits<int32_t>::max();
  return {mn, mn + 1, mx, mx - 1, 0, 1, -1, 16777216, 16777217, -16777217, 16777219, 65504, 65519, 65520, 65536,
          -65520, 2147483520, 2147483584, -2147483584, 123456789};
}

// n elements of dtype dt: the edge values, and random bit patterns (every pattern for f16/bf16).
std::vector<uint8_t> source_bytes(nx_dtype dt, int64_t* n) {
  std::vector<uint8_t> out;
  Bits64 rng{uint64_t(dt) * 977 + 1};
  switch (dt) {
    case NX_F64:
      for (double v : edge_doubles()) append(out, v);
      for (int64_t v : edge_int64s()) append(out, double(v));
      for (int i = 0; i < 2048; ++i) append(out, from_bits<double>(rng.next()));
      for (int i = 0; i < 512; ++i) append(out, double(int64_t(rng.next()) >> (rng.next() % 64)));
      break;
    case NX_F32:
      for (double v : edge_doubles()) append(out, float(v));
      for (int64_t v : edge_int64s()) append(out, float(v));
      for (uint32_t b : {0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu, 0x4effffffu /* below 2^31 */,
                         0x4f000000u /* 2^31 */, 0xcf000001u, 0x5effffffu /* below 2^63 */, 0x5f000000u /* 2^63 */,
                         0xdf000000u, 0xdf000001u, 0x7f800001u /* signaling NaN */, 0xffc00000u, 0x7fc00123u})
        append(out, from_bits<float>(b));
      for (int i = 0; i < 4096; ++i) append(out, from_bits<float>(rng.next() >> 32));
      break;
    case NX_F16: case NX_BF16:
      for (uint32_t b = 0; b < 65536; ++b) append(out, uint16_t(b));
      break;
    case NX_I64:
      for (int64_t v : edge_int64s()) append(out, v);
      for (int i = 0; i < 2048; ++i) append(out, int64_t(rng.next()));
      for (int i = 0; i < 1024; ++i) append(out, int64_t(rng.next()) >> (rng.next() % 64));
      break;
    case NX_I32:
      for (int32_t v : edge_int32s()) append(out, v);
      for (int i = 0; i < 2048; ++i) append(out, int32_t(uint32_t(rng.next() >> 32)));
      for (int i = 0; i < 1024; ++i) append(out, int32_t(uint32_t(rng.next() >> 32)) >> (rng.next() % 32));
      break;
    default:
      for (int i = 0; i < 301; ++i) append(out, uint8_t(rng.next() >> 63));
      break;
  }
  const size_t es = nx_dtype_size(dt);
  if (out.size() / es % 8 == 0) {  // a tail past the cast kernel's 8-element packs
    const std::vector<uint8_t> first(out.begin(), out.begin() + long(es));
    out.insert(out.end(), first.begin(), first.end());
  }
  *n = int64_t(out.size() / es);
  return out;
}

// Row-major element bytes of t, from any device and layout.
std::vector<uint8_t> bytes_of(nx_tensor t) {
  int64_t n = 0;
  nx_dtype dt = NX_F32;
  EXPECT_EQ(nx_tensor_numel(t, &n), NX_OK);
  EXPECT_EQ(nx_tensor_dtype(t, &dt), NX_OK);
  std::vector<uint8_t> b(size_t(n) * nx_dtype_size(dt));
  EXPECT_EQ(nx_tensor_copy_to_host(t, b.data(), b.size(), nullptr), NX_OK) << nx_last_error_message();
  return b;
}

uint64_t element(const std::vector<uint8_t>& b, size_t i, size_t es) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + i * es, es);
  return v;
}
bool is_nan_bits(nx_dtype dt, uint64_t v) {
  switch (dt) {
    case NX_F64: return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    case NX_F32: return (v & 0x7fffffffu) > 0x7f800000u;
    case NX_F16: return (v & 0x7fffu) > 0x7c00u;
    case NX_BF16: return (v & 0x7fffu) > 0x7f80u;
    default: return false;
  }
}

// The source tensors one dtype's bytes make on a device, in the three layouts the CUDA copy
// distinguishes: contiguous and 16-byte aligned, transposed, contiguous at an odd offset.
enum Layout { kContiguous, kTransposed, kOffset };
const char* layout_name(Layout l) { return l == kContiguous ? "contiguous" : l == kTransposed ? "transposed" : "offset"; }

void make_source(nx_tensor* out, const std::vector<uint8_t>& bytes, int64_t n, nx_dtype dt, Layout layout,
                 nx_device dev) {
  const size_t es = nx_dtype_size(dt);
  nx_tensor base;
  if (layout == kContiguous) {
    OK(nx_tensor_from_data(out, bytes.data(), &n, 1, dt, dev, nullptr));
  } else if (layout == kTransposed) {  // [2, n] (the values, then reversed) viewed as [n, 2]
    std::vector<uint8_t> two(bytes);
    for (int64_t i = n - 1; i >= 0; --i)
      two.insert(two.end(), bytes.begin() + long(size_t(i) * es), bytes.begin() + long(size_t(i + 1) * es));
    const int64_t shape[2] = {2, n};
    OK(nx_tensor_from_data(&base, two.data(), shape, 2, dt, dev, nullptr));
    OK(nx_transpose(out, base, 0, 1, nullptr));
    nx_tensor_free(base);
  } else {  // one leading element, sliced off: contiguous, but not 16-byte aligned
    std::vector<uint8_t> shifted(es, 0);
    shifted.insert(shifted.end(), bytes.begin(), bytes.end());
    const int64_t m = n + 1;
    OK(nx_tensor_from_data(&base, shifted.data(), &m, 1, dt, dev, nullptr));
    OK(nx_slice(out, base, 0, 1, m, 1, nullptr));
    nx_tensor_free(base);
  }
}

void compare_casts(nx_dtype from, Layout layout) {
  int64_t n = 0;
  const std::vector<uint8_t> bytes = source_bytes(from, &n);
  const size_t ses = nx_dtype_size(from);
  nx_tensor sc, sg;
  make_source(&sc, bytes, n, from, layout, kCpu);
  make_source(&sg, bytes, n, from, layout, kGpu);
  const std::vector<uint8_t> src_rows = bytes_of(sc);  // the source in the results' (row-major) order
  for (nx_dtype to : kDtypes) {
    nx_tensor oc, og;
    OK(nx_cast(&oc, sc, to, nullptr));
    OK(nx_cast(&og, sg, to, nullptr));
    const std::vector<uint8_t> want = bytes_of(oc), got = bytes_of(og);
    ASSERT_EQ(got.size(), want.size());
    const size_t es = nx_dtype_size(to), count = want.size() / es;
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      const uint64_t w = element(want, i, es), g = element(got, i, es);
      if (w == g || (is_nan_bits(to, w) && is_nan_bits(to, g))) continue;
      if (++bad <= 5)
        ADD_FAILURE() << nx_dtype_name(from) << " -> " << nx_dtype_name(to) << " (" << layout_name(layout)
                      << ") element " << i << ": source bits 0x" << std::hex << element(src_rows, i, ses)
                      << ", CPU 0x" << w << ", CUDA 0x" << g << std::dec;
    }
    EXPECT_EQ(bad, 0u) << nx_dtype_name(from) << " -> " << nx_dtype_name(to) << " (" << layout_name(layout) << ")";
    nx_tensor_free(oc); nx_tensor_free(og);
  }
  nx_tensor_free(sc); nx_tensor_free(sg);
}

TEST(CudaIntegers, CastsMatchCpuBitForBitContiguous) {
  REQUIRE_GPU();
  for (nx_dtype from : kDtypes) compare_casts(from, kContiguous);
}

TEST(CudaIntegers, CastsMatchCpuBitForBitTransposed) {
  REQUIRE_GPU();
  for (nx_dtype from : kDtypes) compare_casts(from, kTransposed);
}

TEST(CudaIntegers, CastsMatchCpuBitForBitMisaligned) {
  REQUIRE_GPU();
  for (nx_dtype from : kDtypes) compare_casts(from, kOffset);
}

// The rules themselves, for values where the old CUDA path (through a double, then a saturating
// or undefined double -> int) gave something else: integers narrow modulo 2^32, floating values
// go to int64 (NaN 0, beyond int64 saturated) and then modulo 2^bits.
template <class To, class From>
std::vector<To> cast_on(nx_device dev, const std::vector<From>& v, nx_dtype from, nx_dtype to) {
  const int64_t n = int64_t(v.size());
  nx_tensor x = nullptr, y = nullptr;
  std::vector<To> out(v.size());
  EXPECT_EQ(nx_tensor_from_data(&x, v.data(), &n, 1, from, dev, nullptr), NX_OK) << nx_last_error_message();
  EXPECT_EQ(nx_cast(&y, x, to, nullptr), NX_OK) << nx_last_error_message();
  EXPECT_EQ(nx_tensor_copy_to_host(y, out.data(), out.size() * sizeof(To), nullptr), NX_OK) << nx_last_error_message();
  nx_tensor_free(x); nx_tensor_free(y);
  return out;
}

TEST(CudaIntegers, NarrowingAndFloatToIntegerFollowTheCpuRules) {
  REQUIRE_GPU();
  const int64_t mn = std::numeric_limits<int64_t>::min(), mx = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> i64 = {mx, mn, (int64_t(1) << 53) + 1, (int64_t(1) << 32) + 5, -(int64_t(1) << 31) - 1,
                                    int64_t(1) << 31, -1};
  const std::vector<int32_t> i64_to_i32 = {-1, 0, 1, 5, 2147483647, -2147483647 - 1, -1};
  const std::vector<int64_t> i64_to_i64_via_f64 = {mx, mn, int64_t(1) << 53};  // f64 holds 2^53 + 1 as 2^53
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> f64 = {nan, inf, -inf, 1e30, -1e30, 3e9, -2147483649.0, 2147483648.0, -0.0, -1.9};
  const std::vector<int32_t> f64_to_i32 = {0, -1, 0, -1, 0, -1294967296, 2147483647, -2147483647 - 1, 0, -1};
  const std::vector<int64_t> f64_to_i64 = {0, mx, mn, mx, mn, 3000000000, -2147483649, 2147483648, 0, -1};
  const std::vector<uint8_t> f64_to_bool = {1, 1, 1, 1, 1, 1, 1, 1, 0, 1};
  for (nx_device dev : {kCpu, kGpu}) {
    const std::string on = dev.type == NX_CPU ? "cpu" : "cuda";
    EXPECT_EQ((cast_on<int32_t>(dev, i64, NX_I64, NX_I32)), i64_to_i32) << on;
    const std::vector<int64_t> first3(i64.begin(), i64.begin() + 3);
    const std::vector<double> as_f64 = cast_on<double>(dev, first3, NX_I64, NX_F64);
    EXPECT_EQ((cast_on<int64_t>(dev, as_f64, NX_F64, NX_I64)), i64_to_i64_via_f64) << on;
    EXPECT_EQ((cast_on<int32_t>(dev, f64, NX_F64, NX_I32)), f64_to_i32) << on;
    EXPECT_EQ((cast_on<int64_t>(dev, f64, NX_F64, NX_I64)), f64_to_i64) << on;
    EXPECT_EQ((cast_on<uint8_t>(dev, f64, NX_F64, NX_BOOL)), f64_to_bool) << on;
  }
}

// Integer -> floating casts as torch's, on both devices: one rounding to f32 (through a double,
// 2^60 + 2^36 + 1 gave 2^60), f16/bf16 through f32.
// v = torch.tensor([2**60+2**36+1, -(2**60+2**36+1), 2**60+2**52+2**36+1, 2**53+2**29+1, 2**24+2**16+1, 65519, 65520])
TEST(CudaIntegers, IntegerToFloatingRoundsLikeTorch) {
  REQUIRE_GPU();
  const int64_t p = 1;
  const std::vector<int64_t> i64 = {(p << 60) + (p << 36) + 1, -((p << 60) + (p << 36) + 1),
                                    (p << 60) + (p << 52) + (p << 36) + 1, (p << 53) + (p << 29) + 1,
                                    (p << 24) + (p << 16) + 1, 65519, 65520};
  // v.to(torch.float32).view(torch.int32), v.to(torch.float16 / torch.bfloat16).view(torch.int16) & 0xffff
  const std::vector<uint32_t> f32 = {0x5d800001u, 0xdd800001u, 0x5d808001u, 0x5a000001u, 0x4b808000u, 0x477fef00u, 0x477ff000u};
  const std::vector<uint16_t> f16 = {0x7c00, 0xfc00, 0x7c00, 0x7c00, 0x7c00, 0x7bff, 0x7c00};
  const std::vector<uint16_t> bf16 = {0x5d80, 0xdd80, 0x5d81, 0x5a00, 0x4b80, 0x4780, 0x4780};
  // v.to(torch.float64)
  const std::vector<double> f64 = {1152921573326323712.0, -1152921573326323712.0, 1157425172953694208.0,
                                   9007199791611904.0, 16842753.0, 65519.0, 65520.0};
  // w = torch.tensor([2**24+3, 2**30+65, 2**24+2**16+1, 2**25+2**17+2**16+1], dtype=torch.int32): w.to(torch.float32),
  // w.to(torch.bfloat16) bits
  const std::vector<int32_t> i32 = {16777219, 1073741889, 16842753, 33751041};
  const std::vector<uint32_t> i32_f32 = {0x4b800002u, 0x4e800001u, 0x4b808000u, 0x4c00c000u};
  const std::vector<uint16_t> i32_bf16 = {0x4b80, 0x4e80, 0x4b80, 0x4c01};
  for (nx_device dev : {kCpu, kGpu}) {
    const std::string on = dev.type == NX_CPU ? "cpu" : "cuda";
    EXPECT_EQ((cast_on<uint32_t>(dev, i64, NX_I64, NX_F32)), f32) << on;
    EXPECT_EQ((cast_on<uint16_t>(dev, i64, NX_I64, NX_F16)), f16) << on;
    EXPECT_EQ((cast_on<uint16_t>(dev, i64, NX_I64, NX_BF16)), bf16) << on;
    EXPECT_EQ((cast_on<double>(dev, i64, NX_I64, NX_F64)), f64) << on;
    EXPECT_EQ((cast_on<uint32_t>(dev, i32, NX_I32, NX_F32)), i32_f32) << on;
    EXPECT_EQ((cast_on<uint16_t>(dev, i32, NX_I32, NX_BF16)), i32_bf16) << on;
  }
}

// Integer pow: exact, wrapping modulo 2^bits, torch's results for negative exponents; the CPU
// and CUDA share core/int_math.hpp's wrapping_pow (the CPU's double pow saturated 3^40 to INT64_MAX).
TEST(CudaIntegers, IntegerPowWrapsLikeTorch) {
  REQUIRE_GPU();
  const std::vector<int64_t> base = {3, -3, 2, 7, 3, 2, 1, -1, -1, 0}, ex = {40, 41, 64, 23, 39, -1, -5, -3, -4, -2};
  // torch.pow(torch.tensor(base), torch.tensor(ex)).tolist()
  const std::vector<int64_t> want = {-6289078614652622815LL, 420491770248316829LL, 0, 8922003266371364727LL,
                                     4052555153018976267LL, 0, 1, -1, 1, 0};
  const std::vector<int32_t> base32 = {3, 5, -7};
  // (torch.tensor([3, 5, -7], dtype=torch.int32) ** 21).tolist()
  const std::vector<int32_t> want32 = {1870418611, 1299066613, -192061479};
  const int64_t n = int64_t(base.size()), n32 = int64_t(base32.size());
  for (nx_device dev : {kCpu, kGpu}) {
    const std::string on = dev.type == NX_CPU ? "cpu" : "cuda";
    nx_tensor b, e, r, b32, r32, r40;
    OK(nx_tensor_from_data(&b, base.data(), &n, 1, NX_I64, dev, nullptr));
    OK(nx_tensor_from_data(&e, ex.data(), &n, 1, NX_I64, dev, nullptr));
    OK(nx_pow(&r, b, e, nullptr));
    std::vector<int64_t> got(base.size());
    OK(nx_tensor_copy_to_host(r, got.data(), got.size() * 8, nullptr));
    EXPECT_EQ(got, want) << on;
    OK(nx_pow_scalar(&r40, b, 40.0, nullptr));  // (torch.tensor(base) ** 40)[0] == -6289078614652622815
    OK(nx_tensor_copy_to_host(r40, got.data(), got.size() * 8, nullptr));
    EXPECT_EQ(got[0], -6289078614652622815LL) << on;
    OK(nx_tensor_from_data(&b32, base32.data(), &n32, 1, NX_I32, dev, nullptr));
    OK(nx_pow_scalar(&r32, b32, 21.0, nullptr));
    std::vector<int32_t> got32(base32.size());
    OK(nx_tensor_copy_to_host(r32, got32.data(), got32.size() * 4, nullptr));
    EXPECT_EQ(got32, want32) << on;
    nx_tensor_free(b); nx_tensor_free(e); nx_tensor_free(r); nx_tensor_free(r40);
    nx_tensor_free(b32); nx_tensor_free(r32);
  }
}

// int64 comparisons and argmax compare the integers (through doubles, 2^53 == 2^53 + 1).
TEST(CudaIntegers, Int64ComparisonsAndArgmaxAreExact) {
  REQUIRE_GPU();
  const int64_t p53 = int64_t(1) << 53, mx = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> a = {p53, p53, mx, -p53 - 1}, b = {p53 + 1, p53, mx - 1, -p53};
  // torch.eq / torch.lt / torch.gt (torch.tensor(a), torch.tensor(b)).tolist()
  const std::vector<uint8_t> eq = {0, 1, 0, 0}, lt = {1, 0, 0, 1}, gt = {0, 0, 1, 0};
  const std::vector<int64_t> row = {p53, p53 + 1, p53, mx - 1, mx, mx - 2};  // [2, 3]
  const int64_t n = 4, shape[2] = {2, 3};
  for (nx_device dev : {kCpu, kGpu}) {
    const std::string on = dev.type == NX_CPU ? "cpu" : "cuda";
    nx_tensor ta, tb, x, am;
    OK(nx_tensor_from_data(&ta, a.data(), &n, 1, NX_I64, dev, nullptr));
    OK(nx_tensor_from_data(&tb, b.data(), &n, 1, NX_I64, dev, nullptr));
    using Cmp = nx_status (*)(nx_tensor*, nx_tensor, nx_tensor, nx_stream);
    const std::pair<Cmp, const std::vector<uint8_t>*> cases[] = {{nx_eq, &eq}, {nx_lt, &lt}, {nx_gt, &gt}};
    for (const auto& [fn, want] : cases) {
      nx_tensor r;
      OK(fn(&r, ta, tb, nullptr));
      EXPECT_EQ(bytes_of(r), *want) << on;
      nx_tensor_free(r);
    }
    // torch.argmax(torch.tensor([[2**53, 2**53+1, 2**53], [M-1, M, M-2]]), 1).tolist() == [1, 1]
    OK(nx_tensor_from_data(&x, row.data(), shape, 2, NX_I64, dev, nullptr));
    OK(nx_argmax(&am, x, 1, false, nullptr));
    std::vector<int64_t> got(2);
    OK(nx_tensor_copy_to_host(am, got.data(), 16, nullptr));
    EXPECT_EQ(got, (std::vector<int64_t>{1, 1})) << on;
    nx_tensor_free(ta); nx_tensor_free(tb); nx_tensor_free(x); nx_tensor_free(am);
  }
}

// Integer sums: int64 wraps modulo 2^64 (as torch's and the CPU's), int32 and bool sum exactly
// into int64; max/min keep the extremes. Each shape is reduced over each axis and in full, so
// every CUDA path runs: one row per block, chunked rows with a second pass, tall chunks with a
// combining pass, one thread per output (outer * inner >= 2^20).
// T is the element's storage type: uint8_t for bool (values 0 and 1).
template <class T> std::vector<T> int_values(int64_t n, uint64_t seed, bool near_max) {
  Bits64 rng{seed};
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) {
    const uint64_t r = rng.next();
    if constexpr (std::is_same_v<T, uint8_t>) x = uint8_t(r >> 63);
    else if (near_max) x = (r & 1) ? std::numeric_limits<T>::max() - T(r % 1000) : std::numeric_limits<T>::min() + T(r % 7);
    else x = T(r);
  }
  return v;
}

// The wrapped sums of v [outer, n, inner] over n, as uint64 arithmetic gives them.
template <class T>
std::vector<int64_t> expected_sums(const std::vector<T>& v, int64_t outer, int64_t n, int64_t inner) {
  std::vector<int64_t> out(size_t(outer * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      uint64_t acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += uint64_t(int64_t(v[size_t((o * n + j) * inner + i)]));
      out[size_t(o * inner + i)] = int64_t(acc);
    }
  return out;
}

template <class T>
void check_int_sums(nx_dtype dt, const std::vector<int64_t>& shape, bool near_max, uint64_t seed) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  const std::vector<T> v = int_values<T>(numel, seed, near_max);
  std::string tag = std::string(nx_dtype_name(dt)) + " [";
  for (int64_t s : shape) tag += std::to_string(s) + " ";
  tag += near_max ? "] near the extremes" : "] random bits";
  nx_tensor xc, xg;
  OK(nx_tensor_from_data(&xc, v.data(), shape.data(), shape.size(), dt, kCpu, nullptr));
  OK(nx_tensor_from_data(&xg, v.data(), shape.data(), shape.size(), dt, kGpu, nullptr));
  // axis -1 means every axis
  for (int64_t axis = -1; axis < int64_t(shape.size()); ++axis) {
    int64_t outer = 1, n = numel, inner = 1;
    if (axis >= 0) {
      n = shape[size_t(axis)];
      for (int64_t d = 0; d < axis; ++d) outer *= shape[size_t(d)];
      for (size_t d = size_t(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
    }
    const std::vector<int64_t> want = expected_sums(v, outer, n, inner);
    const size_t naxes = axis >= 0 ? 1 : 0;
    nx_tensor sc, sg;
    OK(nx_sum(&sc, xc, &axis, naxes, false, nullptr));
    OK(nx_sum(&sg, xg, &axis, naxes, false, nullptr));
    nx_dtype out_dt;
    OK(nx_tensor_dtype(sg, &out_dt));
    EXPECT_EQ(out_dt, NX_I64) << tag;
    std::vector<int64_t> cpu(want.size()), gpu(want.size());
    OK(nx_tensor_copy_to_host(sc, cpu.data(), cpu.size() * 8, nullptr));
    OK(nx_tensor_copy_to_host(sg, gpu.data(), gpu.size() * 8, nullptr));
    EXPECT_EQ(cpu, want) << "CPU sum over axis " << axis << " of " << tag;
    EXPECT_EQ(gpu, want) << "CUDA sum over axis " << axis << " of " << tag;
    nx_tensor_free(sc); nx_tensor_free(sg);
    if (dt != NX_BOOL) {
      for (bool is_max : {true, false}) {
        nx_tensor mc, mg;
        OK((is_max ? nx_max : nx_min)(&mc, xc, &axis, naxes, false, nullptr));
        OK((is_max ? nx_max : nx_min)(&mg, xg, &axis, naxes, false, nullptr));
        EXPECT_EQ(bytes_of(mg), bytes_of(mc)) << (is_max ? "max" : "min") << " over axis " << axis << " of " << tag;
        nx_tensor_free(mc); nx_tensor_free(mg);
      }
    }
  }
  nx_tensor_free(xc); nx_tensor_free(xg);
}

TEST(CudaIntegers, Int64SumsWrapLikeTheCpu) {
  REQUIRE_GPU();
  for (bool near_max : {true, false}) {
    check_int_sums<int64_t>(NX_I64, {5}, near_max, 1);              // one small row
    check_int_sums<int64_t>(NX_I64, {100003}, near_max, 2);         // one long row: chunks and a second pass
    check_int_sums<int64_t>(NX_I64, {37, 300}, near_max, 3);        // rows; a short middle axis
    check_int_sums<int64_t>(NX_I64, {4096, 24}, near_max, 4);       // tall: chunked, then combined
    check_int_sums<int64_t>(NX_I64, {3, 1001, 5}, near_max, 5);     // odd widths, several outer slices
  }
  check_int_sums<int64_t>(NX_I64, {2, 3, 1 << 19}, true, 6);        // one thread per output
}

TEST(CudaIntegers, Int32AndBoolSumsAreExactInInt64) {
  REQUIRE_GPU();
  for (bool near_max : {true, false}) {
    check_int_sums<int32_t>(NX_I32, {5}, near_max, 11);
    check_int_sums<int32_t>(NX_I32, {100003}, near_max, 12);
    check_int_sums<int32_t>(NX_I32, {37, 300}, near_max, 13);
    check_int_sums<int32_t>(NX_I32, {4096, 24}, near_max, 14);
    check_int_sums<int32_t>(NX_I32, {3, 1001, 5}, near_max, 15);
  }
  check_int_sums<int32_t>(NX_I32, {2, 3, 1 << 19}, true, 16);
  check_int_sums<uint8_t>(NX_BOOL, {100003}, false, 17);
  check_int_sums<uint8_t>(NX_BOOL, {4096, 24}, false, 18);
}

// Sums of all INT64_MAX and all INT64_MIN, whose every partial sum overflows: the wrapped value.
TEST(CudaIntegers, Int64SumOfExtremesWraps) {
  REQUIRE_GPU();
  for (int64_t fill : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    const int64_t n = 100001;
    std::vector<int64_t> v(static_cast<size_t>(n), fill);
    const int64_t want = int64_t(uint64_t(fill) * uint64_t(n));
    for (nx_device dev : {kCpu, kGpu}) {
      nx_tensor x, s;
      OK(nx_tensor_from_data(&x, v.data(), &n, 1, NX_I64, dev, nullptr));
      OK(nx_sum(&s, x, nullptr, 0, false, nullptr));
      int64_t got = 0;
      OK(nx_tensor_copy_to_host(s, &got, 8, nullptr));
      EXPECT_EQ(got, want) << (dev.type == NX_CPU ? "cpu" : "cuda") << " fill " << fill;
      nx_tensor_free(x); nx_tensor_free(s);
    }
  }
}

}  // namespace
