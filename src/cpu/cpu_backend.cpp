// The CPU implementation of the kernel interface (src/core/backend.hpp): strided walking and
// dtype dispatch here; the vectorized inner loops come from the per-ISA table (simd.hpp).

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#ifdef __linux__
#include <sys/sysinfo.h>
#endif

#include "core/int_math.hpp"
#include "core/philox.hpp"
#include "cpu/simd.hpp"
#include "core/strided.hpp"

namespace nx::cpu {

void attention_forward_cpu(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                           const View& lse);
void attention_backward_cpu(const AttentionParams& p, const View& q, const View& k, const View& v, const View& out,
                            const View& dout, const View& lse, const View& dq, const View& dk, const View& dv);
// quantize_8bit.cpp
void quantize_rows_8bit_cpu(const View& dst, const View& scale, const View& src, const View& pos);
void attention_decode_8bit_cpu(const AttentionParams& p, const View& q, const View& k, const View& k_scale,
                               const View& v, const View& v_scale, const View& lengths, const View& out);
void attention_forward_fp8_cpu(const AttentionParams& p, const View& q, const View& q_scale, const View& k,
                               const View& k_scale, const View& v, const View& v_scale, const View& out);
// fused.cpp
void norm_forward_cpu(const NormParams& p, const View& y, const View& sum_out, const View& x, const View& residual,
                      const View& w, const View& b, const View& mean, const View& rstd);
void norm_backward_cpu(const NormParams& p, const View& dx, const View& dw, const View& db, const View& dy,
                       const View& x, const View& w, const View& mean, const View& rstd);
void xent_forward_cpu(const View& loss, const View& lse, const View& logits, const View& target, int64_t rows,
                      int64_t cols, int64_t ignore_index);
void xent_backward_cpu(const View& dlogits, const View& logits, const View& target, const View& lse, const View& scale,
                       int64_t rows, int64_t cols, int64_t ignore_index);
void adam_multi_cpu(const std::vector<AdamSlot>& slots, DType dtype, const AdamParams& p);
void sumsq_multi_cpu(const std::vector<TensorSlot>& slots, DType dtype, const View& out);
void scale_multi_cpu(const std::vector<TensorSlot>& slots, DType dtype, const View& factor);
// reduce.cpp
void reduce_rows_cpu(ReduceOp op, const View& dst, const View& src, int64_t rows, int64_t cols);
void reduce_middle_cpu(ReduceOp op, const View& dst, const View& src, int64_t outer, int64_t n, int64_t inner);
void softmax_rows_cpu(const View& dst, const View& src, int64_t rows, int64_t cols, bool log);
void rotary_cpu(const View& dst, const View& x, const View& cosv, const View& sinv, bool inverse);
// fused_elementwise.cpp
void fused_elementwise_cpu(const FusedProgram& program);
void fused_reduce_rows_cpu(const FusedProgram& p, int reg, ReduceOp op, const View& dst, int64_t rows, int64_t cols);

namespace {

using S = std::vector<int64_t>;

template <class T> double to_f64(T v) { return double(v); }
template <> double to_f64(Half v) { return f16_to_f32(v.bits); }
template <> double to_f64(BFloat16 v) { return bf16_to_f32(v.bits); }
template <> double to_f64(Float8E4M3 v) { return f8_to_f32(v.bits, DType::F8E4M3); }
template <> double to_f64(Float8E5M2 v) { return f8_to_f32(v.bits, DType::F8E5M2); }
// Integers: NaN gives 0, values past int64 saturate, the rest wrap modulo 2^bits (a plain
// conversion of an out-of-range double is undefined behaviour).
template <class T> T from_f64(double v) {
  if constexpr (std::is_integral_v<T>) return wrapping_from_double<T>(v);
  else return T(v);
}
template <> bool from_f64(double v) { return v != 0.0; }
template <> Half from_f64(double v) { return Half{f32_to_f16(float(v))}; }
template <> BFloat16 from_f64(double v) { return BFloat16{f32_to_bf16(float(v))}; }
template <> Float8E4M3 from_f64(double v) { return Float8E4M3{f8_from_f64(v, DType::F8E4M3)}; }  // one rounding
template <> Float8E5M2 from_f64(double v) { return Float8E5M2{f8_from_f64(v, DType::F8E5M2)}; }
// f32 -> half without the detour through double (which could double-round).
// Integer to integer directly (modular, exact for every int64), not through a double. Integer to
// floating as PyTorch converts: to f32/f64 in one rounding (i64 -> f32 through a double would
// round twice: 2^60 + 2^36 + 1 gave 2^60, torch 2^60 + 2^37), to f16/bf16 through f32 (c10::Half
// and BFloat16 are made from a float).
template <class D, class Src> D convert(Src v) {
  if constexpr (std::is_integral_v<D> && std::is_integral_v<Src> && !std::is_same_v<D, bool>) return D(v);
  else if constexpr (std::is_integral_v<Src> && (std::is_same_v<D, float> || std::is_same_v<D, double>)) return D(v);
  else if constexpr (std::is_integral_v<Src> && std::is_same_v<D, Half>) return Half{f32_to_f16(float(v))};
  else if constexpr (std::is_integral_v<Src> && std::is_same_v<D, BFloat16>) return BFloat16{f32_to_bf16(float(v))};
  else return from_f64<D>(to_f64(v));
}
template <> Half convert(float v) { return Half{f32_to_f16(v)}; }
template <> BFloat16 convert(float v) { return BFloat16{f32_to_bf16(v)}; }
template <> int64_t convert(int64_t v) { return v; }
template <> float convert(float v) { return v; }
template <> float convert(Half v) { return f16_to_f32(v.bits); }
template <> float convert(BFloat16 v) { return bf16_to_f32(v.bits); }

template <class T> constexpr bool is_half_type = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T> T* at(const View& v, int64_t off) { return static_cast<T*>(v.data) + off; }

// f16/bf16 and mixed-dtype elementwise rows run kTile elements at a time: the operands are
// converted into f32 (f64) buffers on the stack, go through the same SIMD kernel as f32, and the
// result is converted into dst. The tile stays in L1, so no tensor-sized temporary is made.
constexpr int64_t kTile = 256;
// n <= kTile elements of v from element offset off, stride stride, converted to C.
// Contiguous f16/bf16 tiles of f32 go through the table's run conversions (the vector unit).
template <class C>
void load_tile(C* buf, const View& v, int64_t off, int64_t stride, int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    if (is_half(v.dtype) && stride == 1) return widen_run(simd(), v.dtype, buf, at<uint16_t>(v, off), n);
  }
  dispatch_dtype(v.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* p = at<T>(v, off);
    for (int64_t i = 0; i < n; ++i) buf[i] = convert<C>(p[i * stride]);
  });
}
template <class C>
void store_tile(const View& v, int64_t off, const C* buf, int64_t n) {
  if constexpr (std::is_same_v<C, float>) {
    if (is_half(v.dtype)) return narrow_run(simd(), v.dtype, at<uint16_t>(v, off), buf, n);
  }
  dispatch_dtype(v.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = at<T>(v, off);
    for (int64_t i = 0; i < n; ++i) p[i] = convert<T>(buf[i]);
  });
}

