// Matmul through cuBLAS. Row-major C = A B is computed as the column-major C^T = B^T A^T, so
// each operand is passed as stored: a row-major operand with op N, a column-major (transposed
// view) operand with op T; only operands with no unit stride are copied. TF32 is opt-in.
#include <cublas_v2.h>

#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/cuda_iface.hpp"
#include "cuda/kernels.cuh"

namespace nx::cuda {
namespace {

static bool g_tf32 = false;

const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail(s == CUBLAS_STATUS_ALLOC_FAILED ? NX_ERR_OUT_OF_MEMORY : NX_ERR_CUDA, current_api(), ": cuBLAS error ",
       cublas_name(s), " in ", what);
}

cublasHandle_t handle(int device) {
  // One handle per thread and device: cuBLAS handles must not be shared between threads.
  static thread_local std::unordered_map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasHandle_t h;
  check_cublas(cublasCreate(&h), "cublasCreate");
  handles[device] = h;
  return h;
}

struct Operand {
  const void* ptr;
  cublasOperation_t op;
  int64_t ld, batch_stride;
};

// How cuBLAS reads a row-major [rows, cols] operand stored with (rs, cs); false if neither
// stride is 1 (the caller copies it).
bool describe(const void* ptr, int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t bs, Operand* out) {
  if (cs == 1 || cols == 1) {
    *out = {ptr, CUBLAS_OP_N, rows > 1 ? std::max(rs, cols) : std::max<int64_t>(cols, 1), bs};
    return rows <= 1 || rs >= cols;
  }
  if (rs == 1 || rows == 1) {
    *out = {ptr, CUBLAS_OP_T, cols > 1 ? std::max(cs, rows) : std::max<int64_t>(rows, 1), bs};
    return cols <= 1 || cs >= rows;
  }
  return false;
}

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: fail(NX_ERR_DTYPE, current_api(), ": matmul on CUDA supports f32, f64, f16 and bf16, got ", dtype_name(d));
  }
}

}  // namespace

void set_tf32(bool enabled) {
  if (g_tf32 != enabled) bump_capture_epoch();  // cuBLAS's math mode is part of a captured plan
  g_tf32 = enabled;
}
bool tf32_enabled() { return g_tf32; }

