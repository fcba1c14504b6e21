// Integer arithmetic without undefined behaviour, in one place (issue 17, item 8):
//  - checked_add / checked_mul: sums and products of sizes a caller gave (shapes, counts,
//    strides, offsets) fail with a message instead of overflowing int64;
//  - wrapping_add / _sub / _mul / _neg / _pow: integer tensor arithmetic wraps modulo 2^bits like
//    PyTorch's, computed in the unsigned type (signed overflow is undefined in C++, and the
//    sanitizer build aborts on it) and converted back (modular since C++20). Host and device.
#pragma once
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__CUDACC__)
#define NX_INT_MATH_HD __host__ __device__
#else
#define NX_INT_MATH_HD
#endif

#if !defined(__CUDA_ARCH__)
#include "core/error.hpp"
#endif

namespace nx {

// The integer types whose tensor arithmetic wraps (bool excluded: it has its own rules).
template <class T>
constexpr bool kWrapsModulo = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <class T>
NX_INT_MATH_HD constexpr T wrapping_add(T a, T b) {
  if constexpr (kWrapsModulo<T>) {
    using U = std::make_unsigned_t<T>;
    return T(U(U(a) + U(b)));
  } else {
    return T(a + b);
  }
}
template <class T>
NX_INT_MATH_HD constexpr T wrapping_sub(T a, T b) {
  if constexpr (kWrapsModulo<T>) {
    using U = std::make_unsigned_t<T>;
    return T(U(U(a) - U(b)));
  } else {
    return T(a - b);
  }
}
template <class T>
NX_INT_MATH_HD constexpr T wrapping_mul(T a, T b) {
  if constexpr (kWrapsModulo<T>) {
    using U = std::make_unsigned_t<T>;
    // Types narrower than int promote to int, where the product could still overflow: widen to
    // an unsigned type at least as wide as unsigned int first.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return T(U(W(U(a)) * W(U(b))));
  } else {
    return T(a * b);
  }
}
template <class T>
NX_INT_MATH_HD constexpr T wrapping_neg(T a) {
  if constexpr (kWrapsModulo<T>) {
    using U = std::make_unsigned_t<T>;
    return T(U(U(0) - U(a)));
  } else {
    return T(-a);
  }
}
// |a| with |MIN| == MIN, as PyTorch's abs of an integer tensor gives.
template <class T>
NX_INT_MATH_HD constexpr T wrapping_abs(T a) {
  return a < T(0) ? wrapping_neg(a) : a;
}
// a / b truncated toward zero with MIN / -1 == MIN (the one quotient that overflows); b != 0.
template <class T>
NX_INT_MATH_HD constexpr T wrapping_div(T a, T b) {
  if constexpr (kWrapsModulo<T> && std::is_signed_v<T>) {
    if (b == T(-1)) return wrapping_neg(a);
  }
  return T(a / b);
}

// base^exp by squaring, exact and wrapping modulo 2^bits like PyTorch's integer pow (3^40 in int64
// is -6289078614652622815; a double pow saturates, and its last-ulp error can truncate 3^1 to 2).
// A negative exp gives what torch's integer pow gives: 1 for base 1, +-1 for base -1, else 0.
template <class T>
NX_INT_MATH_HD constexpr T wrapping_pow(T base, T exp) {
  if constexpr (std::is_same_v<T, bool>) {
    return base || !exp;  // x^0 == 1, 0^1 == 0
  } else {
    if (exp < T(0)) return base == T(1) ? T(1) : base == T(-1) ? ((exp & T(1)) ? T(-1) : T(1)) : T(0);
    T r = T(1);
    for (; exp; exp >>= 1, base = wrapping_mul(base, base))
      if (exp & T(1)) r = wrapping_mul(r, base);
    return r;
  }
}

// A double scalar as an integer operand of type T: NaN gives 0, values beyond int64 saturate,
// and the int64 value is then reduced modulo 2^bits of T (what PyTorch does with a Python int
// that does not fit the tensor's dtype). Converting an out-of-range double directly is undefined.
template <class T>
NX_INT_MATH_HD constexpr T wrapping_from_double(double v) {
  if (!(v == v)) return T(0);
  int64_t i;
  if (v >= 9223372036854775807.0) i = INT64_MAX;  // 2^63 is the first double past int64
  else if (v <= -9223372036854775808.0) i = INT64_MIN;
  else i = int64_t(v);
  if constexpr (std::is_same_v<T, bool>) return i != 0;
  else return T(std::make_unsigned_t<T>(uint64_t(i)));
}
// A double bound (of a clamp) as T, saturated to T's range (host only: the kernels get it converted).
template <class T>
constexpr T saturating_from_double(double v) {
  if (!(v == v)) return T(0);
  if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  if (v <= double(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  return T(v);
}

#if !defined(__CUDA_ARCH__)
// a + b and a * b of sizes the caller gave; fails with `status` (NX_ERR_SHAPE unless given)
// naming the running C function, `what` and the values, instead of overflowing.
inline int64_t checked_add(int64_t a, int64_t b, const char* what, nx_status status = NX_ERR_SHAPE) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    fail(status, current_api(), ": ", what, " overflows int64 (", a, " + ", b, ")");
  return r;
}
inline int64_t checked_mul(int64_t a, int64_t b, const char* what, nx_status status = NX_ERR_SHAPE) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(status, current_api(), ": ", what, " overflows int64 (", a, " * ", b, ")");
  return r;
}
#endif

}  // namespace nx