// Bytes of memory and swap the machine has (queried once). A block larger can never be filled:
// where the kernel always overcommits, malloc grants it and the process is killed when the block
// is written (the 32 TiB copy of an expanded q with 2^40 heads, capi.test_errors on the GPU host).
size_t host_memory_limit() {
  static const size_t limit = [] {
#ifdef __linux__
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
      const unsigned __int128 total = (unsigned __int128)(si.totalram + si.totalswap) * si.mem_unit;
      return total > SIZE_MAX ? SIZE_MAX : size_t(total);
    }
#endif
    return size_t(SIZE_MAX);
  }();
  return limit;
}

class CpuBackend final : public Backend {
 public:
  void* allocate(const ExecContext&, size_t nbytes) override {
    // 64-byte alignment for vector loads; never a null pointer, even for empty tensors. A size
    // within 63 bytes of SIZE_MAX would wrap to 0 when rounded (found by tests/fuzz/fuzz_capi).
    if (nbytes > SIZE_MAX - 63)
      fail(NX_ERR_OUT_OF_MEMORY, current_api(), ": cannot allocate ", nbytes, " bytes on the CPU");
    if (nbytes > host_memory_limit())
      fail(NX_ERR_OUT_OF_MEMORY, current_api(), ": cannot allocate ", nbytes, " bytes on the CPU: more than the ",
           host_memory_limit(), " bytes of memory and swap this machine has");
    size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) fail(NX_ERR_OUT_OF_MEMORY, current_api(), ": cannot allocate ", nbytes, " bytes on the CPU");
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
  void synchronize(const ExecContext&) override {}
  // f16/bf16 GEMM and flash attention widen to f32 as they load (simd_kernels.inl): no f32 copies
  bool native_half_matmul() const override { return true; }
  bool native_half_attention() const override { return true; }
  void attention_forward(const ExecContext&, const AttentionParams& p, const View& q, const View& k, const View& v,
                         const View& out, const View& lse) override {
    attention_forward_cpu(p, q, k, v, out, lse);
  }
  void attention_backward(const ExecContext&, const AttentionParams& p, const View& q, const View& k, const View& v,
                          const View& out, const View& dout, const View& lse, const View& dq, const View& dk,
                          const View& dv) override {
    attention_backward_cpu(p, q, k, v, out, dout, lse, dq, dk, dv);
  }
  void quantize_rows_8bit(const ExecContext&, const View& dst, const View& scale, const View& src,
                          const View& pos) override {
    quantize_rows_8bit_cpu(dst, scale, src, pos);
  }
  void attention_decode_8bit(const ExecContext&, const AttentionParams& p, const View& q, const View& k,
                             const View& k_scale, const View& v, const View& v_scale, const View& lengths,
                             const View& out) override {
    attention_decode_8bit_cpu(p, q, k, k_scale, v, v_scale, lengths, out);
  }
  void attention_forward_fp8(const ExecContext&, const AttentionParams& p, const View& q, const View& q_scale,
                             const View& k, const View& k_scale, const View& v, const View& v_scale,
                             const View& out) override {
    attention_forward_fp8_cpu(p, q, q_scale, k, k_scale, v, v_scale, out);
  }
  void norm_forward(const ExecContext&, const NormParams& p, const View& y, const View& s, const View& x, const View& r,
                    const View& w, const View& b, const View& mean, const View& rstd) override {
    norm_forward_cpu(p, y, s, x, r, w, b, mean, rstd);
  }
  void norm_backward(const ExecContext&, const NormParams& p, const View& dx, const View& dw, const View& db,
                     const View& dy, const View& x, const View& w, const View& mean, const View& rstd) override {
    norm_backward_cpu(p, dx, dw, db, dy, x, w, mean, rstd);
  }
  void xent_forward(const ExecContext&, const View& loss, const View& lse, const View& logits, const View& target,
                    int64_t rows, int64_t cols, int64_t ignore_index) override {
    xent_forward_cpu(loss, lse, logits, target, rows, cols, ignore_index);
  }
  void xent_backward(const ExecContext&, const View& dl, const View& logits, const View& target, const View& lse,
                     const View& scale, int64_t rows, int64_t cols, int64_t ignore_index) override {
    xent_backward_cpu(dl, logits, target, lse, scale, rows, cols, ignore_index);
  }
  void adam_multi(const ExecContext&, const std::vector<AdamSlot>& slots, DType dtype, const AdamParams& p) override {
    adam_multi_cpu(slots, dtype, p);
  }
  void sumsq_multi(const ExecContext&, const std::vector<TensorSlot>& slots, DType dtype, const View& out) override {
    sumsq_multi_cpu(slots, dtype, out);
  }
  void scale_multi(const ExecContext&, const std::vector<TensorSlot>& slots, DType dtype, const View& factor) override {
    scale_multi_cpu(slots, dtype, factor);
  }
  void fused_elementwise(const ExecContext&, const FusedProgram& program) override { fused_elementwise_cpu(program); }
  void fused_reduce_rows(const ExecContext&, const FusedProgram& program, int reg, ReduceOp op, const View& dst,
                         int64_t rows, int64_t cols) override {
    fused_reduce_rows_cpu(program, reg, op, dst, rows, cols);
  }
  void upload(const ExecContext&, void* dst, const void* src, size_t n) override { if (n) std::memcpy(dst, src, n); }
  void copy_bytes(const ExecContext&, void* dst, const void* src, size_t n) override { if (n) std::memcpy(dst, src, n); }
  void download(const ExecContext&, void* dst, const void* src, size_t n) override { if (n) std::memcpy(dst, src, n); }

