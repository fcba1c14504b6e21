// Where does a bf16 -> f32 cast lose bandwidth on a GPU? Variants of the cast kernel beside cudaMemcpy, a copy
// kernel, a write-only fill and a read-1-write-2 control, 2^28 elements, best of 22 (issue 15, session 10).
// Not part of the CMake build: `scripts/gpu_run.sh castprobe` compiles and runs it.
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdint>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
struct alignas(16) B8 { __nv_bfloat16 v[8]; };
struct alignas(16) F4 { float v[4]; };
__global__ void v1(float* d, const __nv_bfloat16* s, int64_t n8) {  // current: grid-stride, 8 per step
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
    B8 in = reinterpret_cast<const B8*>(s)[i];
    F4 a, b;
    for (int k = 0; k < 4; ++k) a.v[k] = __bfloat162float(in.v[k]), b.v[k] = __bfloat162float(in.v[4 + k]);
    reinterpret_cast<F4*>(d)[2 * i] = a; reinterpret_cast<F4*>(d)[2 * i + 1] = b;
  }
}
__global__ void v2(float* d, const __nv_bfloat16* s, int64_t n8) {  // streaming stores and loads
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
    uint4 u = __ldcs(reinterpret_cast<const uint4*>(s) + i);
    B8 in; memcpy(&in, &u, 16);
    float4 a, b;
    a.x = __bfloat162float(in.v[0]); a.y = __bfloat162float(in.v[1]); a.z = __bfloat162float(in.v[2]); a.w = __bfloat162float(in.v[3]);
    b.x = __bfloat162float(in.v[4]); b.y = __bfloat162float(in.v[5]); b.z = __bfloat162float(in.v[6]); b.w = __bfloat162float(in.v[7]);
    __stcs(reinterpret_cast<float4*>(d) + 2 * i, a); __stcs(reinterpret_cast<float4*>(d) + 2 * i + 1, b);
  }
}
__global__ void v3(float* d, const __nv_bfloat16* s, int64_t n4) {  // 4 per thread: 8-byte load, one 16-byte store, coalesced stores
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
    uint2 u = reinterpret_cast<const uint2*>(s)[i];
    __nv_bfloat16 h[4]; memcpy(h, &u, 8);
    float4 a; a.x = __bfloat162float(h[0]); a.y = __bfloat162float(h[1]); a.z = __bfloat162float(h[2]); a.w = __bfloat162float(h[3]);
    reinterpret_cast<float4*>(d)[i] = a;
  }
}
__global__ void v4(float* d, const __nv_bfloat16* s, int64_t n4) {  // v3 with streaming store
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
    uint2 u = __ldcs(reinterpret_cast<const uint2*>(s) + i);
    __nv_bfloat16 h[4]; memcpy(h, &u, 8);
    float4 a; a.x = __bfloat162float(h[0]); a.y = __bfloat162float(h[1]); a.z = __bfloat162float(h[2]); a.w = __bfloat162float(h[3]);
    __stcs(reinterpret_cast<float4*>(d) + i, a);
  }
}
__global__ void v5(float* d, const __nv_bfloat16* s, int64_t n8) {  // v1 but stores of one warp contiguous: half-warp split
  // thread t of the block handles input pack i; its two 16-byte outputs go to out packs 2i, 2i+1 (as v1) -> 32 B/thread stride: coalescing ok
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8; i += 2 * stride) {
    B8 in0 = reinterpret_cast<const B8*>(s)[i];
    const bool has1 = i + stride < n8;
    B8 in1 = has1 ? reinterpret_cast<const B8*>(s)[i + stride] : in0;
    F4 a, b;
    for (int k = 0; k < 4; ++k) a.v[k] = __bfloat162float(in0.v[k]), b.v[k] = __bfloat162float(in0.v[4 + k]);
    reinterpret_cast<F4*>(d)[2 * i] = a; reinterpret_cast<F4*>(d)[2 * i + 1] = b;
    if (has1) {
      for (int k = 0; k < 4; ++k) a.v[k] = __bfloat162float(in1.v[k]), b.v[k] = __bfloat162float(in1.v[4 + k]);
      reinterpret_cast<F4*>(d)[2 * (i + stride)] = a; reinterpret_cast<F4*>(d)[2 * (i + stride) + 1] = b;
    }
  }
}
__global__ void fill(float4* d, int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) d[i] = make_float4(1, 2, 3, 4);
}
__global__ void copyk(float4* d, const float4* s, int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) d[i] = s[i];
}
__global__ void bigger(float4* d, const float4* s, int64_t n4) {  // f32 copy reading 1 and writing 2: a write-heavy control
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) { float4 v = s[i]; d[2 * i] = v; d[2 * i + 1] = v; }
}
int main() {
  const int64_t n = int64_t(1) << 28;
  float *f, *g; __nv_bfloat16* h;
  CK(cudaMalloc(&f, n * 4)); CK(cudaMalloc(&g, n * 4)); CK(cudaMalloc(&h, n * 2));
  CK(cudaMemset(h, 0x3f, n * 2)); CK(cudaMemset(g, 0, n * 4));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  auto time = [&](const char* name, double bytes, auto&& fn) {
    float best = 1e9;
    for (int r = 0; r < 25; ++r) { cudaEventRecord(a); fn(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); if (r > 2 && ms < best) best = ms; }
    printf("%-40s %8.1f us %8.0f GB/s\n", name, best * 1e3, bytes / best / 1e6);
  };
  time("cudaMemcpy d2d f32 (8n)", 8.0 * n, [&] { cudaMemcpyAsync(g, f, n * 4, cudaMemcpyDeviceToDevice); });
  for (int grid : {sms * 8, sms * 16, 65536, int((n / 4 + 255) / 256)}) {
    char name[64];
    snprintf(name, 64, "copy kernel f32 grid %d", grid); time(name, 8.0 * n, [&] { copyk<<<grid, 256>>>((float4*)g, (const float4*)f, n / 4); });
    snprintf(name, 64, "fill f32 (4n) grid %d", grid); time(name, 4.0 * n, [&] { fill<<<grid, 256>>>((float4*)g, n / 4); });
    snprintf(name, 64, "read 2n write 4n f32 grid %d", grid); time(name, 6.0 * n, [&] { bigger<<<grid, 256>>>((float4*)g, (const float4*)f, n / 8); });
    snprintf(name, 64, "v1 current grid %d", grid); time(name, 6.0 * n, [&] { v1<<<grid, 256>>>(g, h, n / 8); });
    snprintf(name, 64, "v2 streaming grid %d", grid); time(name, 6.0 * n, [&] { v2<<<grid, 256>>>(g, h, n / 8); });
    snprintf(name, 64, "v3 4/thread grid %d", grid); time(name, 6.0 * n, [&] { v3<<<grid, 256>>>(g, h, n / 4); });
    snprintf(name, 64, "v4 4/thread streaming grid %d", grid); time(name, 6.0 * n, [&] { v4<<<grid, 256>>>(g, h, n / 4); });
    snprintf(name, 64, "v5 2 packs in flight grid %d", grid); time(name, 6.0 * n, [&] { v5<<<grid, 256>>>(g, h, n / 8); });
  }
  time("cudaMemset (4n)", 4.0 * n, [&] { cudaMemsetAsync(g, 0, n * 4); });
  CK(cudaDeviceSynchronize());
  return 0;
}
