/* The FP8 oracle of the C tests, written apart from the engine: a code's value from its sign,
 * exponent and mantissa fields, and the code a cast must give found by brute force over every
 * code. Shared by test_dtypes_8bit.c and test_kv_cache_8bit.c. */
#ifndef NX_FP8_REF_H
#define NX_FP8_REF_H
#include <math.h>
#include <stdint.h>

#include "nexus.h"

typedef struct {
  nx_dtype dtype;
  int man_bits, bias, has_inf;
  double max_finite;
  const char* name;
} Fp8;
static const Fp8 E4M3 __attribute__((unused)) = {NX_F8E4M3, 3, 7, 0, 448.0, "f8e4m3"};
static const Fp8 E5M2 __attribute__((unused)) = {NX_F8E5M2, 2, 15, 1, 57344.0, "f8e5m2"};

/* The value of a code, from its sign, exponent and mantissa fields; NAN for the NaN codes. */
__attribute__((unused)) static double ref_decode(const Fp8* f, uint8_t code) {
  const int sign = code >> 7, field = (code & 0x7f) >> f->man_bits, man = code & ((1 << f->man_bits) - 1);
  const int top = (1 << (7 - f->man_bits)) - 1;
  double v;
  if (f->has_inf && field == top) v = man ? NAN : INFINITY;
  else if (!f->has_inf && field == top && man == (1 << f->man_bits) - 1) v = NAN;
  else if (field == 0) v = ldexp(man, 1 - f->bias - f->man_bits);
  else v = ldexp((1 << f->man_bits) + man, field - f->bias - f->man_bits);
  return sign ? -v : v;
}

/* The code a cast must give: NaN -> 0x7f; infinities kept (E5M2) or saturated (E4M3); otherwise
 * the nearest finite code by absolute difference, the even code on a tie, and the largest finite
 * magnitude for anything past it. */
__attribute__((unused)) static uint8_t ref_encode(const Fp8* f, double x) {
  if (isnan(x)) return 0x7f;
  const uint8_t sign = signbit(x) ? 0x80 : 0;
  const double a = fabs(x);
  if (isinf(a) && f->has_inf) return sign | 0x7c;
  if (a >= f->max_finite) {
    for (int c = 0x7f; c >= 0; --c)
      if (ref_decode(f, (uint8_t)c) == f->max_finite) return sign | (uint8_t)c;
  }
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c < 0x80; ++c) {
    const double v = ref_decode(f, (uint8_t)c);
    if (isnan(v) || isinf(v)) continue;
    const double d = fabs(v - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  return sign | (uint8_t)best;
}

#endif
