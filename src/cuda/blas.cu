// Matmul through cuBLAS. Row-major C = A B is computed as the column-major C^T = B^T A^T, so
// each operand is passed as stored: a row-major operand with op N, a column-major (transposed
// view) operand with op T; only operands with no unit stride are copied. TF32 is opt-in.
#include <cublas_v2.h>

#include <unordered_map>

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

void set_tf32(bool enabled) { g_tf32 = enabled; }
bool tf32_enabled() { return g_tf32; }

void launch_matmul(const ExecContext& ctx, const View& dst, const View& a, const View& b) {
  const int64_t batch = dst.shape[0], m = dst.shape[1], n = dst.shape[2], k = a.shape[2];
  const int device = current_device();
  const size_t es = dtype_size(a.dtype);
  if (k == 0) {
    launch_fill(ctx, dst, 0.0);
    return;
  }
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
  cublasHandle_t h = handle(device);
  check_cublas(cublasSetStream(h, stream_of(ctx)), "cublasSetStream");
  const cudaDataType_t t = cuda_type(a.dtype);
  cublasComputeType_t compute = a.dtype == DType::F64 ? CUBLAS_COMPUTE_64F
                                : (a.dtype == DType::F32 && g_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  const double alpha64 = 1.0, beta64 = 0.0;
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const void* alpha = a.dtype == DType::F64 ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha32);
  const void* beta = a.dtype == DType::F64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
  // Column-major: C^T [n, m] = B^T [n, k] * A^T [k, m]
  check_cublas(cublasGemmStridedBatchedEx(h, ob.op, oa.op, int(n), int(m), int(k), alpha, ob.ptr, t, int(ob.ld),
                                          ob.batch_stride, oa.ptr, t, int(oa.ld), oa.batch_stride, beta, dst.data, t,
                                          int(n), m * n, int(batch), compute, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

}  // namespace nx::cuda
