// The generated fused kernels (src/cuda/fused_codegen.cpp) against the interpreter kernel of
// elementwise.cu on the same programs and data, bit for bit: every floating elementwise op (alone
// and reading the previous op's result; RoPE's rotation, where an FMA across ops would show), f32
// and mixed f32/bf16/f16 instructions, four operand layouts (contiguous and 16-byte aligned: the
// vector path; contiguous but misaligned with an odd size: the scalar path; broadcast inputs with
// stride 0; a transposed input), on random values mixed with infinities, NaN, signed zeros,
// subnormals and the ops' thresholds. The interpreter gives the unfused ops' bits (the compiled
// plans' tests, tests/capi/test_plan.c, check that end to end).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "../cpp/fused_test_programs.hpp"
#include "cuda/fused_codegen.hpp"
#include "cuda/nvrtc.hpp"
#include "gpu_test_util.hpp"

namespace nx::gputest {
namespace {

enum class Layout { Aligned, Misaligned, Broadcast, Transposed };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Aligned: return "aligned";
    case Layout::Misaligned: return "misaligned";
    case Layout::Broadcast: return "broadcast";
    default: return "transposed";
  }
}

// Device memory for one test, freed at the end.
struct DeviceBuffers {
  std::vector<void*> all;
  void* get(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    all.push_back(p);
    return p;
  }
  ~DeviceBuffers() {
    for (void* p : all) cudaFree(p);
  }
};

std::vector<unsigned char> encode(const std::vector<float>& v, DType dt) {
  std::vector<unsigned char> bytes(v.size() * dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) std::memcpy(&bytes[i * 4], &v[i], 4);
    else {
      const uint16_t h = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.f, -0.f, inf, -inf, std::nanf(""), 1e-40f, -1e-40f, 20.f, 20.5f, 1.f, -1.f, 2.f, 1e30f, -88.f, 89.f};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-4.f, 4.f);
  std::vector<float> v(n);
  for (float& x : v) x = rng() % 12 == 0 ? specials[rng() % (sizeof specials / sizeof specials[0])] : uniform(rng);
  return v;
}

// Runs p both ways with operands laid out as layout; compares every output byte.
void check(FusedProgram p, Layout layout, uint32_t seed) {
  const int64_t offset = layout == Layout::Misaligned ? 1 : 0;
  int64_t row_major[kFuseMaxRank] = {};
  int64_t s = 1;
  for (int d = p.rank - 1; d >= 0; --d) row_major[d] = s, s *= p.shape[d];
  DeviceBuffers mem;
  for (int k = 0; k < p.ninputs; ++k) {
    FusedOperand& in = p.inputs[k];
    for (int d = 0; d < p.rank; ++d) in.strides[d] = row_major[d];
    if (layout == Layout::Broadcast && k % 2 == 1) in.strides[0] = 0;
    if (layout == Layout::Transposed && k == 0) {  // element (i, j, l) at i + j * n0 + l * n0 * n1
      int64_t t = 1;
      for (int d = 0; d < p.rank; ++d) in.strides[d] = t, t *= p.shape[d];
    }
    const std::vector<unsigned char> bytes = encode(random_values(size_t(p.numel + offset), seed + k), in.dtype);
    char* dst = static_cast<char*>(mem.get(bytes.size()));
    ASSERT_EQ(cudaMemcpy(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    in.data = dst + offset * int64_t(dtype_size(in.dtype));
  }
  for (int o = 0; o < p.noutputs; ++o)
    for (int d = 0; d < p.rank; ++d) p.outputs[o].strides[d] = row_major[d];
  p.contiguous = layout == Layout::Aligned || layout == Layout::Misaligned;
  ASSERT_NE(cuda::generated_kernel(0, p), nullptr) << cuda::runtime_compile_stats().last_error;
  std::vector<std::vector<unsigned char>> results[2];
  for (int way = 0; way < 2; ++way) {
    for (int o = 0; o < p.noutputs; ++o) {
      const size_t bytes = size_t(p.numel + offset) * dtype_size(p.outputs[o].dtype);
      char* out = static_cast<char*>(mem.get(bytes));
      ASSERT_EQ(cudaMemset(out, 0xA5, bytes), cudaSuccess);
      p.outputs[o].data = out + offset * int64_t(dtype_size(p.outputs[o].dtype));
    }
    cuda::fused_elementwise(0, nullptr, p, /*generated=*/way == 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int o = 0; o < p.noutputs; ++o) {
      std::vector<unsigned char> host(size_t(p.numel) * dtype_size(p.outputs[o].dtype));
      ASSERT_EQ(cudaMemcpy(host.data(), p.outputs[o].data, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      results[way].push_back(std::move(host));
    }
  }
  for (int o = 0; o < p.noutputs; ++o) {
    const size_t es = dtype_size(p.outputs[o].dtype);
    size_t differ = 0, first = 0;
    for (size_t e = 0; e < size_t(p.numel); ++e)
      if (std::memcmp(&results[0][o][e * es], &results[1][o][e * es], es) != 0 && differ++ == 0) first = e;
    EXPECT_EQ(differ, 0u) << layout_name(layout) << ", output " << o << " (" << dtype_name(p.outputs[o].dtype)
                          << "): first difference at element " << first << "\n" << cuda::fused_kernel_source(p);
  }
}

TEST(CudaFusedCodegen, GeneratedKernelsGiveTheInterpretersBits) {
  NX_REQUIRE_GPU();
  ASSERT_TRUE(cuda::fused_codegen_enabled()) << cuda::runtime_compile_stats().last_error;
  const int64_t failures = cuda::runtime_compile_stats().failures;
  const std::vector<std::vector<DType>> mixes = {{DType::F32}, {DType::BF16, DType::F32, DType::F16}, {DType::BF16}};
  uint32_t seed = 1;
  for (Layout layout : {Layout::Aligned, Layout::Misaligned, Layout::Broadcast, Layout::Transposed}) {
    // 4 * 33 * 37 elements (misaligned): not a multiple of 4, so the scalar tail runs
    const std::vector<int64_t> shape = {4, 33, layout == Layout::Misaligned ? 37 : 40};
    for (const auto& ops : fusetest::op_batches())
      for (const auto& dtypes : mixes)
        for (int chain : {3, 1})  // every third op reads the previous result, or every op does
          check(fusetest::make_program(ops, 5, dtypes, shape, chain), layout, seed++);
    for (DType dt : {DType::F32, DType::BF16}) check(fusetest::rotation_program(dt, shape), layout, seed++);
  }
  EXPECT_EQ(cuda::runtime_compile_stats().failures, failures) << cuda::runtime_compile_stats().last_error;
}

}  // namespace
}  // namespace nx::gputest
