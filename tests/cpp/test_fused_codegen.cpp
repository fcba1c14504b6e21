// The fused kernels generated for compiled plans (src/cuda/fused_codegen.cpp, nvrtc.cpp): every op
// compiles with NVRTC for Hopper in each operand layout and dtype mix (no GPU needed), the source
// depends on a program's structure only, and the disk cache returns what was compiled, survives a
// damaged file and can be turned off. Running them against the interpreter kernel, bit for bit, is
// tests/gpu/test_cuda_fused.cpp.
#ifdef NEXUS_HAVE_CUDA
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "cuda/fused_codegen.hpp"
#include "cuda/nvrtc.hpp"
#include "fused_test_programs.hpp"

namespace nx {
namespace {

using fusetest::make_program;
using fusetest::op_batches;

// Row-major strides for every operand, or (broadcast) stride 0 along the first dimension for
// the odd-numbered inputs, as a bias row is read.
void lay_out(FusedProgram& p, bool broadcast) {
  int64_t strides[kFuseMaxRank] = {};
  int64_t s = 1;
  for (int d = p.rank - 1; d >= 0; --d) strides[d] = s, s *= p.shape[d];
  for (int k = 0; k < p.ninputs; ++k)
    for (int d = 0; d < p.rank; ++d) p.inputs[k].strides[d] = (broadcast && k % 2 == 1 && d == 0) ? 0 : strides[d];
  for (int k = 0; k < p.noutputs; ++k)
    for (int d = 0; d < p.rank; ++d) p.outputs[k].strides[d] = strides[d];
  p.contiguous = !broadcast;
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const std::string& value) : name(n) { setenv(n, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

bool is_elf(const std::string& bytes) { return bytes.size() > 4 && bytes.compare(0, 4, "\x7f" "ELF") == 0; }

TEST(FusedCodegen, EveryOpCompilesForHopperInEveryLayout) {
  std::string why;
  ASSERT_TRUE(cuda::nvrtc_available(&why)) << "built with CUDA, but NVRTC does not open: " << why;
  ScopedEnv no_cache("NEXUS_KERNEL_CACHE", "off");
  const std::vector<std::vector<DType>> mixes = {{DType::F32}, {DType::BF16, DType::F32, DType::F16}};
  for (const auto& ops : op_batches())
    for (const auto& dtypes : mixes)
      for (bool broadcast : {false, true}) {
        FusedProgram p = make_program(ops, 5, dtypes, {3, 7, 33});
        lay_out(p, broadcast);
        const std::string source = cuda::fused_kernel_source(p);
        SCOPED_TRACE(source);
        bool from_disk = true;
        const std::string cubin = cuda::compile_cubin(source, 90, &from_disk);
        EXPECT_TRUE(is_elf(cubin));
        EXPECT_FALSE(from_disk);
      }
}

TEST(FusedCodegen, SourceDependsOnStructureOnly) {
  const auto ops = op_batches().front();
  FusedProgram a = make_program(ops, 3, {DType::F32, DType::BF16}, {4, 64});
  lay_out(a, true);
  FusedProgram b = a;  // other addresses, sizes, non-zero strides and parameters: the same kernel
  b.shape[1] = 96, b.numel = 4 * 96, b.inputs[0].data = &b, b.inputs[0].strides[0] = 96, b.instrs[0].p0 = 9.f;
  EXPECT_EQ(cuda::fused_kernel_source(a), cuda::fused_kernel_source(b));
  FusedProgram c = a;  // another dtype: another kernel
  c.instrs[1].dtype = DType::F16;
  EXPECT_NE(cuda::fused_kernel_source(a), cuda::fused_kernel_source(c));
  FusedProgram d = a;  // a stride becoming 0 (broadcast): another kernel, with the term left out
  d.inputs[0].strides[1] = 0;
  EXPECT_NE(cuda::fused_kernel_source(a), cuda::fused_kernel_source(d));
  // 32-bit offsets while they fit, 64-bit beyond
  EXPECT_NE(cuda::fused_kernel_source(a).find("typedef int I;"), std::string::npos);
  FusedProgram big = a;
  big.shape[0] = int64_t(1) << 26, big.numel = big.shape[0] * 64;
  big.inputs[0].strides[0] = 64;
  EXPECT_NE(cuda::fused_kernel_source(big).find("typedef long long I;"), std::string::npos);
  // the arguments carry what the source leaves out
  const FusedKernelArgs args = cuda::fused_kernel_args(b);
  EXPECT_EQ(args.numel, 4 * 96);
  EXPECT_EQ(args.in[0], static_cast<void*>(&b));
  EXPECT_EQ(args.in_strides[0][0], 96);
  EXPECT_EQ(args.p0[0], 9.f);
  EXPECT_EQ(args.vectorized, 0);  // not contiguous
}

TEST(FusedCodegen, DiskCacheReturnsTheCompiledCubinAndSurvivesDamage) {
  std::string why;
  ASSERT_TRUE(cuda::nvrtc_available(&why)) << why;
  char tmpl[] = "/tmp/nexus_kernel_cache_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = std::string(tmpl) + "/kernels";  // created on first use
  FusedProgram p = make_program(op_batches().back(), 2, {DType::BF16}, {1000});
  lay_out(p, false);
  const std::string source = cuda::fused_kernel_source(p);
  auto files = [&] {
    std::vector<std::filesystem::path> f;
    if (std::filesystem::exists(dir))
      for (const auto& e : std::filesystem::directory_iterator(dir)) f.push_back(e.path());
    return f;
  };
  {
    ScopedEnv cache("NEXUS_KERNEL_CACHE", dir.string());
    const cuda::RuntimeCompileStats before = cuda::runtime_compile_stats();
    bool from_disk = true;
    const std::string first = cuda::compile_cubin(source, 90, &from_disk);
    EXPECT_FALSE(from_disk);
    ASSERT_EQ(files().size(), 1u);
    const std::string second = cuda::compile_cubin(source, 90, &from_disk);
    EXPECT_TRUE(from_disk);
    EXPECT_TRUE(first == second);
    const cuda::RuntimeCompileStats after = cuda::runtime_compile_stats();
    EXPECT_EQ(after.compiled - before.compiled, 1);
    EXPECT_EQ(after.disk_hits - before.disk_hits, 1);
    // another architecture is another entry
    cuda::compile_cubin(source, 80, &from_disk);
    EXPECT_FALSE(from_disk);
    EXPECT_EQ(files().size(), 2u);
    // a damaged file is compiled again and replaced
    for (const auto& f : files()) {
      std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
      s.seekp(40);
      s.write("garbage", 7);
    }
    EXPECT_TRUE(cuda::compile_cubin(source, 90, &from_disk) == first);
    EXPECT_FALSE(from_disk);
    cuda::compile_cubin(source, 90, &from_disk);
    EXPECT_TRUE(from_disk);
  }
  {
    ScopedEnv off("NEXUS_KERNEL_CACHE", "off");
    std::filesystem::remove_all(dir);
    bool from_disk = true;
    cuda::compile_cubin(source, 90, &from_disk);
    EXPECT_FALSE(from_disk);
    EXPECT_TRUE(files().empty());
  }
  std::filesystem::remove_all(tmpl);
}

TEST(FusedCodegen, ACompileErrorSaysWhatNvrtcSaid) {
  std::string why;
  ASSERT_TRUE(cuda::nvrtc_available(&why)) << why;
  ScopedEnv no_cache("NEXUS_KERNEL_CACHE", "off");
  try {
    cuda::compile_cubin("extern \"C\" __global__ void nx_fused() { undefined_thing(); }", 90);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), NX_ERR_DEVICE);
    EXPECT_NE(std::string(e.what()).find("undefined_thing"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nx
#endif