  void copy(const ExecContext&, const View& dst, const View& src) override {
    if (dst.dtype == src.dtype) {
      size_t es = dtype_size(dst.dtype);
      for_each_row<2>(dst.shape, {&dst.strides, &src.strides}, [&](auto off, int64_t n, auto st) {
        char* d = static_cast<char*>(dst.data) + off[0] * int64_t(es);
        const char* s = static_cast<const char*>(src.data) + off[1] * int64_t(es);
        if (st[0] == 1 && st[1] == 1) {
          std::memcpy(d, s, size_t(n) * es);
        } else {
          for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * st[0] * int64_t(es), s + i * st[1] * int64_t(es), es);
        }
      });
      return;
    }
    dispatch_storage_dtype(dst.dtype, [&](auto dtag) {
      using D = decltype(dtag);
      dispatch_storage_dtype(src.dtype, [&](auto stag) {
        using Src = decltype(stag);
        for_each_row<2>(dst.shape, {&dst.strides, &src.strides}, [&](auto off, int64_t n, auto st) {
          D* d = at<D>(dst, off[0]);
          const Src* s = at<Src>(src, off[1]);
          if (st[0] == 1 && st[1] == 1) {  // contiguous f32 <-> f16/bf16 rows: the table's run conversions
            if constexpr (std::is_same_v<D, float> && is_half_type<Src>) return widen_run(simd(), src.dtype, d, s, n);
            if constexpr (std::is_same_v<Src, float> && is_half_type<D>) return narrow_run(simd(), dst.dtype, d, s, n);
          }
          for (int64_t i = 0; i < n; ++i) d[i * st[0]] = convert<D>(s[i * st[1]]);
        });
      });
    });
  }

  void fill(const ExecContext&, const View& dst, double value) override {
    dispatch_storage_dtype(dst.dtype, [&](auto tag) {
      using T = decltype(tag);
      T v = from_f64<T>(value);
      for_each_row<1>(dst.shape, {&dst.strides}, [&](auto off, int64_t n, auto st) {
        T* d = at<T>(dst, off[0]);
        for (int64_t i = 0; i < n; ++i) d[i * st[0]] = v;
      });
    });
  }

  void unary(const ExecContext&, UnaryOp op, const View& dst, const View& src, double p0, double p1) override {
    const auto& t = simd();
    switch (dst.dtype) {
      case DType::F32:
        for_each_row<2>(dst.shape, {&dst.strides, &src.strides}, [&](auto off, int64_t n, auto st) {
          t.unary_f32(op, at<float>(dst, off[0]), at<float>(src, off[1]), st[1], n, float(p0), float(p1));
        });
        return;
      case DType::F64:
        for_each_row<2>(dst.shape, {&dst.strides, &src.strides}, [&](auto off, int64_t n, auto st) {
          t.unary_f64(op, at<double>(dst, off[0]), at<double>(src, off[1]), st[1], n, p0, p1);
        });
        return;
      case DType::F16: case DType::BF16:
        for_each_row<2>(dst.shape, {&dst.strides, &src.strides}, [&](auto off, int64_t n, auto st) {
          float x[kTile], y[kTile];
          for (int64_t i = 0; i < n; i += kTile) {
            const int64_t m = std::min(kTile, n - i);
            load_tile(x, src, off[1] + i * st[1], st[1], m);
            t.unary_f32(op, y, x, 1, m, float(p0), float(p1));
            store_tile(dst, off[0] + i, y, m);
          }
        });
        return;
      case DType::I32: unary_int<int32_t>(op, dst, src, p0, p1); return;
      case DType::I64: unary_int<int64_t>(op, dst, src, p0, p1); return;
      default:
        fail(NX_ERR_DTYPE, current_api(), ": dtype ", dtype_name(dst.dtype), " is not supported here");
    }
  }

  // A floating binary op through f32 (or f64) tiles: f16/bf16 operands, or two dtypes.
  template <class C, class Kernel>
  static void binary_tiled(Kernel kernel, BinaryOp op, const View& dst, const View& a, const View& b) {
    for_each_row<3>(dst.shape, {&dst.strides, &a.strides, &b.strides}, [&](auto off, int64_t n, auto st) {
      C x[kTile], y[kTile], r[kTile];
      for (int64_t i = 0; i < n; i += kTile) {
        const int64_t m = std::min(kTile, n - i);
        load_tile(x, a, off[1] + i * st[1], st[1], m);
        load_tile(y, b, off[2] + i * st[2], st[2], m);
        kernel(op, r, x, 1, y, 1, m);
        store_tile(dst, off[0] + i, r, m);
      }
    });
  }

  template <class T>
  void unary_int(UnaryOp op, const View& dst, const View& src, double p0, double p1) {
    // Wrapping arithmetic (integer tensors wrap like PyTorch's, without signed overflow); the
    // scalars converted once, without undefined out-of-range conversions.
    const T s0 = wrapping_from_double<T>(p0);
    const T lo = saturating_from_double<T>(p0), hi = saturating_from_double<T>(p1);
    auto f = [&](T v) -> T {
      switch (op) {
        case UnaryOp::Neg: return wrapping_neg(v);
        case UnaryOp::Abs: return wrapping_abs(v);
        case UnaryOp::Relu: return v > 0 ? v : T(0);
        case UnaryOp::Clamp: return std::min<T>(std::max<T>(v, lo), hi);
        case UnaryOp::AddScalar: return wrapping_add(v, s0);
        case UnaryOp::MulScalar: return wrapping_mul(v, s0);
        case UnaryOp::Square: return wrapping_mul(v, v);
        case UnaryOp::Sign: return T(v > 0 ? 1 : (v < 0 ? -1 : 0));
        case UnaryOp::PowScalar: return wrapping_pow(v, s0);  // exact, wraps as torch's (3^40)
        default: return T(0);
      }
    };
    if (!has_integer_kernel(op))
      fail(NX_ERR_DTYPE, current_api(), ": ", op_name(op), " has no integer kernel (", dtype_name(dst.dtype), ")");
    for_each_row<2>(dst.shape, {&dst.strides, &src.strides}, [&](auto off, int64_t n, auto st) {
      T* d = at<T>(dst, off[0]);
      const T* s = at<T>(src, off[1]);
      for (int64_t i = 0; i < n; ++i) d[i] = f(s[i * st[1]]);
    });
  }

  void binary(const ExecContext&, BinaryOp op, const View& dst, const View& a, const View& b) override {
    if (is_comparison(op)) {
      dispatch_dtype(a.dtype, [&](auto tag) { compare<decltype(tag)>(op, dst, a, b); });
      return;
    }
    const auto& t = simd();
    auto rows = [&](auto kernel, auto type_tag) {
      using T = decltype(type_tag);
      for_each_row<3>(dst.shape, {&dst.strides, &a.strides, &b.strides}, [&](auto off, int64_t n, auto st) {
        kernel(op, at<T>(dst, off[0]), at<T>(a, off[1]), st[1], at<T>(b, off[2]), st[2], n);
      });
    };
    const bool mixed = a.dtype != dst.dtype || b.dtype != dst.dtype;  // two floating dtypes
    switch (dst.dtype) {
      case DType::F32:
        if (mixed) binary_tiled<float>(t.binary_f32, op, dst, a, b);
        else rows(t.binary_f32, float{});
        return;
      case DType::F64:
        if (mixed) binary_tiled<double>(t.binary_f64, op, dst, a, b);
        else rows(t.binary_f64, double{});
        return;
      case DType::F16: case DType::BF16: binary_tiled<float>(t.binary_f32, op, dst, a, b); return;
      case DType::I32: rows(&binary_int<int32_t>, int32_t{}); return;
      case DType::I64: rows(&binary_int<int64_t>, int64_t{}); return;
      case DType::Bool: rows(&binary_int<bool>, bool{}); return;
      default:
        fail(NX_ERR_DTYPE, current_api(), ": dtype ", dtype_name(dst.dtype), " is not supported here");
    }
  }

  template <class T>
  static void binary_int(BinaryOp op, T* o, const T* a, int64_t sa, const T* b, int64_t sb, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      T x = a[i * sa], y = b[i * sb];
      switch (op) {
        case BinaryOp::Add: o[i] = wrapping_add(x, y); break;
        case BinaryOp::Sub: o[i] = wrapping_sub(x, y); break;
        case BinaryOp::Mul: o[i] = wrapping_mul(x, y); break;
        case BinaryOp::Div: o[i] = y == 0 ? T(0) : wrapping_div(x, y); break;
        case BinaryOp::Pow: o[i] = wrapping_pow(x, y); break;
        case BinaryOp::Maximum: o[i] = std::max(x, y); break;
        case BinaryOp::Minimum: o[i] = std::min(x, y); break;
        default: break;
      }
    }
  }

  template <class T>
  void compare(BinaryOp op, const View& dst, const View& a, const View& b) {
    for_each_row<3>(dst.shape, {&dst.strides, &a.strides, &b.strides}, [&](auto off, int64_t n, auto st) {
      bool* o = at<bool>(dst, off[0]);
      const T* x = at<T>(a, off[1]);
      const T* y = at<T>(b, off[2]);
      for (int64_t i = 0; i < n; ++i) {
        // integers compared as themselves (through a double, 2^53 == 2^53 + 1), the rest in f64
        using C = std::conditional_t<std::is_integral_v<T>, T, double>;
        C u, v;
        if constexpr (std::is_integral_v<T>) u = x[i * st[1]], v = y[i * st[2]];
        else u = to_f64(x[i * st[1]]), v = to_f64(y[i * st[2]]);
        bool r = false;
        switch (op) {
          case BinaryOp::Eq: r = u == v; break;
          case BinaryOp::Ne: r = u != v; break;
          case BinaryOp::Lt: r = u < v; break;
          case BinaryOp::Le: r = u <= v; break;
          case BinaryOp::Gt: r = u > v; break;
          case BinaryOp::Ge: r = u >= v; break;
          default: break;
        }
        o[i] = r;
      }
    });
  }

  void where(const ExecContext&, const View& dst, const View& cond, const View& a, const View& b) override {
    size_t es = dtype_size(dst.dtype);
    for_each_row<4>(dst.shape, {&dst.strides, &cond.strides, &a.strides, &b.strides}, [&](auto off, int64_t n, auto st) {
      char* d = static_cast<char*>(dst.data) + off[0] * int64_t(es);
      const bool* c = at<bool>(cond, off[1]);
      const char* x = static_cast<const char*>(a.data) + off[2] * int64_t(es);
      const char* y = static_cast<const char*>(b.data) + off[3] * int64_t(es);
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(d + i * int64_t(es), c[i * st[1]] ? x + i * st[2] * int64_t(es) : y + i * st[3] * int64_t(es), es);
    });
  }

  void reduce_rows(const ExecContext&, ReduceOp op, const View& dst, const View& src, int64_t rows,
                   int64_t cols) override {
    reduce_rows_cpu(op, dst, src, rows, cols);
  }

  void reduce_middle(const ExecContext&, ReduceOp op, const View& dst, const View& src, int64_t outer, int64_t n,
                     int64_t inner) override {
    reduce_middle_cpu(op, dst, src, outer, n, inner);
  }

  void matmul(const ExecContext&, const View& dst, const View& a, const View& b) override {
    const int64_t batch = dst.shape[0], m = dst.shape[1], n = dst.shape[2], k = a.shape[2];
    auto run = [&](auto gemm, auto tag) {
      using T = decltype(tag);
      auto one = [&](int64_t i) {
        gemm(at<T>(dst, i * m * n), n, at<T>(a, i * a.strides[0]), a.strides[1], a.strides[2],
             at<T>(b, i * b.strides[0]), b.strides[1], b.strides[2], m, n, k);
      };
      // Many small products: one per thread; otherwise each product uses every thread.
      if (batch > 1 && m * n * k <= 64 * 64 * 64) {
#pragma omp parallel for schedule(static) if (batch * m * n * k >= kParallelGrain)
        for (int64_t i = 0; i < batch; ++i) one(i);
      } else {
        for (int64_t i = 0; i < batch; ++i) one(i);
      }
    };
    switch (dst.dtype) {
      case DType::F32: run(simd().gemm_f32, float{}); return;
      case DType::F64: run(simd().gemm_f64, double{}); return;
      case DType::F16: run(simd().gemm_f16, Half{}); return;
      case DType::BF16: run(simd().gemm_bf16, BFloat16{}); return;
      default: fail(NX_ERR_DTYPE, current_api(), ": matmul takes a floating dtype, got ", dtype_name(dst.dtype));
    }
  }

  void softmax_rows(const ExecContext&, const View& dst, const View& src, int64_t rows, int64_t cols,
                    bool log) override {
    softmax_rows_cpu(dst, src, rows, cols, log);
  }
  void rotary(const ExecContext&, const View& dst, const View& x, const View& cosv, const View& sinv,
              bool inverse) override {
    rotary_cpu(dst, x, cosv, sinv, inverse);
  }

  static int64_t index_at(const View& index, int64_t i) {
    return index.dtype == DType::I64 ? static_cast<const int64_t*>(index.data)[i]
                                     : int64_t(static_cast<const int32_t*>(index.data)[i]);
  }

  void index_select(const ExecContext&, const View& dst, const View& src, const View& index, int64_t outer, int64_t n,
                    int64_t inner) override {
    const int64_t nidx = index.numel();
    const size_t es = dtype_size(src.dtype), row = size_t(inner) * es;
#pragma omp parallel for collapse(2) schedule(static) if (outer * nidx * inner >= kParallelGrain)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < nidx; ++j)
        std::memcpy(static_cast<char*>(dst.data) + size_t(o * nidx + j) * row,
                    static_cast<const char*>(src.data) + size_t(o * n + index_at(index, j)) * row, row);
  }

  // index_add's and scatter_add's a + b outside f16/bf16: integers exact and wrapping modulo
  // 2^bits as torch's (through a double, int64 lost its low bits past 2^53 and saturated), bool
  // a logical or, floating through f64 (for f32 the correctly rounded sum: 53 >= 2 * 24 + 2 bits).
  template <class T> static T add_elem(T a, T b) {
    if constexpr (kWrapsModulo<T>) return wrapping_add(a, b);
    else return convert<T>(to_f64(a) + to_f64(b));
  }

  // f16/bf16 sums accumulate in f32 and round once (a bf16 running sum of ones stops at 256:
  // 256 + 1 rounds back to 256); other dtypes add in their own type, as before. The positions j
  // are grouped by their destination row (a stable sort of the index), so each destination row is
  // summed by one thread in the order of j: deterministic, and parallel even with one outer slice
  // (embedding's backward) where rows repeat.
  void index_add(const ExecContext&, const View& dst, const View& src, const View& index, int64_t outer, int64_t n,
                 int64_t inner) override {
    const int64_t nidx = index.numel();
    std::vector<int64_t> order(static_cast<size_t>(nidx));
    std::vector<int64_t> groups;  // groups[g]..groups[g + 1]: one destination row's positions in order
    for (int64_t j = 0; j < nidx; ++j) order[size_t(j)] = j;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return index_at(index, x) < index_at(index, y); });
    for (int64_t k = 0; k < nidx; ++k)
      if (k == 0 || index_at(index, order[size_t(k)]) != index_at(index, order[size_t(k - 1)])) groups.push_back(k);
    groups.push_back(nidx);
    const int64_t ngroups = int64_t(groups.size()) - 1;
    dispatch_dtype(dst.dtype, [&](auto tag) {
      using T = decltype(tag);
      constexpr bool half = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
      const T* src_base = static_cast<const T*>(src.data);  // a local: clang's OpenMP lambdas cannot see parameters
#pragma omp parallel if (outer * nidx * inner >= kParallelGrain)
      {
        std::vector<float> acc(half ? size_t(inner) : 0);  // one destination row in f32
#pragma omp for collapse(2) schedule(dynamic, 4)
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t g = 0; g < ngroups; ++g) {
            const int64_t first = groups[size_t(g)], last = groups[size_t(g + 1)];
            T* d = static_cast<T*>(dst.data) + (o * n + index_at(index, order[size_t(first)])) * inner;
            auto src_row = [&](int64_t k) {
              return src_base + (o * nidx + order[size_t(k)]) * inner;
            };
            if constexpr (half) {
              for (int64_t i = 0; i < inner; ++i) acc[size_t(i)] = convert<float>(d[i]);
              for (int64_t k = first; k < last; ++k) {
                const T* s = src_row(k);
                for (int64_t i = 0; i < inner; ++i) acc[size_t(i)] += convert<float>(s[i]);
              }
              for (int64_t i = 0; i < inner; ++i) d[i] = convert<T>(acc[size_t(i)]);
            } else {
              for (int64_t k = first; k < last; ++k) {
                const T* s = src_row(k);
                for (int64_t i = 0; i < inner; ++i) d[i] = add_elem(d[i], s[i]);
              }
            }
          }
      }
    });
  }

  // Walks the elements of the (contiguous) index tensor with their coordinates.
  template <class F>
  static void walk_index(const View& index, F f) {
    const int64_t total = index.numel(), nd = int64_t(index.shape.size());
    std::vector<int64_t> coord(size_t(nd), 0);
    for (int64_t e = 0; e < total; ++e) {
      f(e, coord);
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (++coord[size_t(d)] < index.shape[size_t(d)]) break;
        coord[size_t(d)] = 0;
      }
    }
  }

  void gather(const ExecContext&, const View& dst, const View& src, const View& index, int64_t axis) override {
    const size_t es = dtype_size(src.dtype);
    S sst = contiguous_strides(src.shape);
    walk_index(index, [&](int64_t e, const S& coord) {
      int64_t off = 0;
      for (size_t d = 0; d < coord.size(); ++d)
        off += (int64_t(d) == axis ? index_at(index, e) : coord[d]) * sst[d];
      std::memcpy(static_cast<char*>(dst.data) + size_t(e) * es, static_cast<const char*>(src.data) + size_t(off) * es, es);
    });
  }

  // f16/bf16 sums accumulate in an f32 copy of dst, rounded back once (as index_add's).
  void scatter_add(const ExecContext&, const View& dst, const View& src, const View& index, int64_t axis) override {
    S dst_st = contiguous_strides(dst.shape);
    dispatch_dtype(dst.dtype, [&](auto tag) {
      using T = decltype(tag);
      constexpr bool half = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
      T* out = static_cast<T*>(dst.data);
      const T* s = static_cast<const T*>(src.data);
      const int64_t count = dst.numel();
      std::vector<float> wide(half ? size_t(count) : 0);
      if constexpr (half)
        for (int64_t i = 0; i < count; ++i) wide[size_t(i)] = convert<float>(out[i]);
      walk_index(index, [&](int64_t e, const S& coord) {
        int64_t off = 0;
        for (size_t d = 0; d < coord.size(); ++d)
          off += (int64_t(d) == axis ? index_at(index, e) : coord[d]) * dst_st[d];
        if constexpr (half) wide[size_t(off)] += convert<float>(s[e]);
        else out[off] = add_elem(out[off], s[e]);
      });
      if constexpr (half)
        for (int64_t i = 0; i < count; ++i) out[i] = convert<T>(wide[size_t(i)]);
    });
  }

  void random(const ExecContext&, const View& dst, uint64_t seed, uint64_t offset, const uint64_t* at,
              bool normal) override {
    const int64_t n = dst.numel();
    if (at) seed = at[0], offset = at[1];  // a compiled plan's draw: where this replay's numbers start
    dispatch_dtype(dst.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* d = static_cast<T*>(dst.data);
#pragma omp parallel for schedule(static) if (n >= 4096)
      for (int64_t i = 0; i < n; ++i) {
        double v = normal ? philox_normal(offset + uint64_t(i), seed) : philox_uniform(offset + uint64_t(i), seed);
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          float f = float(v);
          if (!normal && f >= 1.0f) f = 0.99999994f;  // rounding to f32 must not reach 1
          d[i] = convert<T>(f);
          // nor rounding to f16/bf16: keep the largest value below 1 (1 - 2^-11, 1 - 2^-8)
          if constexpr (std::is_same_v<T, Half>) { if (!normal && d[i].bits == 0x3c00) d[i].bits = 0x3bff; }
          if constexpr (std::is_same_v<T, BFloat16>) { if (!normal && d[i].bits == 0x3f80) d[i].bits = 0x3f7f; }
        } else {
          d[i] = from_f64<T>(v);
        }
      }
    });
  }
};

// The one CPU device, registered with core at static initialization (kept by the linker because
// nexus_core is linked whole, CMakeLists.txt).
Backend& the_cpu_backend(int) {
  static CpuBackend instance;
  return instance;
}
const BackendRegistrar registrar(NX_CPU, {"CPU", [] { return 1; }, the_cpu_backend});

}  // namespace

}  // namespace nx::cpu
