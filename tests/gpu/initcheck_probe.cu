// A probe for compute-sanitizer's initcheck, outside NexusGrad: does initcheck see the stores of
// cuBLAS's GEMM kernels? NexusGrad's GPU suite under initcheck reports reads of cuBLAS GEMM
// outputs (docs/reliability.md); this program does only that: one cuBLAS GEMM (the call src/cuda/blas.cu makes) into a fresh
// buffer (no memset), then a kernel of its own reads every element of the output.
//   usage: [PROBE_STREAM=1] initcheck_probe f16|bf16|f32|tf32|uninit [m k n [t]]
// m k n: the product's shape ([m, k] @ [k, n], default the suite's 64 x 256 x 48); t: A is stored
// transposed ([k, m], cuBLAS op T), as a transposed view reaches src/cuda/blas.cu. With a shape,
// the same program serves racecheck: whatever it reports is inside cuBLAS.
// uninit is the control: the kernel reads a fresh buffer that nothing wrote, which initcheck must
// report. Run as: compute-sanitizer --tool initcheck initcheck_probe MODE (scripts/gpu_run.sh probe).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK_CUDA(x)                                                          \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                     \
      return 1;                                                                \
    }                                                                          \
  } while (0)
#define CHECK_CUBLAS(x)                                  \
  do {                                                   \
    cublasStatus_t s_ = (x);                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                   \
      std::printf("%s: cuBLAS status %d\n", #x, int(s_)); \
      return 1;                                          \
    }                                                    \
  } while (0)

// Sums each element's bytes, so every byte of the output is read.
__global__ void read_all(const unsigned char* p, size_t n, unsigned long long* sum) {
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) s += p[i];
  atomicAdd(sum, s);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "f16";
  const bool shaped = argc > 4;
  const int m = shaped ? std::atoi(argv[2]) : 64, k = shaped ? std::atoi(argv[3]) : 256,
            n = shaped ? std::atoi(argv[4]) : 48;  // default: the suite's ReducedPrecisionMatmul test
  const bool a_transposed = argc > 5 && !std::strcmp(argv[5], "t");
  cudaDataType_t type = CUDA_R_16F;
  size_t elem = 2;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (!std::strcmp(mode, "bf16")) type = CUDA_R_16BF;
  if (!std::strcmp(mode, "f32") || !std::strcmp(mode, "tf32") || !std::strcmp(mode, "uninit")) type = CUDA_R_32F, elem = 4;
  if (!std::strcmp(mode, "tf32")) compute = CUBLAS_COMPUTE_32F_FAST_TF32;

  void *a, *b, *c;
  unsigned long long* sum;
  CHECK_CUDA(cudaMalloc(&a, size_t(m) * k * elem));
  CHECK_CUDA(cudaMalloc(&b, size_t(k) * n * elem));
  CHECK_CUDA(cudaMalloc(&c, size_t(m) * n * elem));
  CHECK_CUDA(cudaMalloc(&sum, sizeof *sum));
  CHECK_CUDA(cudaMemset(a, 0, size_t(m) * k * elem));  // inputs written: only c is in question
  CHECK_CUDA(cudaMemset(b, 0, size_t(k) * n * elem));
  CHECK_CUDA(cudaMemset(sum, 0, sizeof *sum));
  if (std::strcmp(mode, "uninit") != 0) {
    cublasHandle_t h;
    CHECK_CUBLAS(cublasCreate(&h));
    // PROBE_STREAM=1: on a created stream, as src/cuda/blas.cu calls cuBLAS (its heuristic may
    // pick other kernels than on the legacy default stream)
    cudaStream_t stream = nullptr;
    if (std::getenv("PROBE_STREAM")) {
      CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      CHECK_CUBLAS(cublasSetStream(h, stream));
    }
    const float one = 1, zero = 0;
    // Row-major [m, n] = [m, k] @ [k, n] as column-major C^T = B^T A^T, as src/cuda/blas.cu computes it.
    // A stored [k, m] is A^T row-major: cuBLAS reads it as column-major [m, k] with op T, ld m.
    CHECK_CUBLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &one, b,
                                            type, n, 0, a, type, a_transposed ? m : k, 0, &zero, c, type, n, 0, 1,
                                            compute, CUBLAS_GEMM_DEFAULT));
    CHECK_CUDA(cudaDeviceSynchronize());
    cublasDestroy(h);
    if (stream) CHECK_CUDA(cudaStreamDestroy(stream));
  }
  read_all<<<32, 256>>>(static_cast<const unsigned char*>(c), size_t(m) * n * elem, sum);
  unsigned long long host = 0;
  CHECK_CUDA(cudaMemcpy(&host, sum, sizeof host, cudaMemcpyDeviceToHost));
  std::printf("initcheck_probe %s: read %zu bytes of the output (byte sum %llu)\n", mode, size_t(m) * n * elem, host);
  return 0;
}