namespace {

// One (strided-batched) product C = A B in cuBLAS's column-major terms, C^T [n, m] = B^T A^T,
// with C's leading dimension ldc.
void gemm(const ExecContext& ctx, const Operand& oa, const Operand& ob, void* c, int64_t ldc, int64_t c_batch_stride,
          int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype) {
  cublasHandle_t h = handle(current_device());
  check_cublas(cublasSetStream(h, stream_of(ctx)), "cublasSetStream");
  const cudaDataType_t t = cuda_type(dtype);
  cublasComputeType_t compute = dtype == DType::F64 ? CUBLAS_COMPUTE_64F
                                : (dtype == DType::F32 && g_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  const double alpha64 = 1.0, beta64 = 0.0;
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const void* alpha = dtype == DType::F64 ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha32);
  const void* beta = dtype == DType::F64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
  // NEXUS_CUDA_INITCHECK=1 (scripts/gpu_run.sh sanitize): compute-sanitizer's initcheck does not
  // see cuBLAS's half-precision GEMM kernels store their result (tests/gpu/initcheck_probe.cu shows
  // it outside NexusGrad), so every later read of C would be reported; zeroing C first marks it
  // written, and what initcheck reports then is ours.
  static const bool initcheck = std::getenv("NEXUS_CUDA_INITCHECK") != nullptr;
  if (initcheck && (dtype == DType::F16 || dtype == DType::BF16) && batch > 0 && m > 0 && n > 0)
    NX_CUDA_CHECK(cudaMemsetAsync(c, 0, size_t((batch - 1) * c_batch_stride + (m - 1) * ldc + n) * dtype_size(dtype),
                                  stream_of(ctx)));
  check_cublas(cublasGemmStridedBatchedEx(h, ob.op, oa.op, int(n), int(m), int(k), alpha, ob.ptr, t, int(ob.ld),
                                          ob.batch_stride, oa.ptr, t, int(oa.ld), oa.batch_stride, beta, c, t, int(ldc),
                                          c_batch_stride, int(batch), compute, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }
bool aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// cuBLAS runs its Hopper tensor-core kernels only when m, n, k and every leading dimension are
// multiples of 16 bytes; otherwise it falls back to old kernels several times slower. GPT-2's
// vocabulary of 50257 hits exactly that: [8192, 768] x [768, 50257] in bf16 takes 6.7 ms as it is
// and 0.9 ms padded to 50264 (H200, docs/benchmarks.md; padding the leading dimension alone does
// not help). So a large single product with such a dimension runs on padded copies: each operand
// keeps its orientation with its dimensions rounded up (zeros in the padded part of the
// contraction, which add nothing), and the result comes back from a padded scratch buffer. The
// copies are pitched 2-D copies, one pass over the operands, a fraction of what the slow kernels lose.
bool padded_matmul(const ExecContext& ctx, const View& dst, const View& a, const View& b) {
  const int64_t batch = dst.shape[0], m = dst.shape[1], n = dst.shape[2], k = a.shape[2];
  const int64_t es = int64_t(dtype_size(a.dtype)), al = 16 / es;
  if (batch != 1 || a.dtype == DType::F64 || double(m) * double(n) * double(k) < double(1 << 30)) return false;
  Operand oa{}, ob{};
  if (!describe(a.data, m, k, a.strides[1], a.strides[2], a.strides[0], &oa) ||
      !describe(b.data, k, n, b.strides[1], b.strides[2], b.strides[0], &ob))
    return false;
  const int64_t mp = round_up(m, al), np = round_up(n, al), kp = round_up(k, al);
  const bool a_bad = mp != m || kp != k || oa.ld % al != 0 || !aligned(oa.ptr);
  const bool b_bad = kp != k || np != n || ob.ld % al != 0 || !aligned(ob.ptr);
  const bool c_bad = mp != m || np != n || !aligned(dst.data);
  if (!a_bad && !b_bad && !c_bad) return false;
  const cudaStream_t stream = stream_of(ctx);
  std::vector<std::unique_ptr<Scratch>> buffers;
  // o as a [rows_p, cols_p] operand of the same orientation (op N: row-major lines of cols).
  auto repack = [&](const Operand& o, int64_t rows, int64_t cols, int64_t rows_p, int64_t cols_p) {
    const bool row_major = o.op == CUBLAS_OP_N;
    const int64_t lines = row_major ? rows : cols, width = row_major ? cols : rows;
    const int64_t lines_p = row_major ? rows_p : cols_p, ld = row_major ? cols_p : rows_p;
    buffers.push_back(std::make_unique<Scratch>(ctx, size_t(lines_p * ld * es)));
    void* buf = buffers.back()->ptr;
    if (kp != k) NX_CUDA_CHECK(cudaMemsetAsync(buf, 0, size_t(lines_p * ld * es), stream));  // the zeros of the contraction
    NX_CUDA_CHECK(cudaMemcpy2DAsync(buf, size_t(ld * es), o.ptr, size_t(o.ld * es), size_t(width * es), size_t(lines),
                                    cudaMemcpyDeviceToDevice, stream));
    return Operand{buf, o.op, ld, lines_p * ld};
  };
  if (a_bad) oa = repack(oa, m, k, mp, kp);
  if (b_bad) ob = repack(ob, k, n, kp, np);
  if (!c_bad) {
    gemm(ctx, oa, ob, dst.data, n, m * n, 1, mp, np, kp, a.dtype);
    return true;
  }
  Scratch c(ctx, size_t(mp * np * es));
  gemm(ctx, oa, ob, c.ptr, np, mp * np, 1, mp, np, kp, a.dtype);
  NX_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, size_t(n * es), c.ptr, size_t(np * es), size_t(n * es), size_t(m),
                                  cudaMemcpyDeviceToDevice, stream));
  return true;
}

}  // namespace

void launch_matmul(const ExecContext& ctx, const View& dst, const View& a, const View& b) {
  const int64_t batch = dst.shape[0], m = dst.shape[1], n = dst.shape[2], k = a.shape[2];
  const size_t es = dtype_size(a.dtype);
  if (k == 0) {
    launch_fill(ctx, dst, 0.0);
    return;
  }
  if (padded_matmul(ctx, dst, a, b)) return;
  // Operands without a unit stride are copied to contiguous scratch first.
  std::unique_ptr<Scratch> a_copy, b_copy;
  auto contiguous_copy = [&](const View& v, std::unique_ptr<Scratch>& holder) {
    holder = std::make_unique<Scratch>(ctx, size_t(v.numel()) * es);
    View c{holder->ptr, v.shape, contiguous_strides(v.shape), v.dtype};
    launch_copy(ctx, c, v);
    return c;
  };
  Operand oa, ob;
  View av = a, bv = b;
  if (!describe(av.data, m, k, av.strides[1], av.strides[2], av.strides[0], &oa)) {
    av = contiguous_copy(a, a_copy);
    describe(av.data, m, k, av.strides[1], av.strides[2], av.strides[0], &oa);
  }
  if (!describe(bv.data, k, n, bv.strides[1], bv.strides[2], bv.strides[0], &ob)) {
    bv = contiguous_copy(b, b_copy);
    describe(bv.data, k, n, bv.strides[1], bv.strides[2], bv.strides[0], &ob);
  }
  gemm(ctx, oa, ob, dst.data, n, m * n, batch, m, n, k, a.dtype);
}

}  // namespace nx::cuda
