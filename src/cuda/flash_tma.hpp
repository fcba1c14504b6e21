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

// x [groups, rows, row_elems] of `type` (elem_bytes each) as a tensor map with boxes of 128 bytes
// x box_rows rows of one group, 128-byte swizzled (flash_sm90.cuh's layout; zeros past the rows);
// false where no map can be made (no encoder, dimensions past int32, or the encoder refuses it).
inline bool encode_swizzled_rows(CUtensorMap* map, const void* x, CUtensorMapDataType type, int elem_bytes,
                                 int64_t groups, int64_t rows, int row_elems, int box_rows) {
  if (!tensor_map_encoder() || groups >= INT32_MAX || rows >= INT32_MAX) return false;
  const cuuint64_t dims[3] = {cuuint64_t(row_elems), cuuint64_t(rows), cuuint64_t(groups)};
  const cuuint64_t strides[2] = {cuuint64_t(row_elems) * elem_bytes, cuuint64_t(rows) * row_elems * elem_bytes};
  const cuuint32_t box[3] = {cuuint32_t(128 / elem_bytes), cuuint32_t(box_rows), 1}, unit[3] = {1, 1, 1};
  return tensor_map_encoder()(map, type, 3, const_cast<void*>(x), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
// x [groups, rows, D] 16-bit, boxes of 64 columns x box_rows rows.
inline bool encode_rows(CUtensorMap* map, const void* x, bool bf16, int64_t groups, int64_t rows, int D, int box_rows) {
  return encode_swizzled_rows(map, x, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
                              groups, rows, D, box_rows);
}
// x [groups, rows, 128] bytes (e4m3 codes), boxes of a whole row x box_rows rows.
inline bool encode_byte_rows(CUtensorMap* map, const void* x, int64_t groups, int64_t rows, int box_rows) {
  return encode_swizzled_rows(map, x, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, groups, rows, 128, box_rows);
}

// The forwards' launch blocks are persistent (one a multiprocessor, taking query blocks from a
// counter) where the rows are short: at most kPersistentKeys keys (H200, session 20: 9-15% faster
// at s512-s1024, 4% at d128 s4096 full, even at d64 s4096 causal, 5% slower at d128 s16384
// causal). NEXUS_FLASH_PERSISTENT=0|1 forces it off or on.
constexpr int64_t kPersistentKeys = 4096;
inline bool persistent_for(int64_t tk) {
  const char* s = std::getenv("NEXUS_FLASH_PERSISTENT");
  if (s && (std::strcmp(s, "0") == 0 || std::strcmp(s, "1") == 0)) return s[0] == '1';
  return tk <= kPersistentKeys;
}

}  // namespace nx::cuda::flash
