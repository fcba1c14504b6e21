// Host side of the flash kernels' TMA loads (forward and backward): the driver's tensor-map encoder
// and the row maps both kernels read tiles through.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace nx::cuda::flash {

// A flash kernel's measurement switch: on unless the environment variable `name` is "0" (read at
// each call, so a bench or a test can alternate both in one process).
inline bool switch_on(const char* name) {
  const char* s = std::getenv(name);
  return !(s && std::strcmp(s, "0") == 0);
}

// The loaders issue TMA copies unless NEXUS_FLASH_TMA=0 (ctest gpu.attention_cp_async runs the
// attention tests with the cp.async loaders).
inline bool tma_requested() { return switch_on("NEXUS_FLASH_TMA"); }

// The driver's tensor-map encoder, through the runtime (no link against libcuda); null if absent.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// x [groups, rows, D] 16-bit as a tensor map with boxes of 64 columns x box_rows rows of one group,
// 128-byte swizzled (flash_sm90.cuh's layout; zeros past the rows); false where no map can be made
// (no encoder, dimensions past int32, or the encoder refuses it).
inline bool encode_rows(CUtensorMap* map, const void* x, bool bf16, int64_t groups, int64_t rows, int D, int box_rows) {
  if (!tensor_map_encoder() || groups >= INT32_MAX || rows >= INT32_MAX) return false;
  const cuuint64_t dims[3] = {cuuint64_t(D), cuuint64_t(rows), cuuint64_t(groups)};
  const cuuint64_t strides[2] = {cuuint64_t(D) * 2, cuuint64_t(rows) * D * 2};
  const cuuint32_t box[3] = {64, cuuint32_t(box_rows), 1}, unit[3] = {1, 1, 1};
  return tensor_map_encoder()(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
                              const_cast<void*>(x), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace nx::cuda::flash
