// Flash attention on the GPU, half precision (tensor-core forward and backward, SIMT for others)
// against the f64 CPU kernels on the same (rounded) inputs, over a grid of shapes: lengths 1,
// 17, 1000, 4096, q shorter than k, grouped-query heads, causal, ALiBi, head_dim 32/64/128 on the
// tensor-core kernels (96 through the SIMT path). Bounds are set by the formats: bf16 keeps 8 mantissa bits, f16 11;
// each reported as max abs error over the max magnitude of the reference.
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/engine.hpp"
#include "gpu_test_util.hpp"

namespace nx::gputest {
namespace {

struct AttnCase { int64_t b, h, hkv, tq, tk, d; bool causal, alibi; DType dt; };

// A case as the tests print it: "b2 h8/2 tq1000 tk1000 d128 causal+alibi".
std::string describe(const AttnCase& c) {
  char text[128];
  std::snprintf(text, sizeof text, "b%lld h%lld/%lld tq%lld tk%lld d%lld %s%s", (long long)c.b, (long long)c.h,
                (long long)c.hkv, (long long)c.tq, (long long)c.tk, (long long)c.d, c.causal ? "causal" : "full",
                c.alibi ? "+alibi" : "");
  return text;
}

// Random normal values of shape s, rounded to the case's dtype, on the GPU.
Tensor gpu_randn(const AttnCase& c, Shape s) { return to_device(cast(randn(s, DType::F32, kCpu), c.dt), kGpu); }

class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudaAttention, HalfPrecisionMatchesF64Reference) {
  NX_REQUIRE_GPU();
  const AttnCase c = GetParam();
  manual_seed(21);
  auto make = [&](Shape s) { return cast(randn(s, DType::F32, kCpu), c.dt); };  // rounded once, shared by both sides
  Tensor q = make({c.b, c.h, c.tq, c.d}), k = make({c.b, c.hkv, c.tk, c.d}), v = make({c.b, c.hkv, c.tk, c.d});
  manual_seed(5);
  Tensor gout = randn(q.shape(), DType::F32, kCpu);  // the output's shape: v's head_dim is q's
  const AttentionReference reference = f64_attention_reference(q, k, v, c.causal, c.alibi, gout);
  const Tensor& ref = reference.out;
  const std::vector<Tensor>& gr = reference.grads;
  BackwardOptions opt;
  opt.accumulate = false;
  const double bound = c.dt == DType::BF16 ? 2e-2 : 4e-3;
  // Both kernel families on Hopper: wgmma (the default there) and mma.sync (what other GPUs run);
  // besides each against the reference, the two against each other.
  Tensor first_out;
  std::vector<Tensor> first_grads;
  for (const char* kernel : {"auto", "mma"}) {
    ::setenv("NEXUS_FLASH_KERNEL", kernel, 1);
    Tensor qg = grad_leaf(to_device(q, kGpu)), kg = grad_leaf(to_device(k, kGpu)), vg = grad_leaf(to_device(v, kGpu));
    Tensor got = flash_attention(qg, kg, vg, c.causal, c.alibi, 0.0);
    ASSERT_EQ(got.dtype(), c.dt);
    const double fwd = max_err(got, ref) / std::max(1e-3, max_abs(ref));
    auto gg = run_backward(got, to_device(cast(gout, c.dt), kGpu), opt, {qg, kg, vg});
    ::unsetenv("NEXUS_FLASH_KERNEL");
    double bwd = 0;
    for (int i = 0; i < 3; ++i) bwd = std::max(bwd, max_err(gg[size_t(i)], gr[size_t(i)]) / std::max(1e-3, max_abs(gr[size_t(i)])));
    std::printf("attention %s %s [%s]: fwd rel err %.2e, grads rel err %.2e (bound %.0e)\n", describe(c).c_str(),
                dtype_name(c.dt), kernel, fwd, bwd, bound);
    EXPECT_LT(fwd, bound) << kernel;
    EXPECT_LT(bwd, 4 * bound) << kernel;  // the gradient sums many rounded products
    if (!first_out.defined()) {
      first_out = got;
      first_grads = gg;
      continue;
    }
    double between = max_err(got, first_out) / std::max(1e-3, max_abs(ref));
    for (int i = 0; i < 3; ++i)
      between = std::max(between, max_err(gg[size_t(i)], first_grads[size_t(i)]) / std::max(1e-3, max_abs(gr[size_t(i)])));
    std::printf("  auto vs mma: max rel difference %.2e\n", between);
    EXPECT_LT(between, 4 * bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, CudaAttention, ::testing::Values(
    AttnCase{2, 4, 4, 17, 17, 64, false, false, DType::BF16}, AttnCase{1, 8, 2, 1000, 1000, 128, true, false, DType::BF16},
    AttnCase{1, 4, 4, 1000, 1000, 64, true, true, DType::F16}, AttnCase{1, 2, 1, 4096, 4096, 128, true, false, DType::BF16},
    AttnCase{1, 2, 2, 4096, 4096, 64, false, true, DType::F16}, AttnCase{2, 4, 1, 100, 1000, 128, true, true, DType::BF16},
    AttnCase{3, 4, 4, 1, 17, 64, true, false, DType::BF16}, AttnCase{1, 4, 2, 1, 4096, 128, true, true, DType::F16},
    AttnCase{1, 4, 4, 70, 70, 32, true, false, DType::BF16}, AttnCase{1, 2, 2, 65, 130, 96, false, false, DType::F16},
    AttnCase{2, 8, 8, 129, 129, 128, false, false, DType::F16},
    // head_dim 32 (the 8 heads of a 256-wide GPT): the shape of the "bench" model, GQA + ALiBi, Tq < Tk
    AttnCase{4, 8, 8, 128, 128, 32, true, false, DType::BF16}, AttnCase{2, 8, 2, 300, 300, 32, true, true, DType::F16},
    AttnCase{1, 4, 2, 100, 1000, 32, false, true, DType::BF16},
    // few-query decode against a long cache (split keys): 3 and 2 queries, head_dim 64 and 256
    AttnCase{2, 8, 2, 3, 3000, 64, true, true, DType::BF16}, AttnCase{1, 2, 2, 2, 1000, 256, false, false, DType::F16},
    // decode with as many (batch, head) pairs as two blocks per SM of an H200: one split, no merge kernel
    AttnCase{8, 32, 8, 1, 700, 128, true, false, DType::BF16}, AttnCase{8, 32, 8, 1, 1000, 64, false, true, DType::F16}));

// Each case's forward with the environment switch `name` at `first`, then at `second` (nullptr:
// unset): the outputs equal bit for bit, and not all zero.
void expect_switch_keeps_forward_bits(const char* label, std::initializer_list<AttnCase> cases, uint64_t seed,
                                      const char* name, const char* first, const char* second) {
  for (const AttnCase& c : cases) {
    manual_seed(seed);
    Tensor q = gpu_randn(c, {c.b, c.h, c.tq, c.d}), k = gpu_randn(c, {c.b, c.hkv, c.tk, c.d}),
           v = gpu_randn(c, {c.b, c.hkv, c.tk, c.d});
    auto forward = [&](const char* value) {
      if (value) ::setenv(name, value, 1);
      else ::unsetenv(name);
      Tensor out = flash_attention(q, k, v, c.causal, c.alibi, 0.0);
      ::unsetenv(name);
      return out;
    };
    const Tensor a = forward(first), b = forward(second);
    const double diff = max_err(b, a);
    std::printf("%s %s: max difference %.3g (max |out| %.3g)\n", label, describe(c).c_str(), diff, max_abs(a));
    EXPECT_EQ(diff, 0.0);
    EXPECT_GT(max_abs(a), 0.0);
  }
}

// The persistent forward (Hopper, TMA: a launch block per multiprocessor, each taking query blocks
// until none is left, K/V tiles running through one ring across them) gives every query block the
// arithmetic of the one-block-per-query-block launch (NEXUS_FLASH_PERSISTENT=0): outputs equal bit
// for bit. The shapes have more query blocks than an H200 has multiprocessors (132), so blocks
// loop; causal with Tq > Tk gives query blocks with no keys; GQA, ALiBi, both warpgroup counts of
// head_dim 64 (two: causal Tq < 2048; three: full and longer causal).
TEST(CudaAttentionPersistent, EqualsOneLaunchBlockPerQueryBlockBitForBit) {
  NX_REQUIRE_GPU();
  expect_switch_keeps_forward_bits("persistent",
                                   {AttnCase{4, 8, 2, 1000, 1000, 128, true, false, DType::BF16},
                                    AttnCase{2, 8, 8, 1500, 700, 64, true, true, DType::F16},
                                    AttnCase{1, 16, 16, 2100, 2100, 64, false, false, DType::BF16},
                                    AttnCase{2, 16, 4, 700, 900, 128, false, true, DType::F16}},
                                   8, "NEXUS_FLASH_PERSISTENT", "0", "1");
}

// Half tiles (the Hopper forward): a warpgroup's last key tile of a block, when its rows see only
// the tile's first 64 keys, takes its softmax over those 64 only and writes the others' weights as
// zeros; masked, they would have been exactly 0 too, so the output equals the whole tile's bit for bit
// (NEXUS_FLASH_HALF_TILE=0). Cases: the causal diagonal at both head_dims and warpgroup counts
// (head_dim 64: two warpgroups below 2048 causal rows, three otherwise), a causal offset of 64 keys
// (Tq < Tk: the first warpgroup's whole last tile masked), Tq > Tk, short last tiles without a
// mask (17 and 129 keys), GQA, ALiBi, f16 and bf16.
TEST(CudaAttentionHalfTiles, EqualWholeTilesBitForBit) {
  NX_REQUIRE_GPU();
  expect_switch_keeps_forward_bits("half tiles",
                                   {AttnCase{2, 8, 2, 1000, 1000, 128, true, false, DType::BF16},
                                    AttnCase{1, 8, 8, 2048, 2048, 64, true, true, DType::F16},
                                    AttnCase{1, 4, 4, 4096, 4096, 64, true, false, DType::BF16},
                                    AttnCase{2, 4, 2, 960, 1024, 128, true, true, DType::BF16},
                                    AttnCase{2, 8, 8, 1500, 700, 64, true, false, DType::F16},
                                    AttnCase{2, 4, 4, 17, 17, 64, false, false, DType::BF16},
                                    AttnCase{2, 8, 8, 129, 129, 128, false, true, DType::F16}},
                                   14, "NEXUS_FLASH_HALF_TILE", "0", nullptr);
}

// Output tiles written through shared memory by TMA stores (the persistent forward's O, the
// backward's dK and dV) equal the same values stored from registers (NEXUS_FLASH_FWD_STAGE_O=0,
// NEXUS_FLASH_BWD_STAGE_DKV=0) bit for bit, including the rows past a sequence end the tensor map
// must not write (lengths that are not multiples of 16 or of a block, one shorter than a block).
// Deterministic mode, so dQ's order of additions is fixed and it compares bit for bit too.
TEST(CudaAttentionStores, StagedTileStoresEqualRegisterStoresBitForBit) {
  NX_REQUIRE_GPU();
  const AttnCase cases[] = {AttnCase{2, 8, 2, 1000, 1000, 128, true, false, DType::BF16},
                            AttnCase{2, 8, 4, 700, 900, 64, true, true, DType::F16},
                            AttnCase{1, 4, 4, 77, 77, 128, false, false, DType::BF16},
                            AttnCase{1, 16, 16, 2100, 2100, 64, false, false, DType::BF16}};
  for (const AttnCase& c : cases) {
    manual_seed(12);
    Tensor q = gpu_randn(c, {c.b, c.h, c.tq, c.d}), k = gpu_randn(c, {c.b, c.hkv, c.tk, c.d}),
           v = gpu_randn(c, {c.b, c.hkv, c.tk, c.d}), gout = gpu_randn(c, {c.b, c.h, c.tq, c.d});
    auto run = [&](bool staged) {
      if (!staged) {
        ::setenv("NEXUS_FLASH_FWD_STAGE_O", "0", 1);
        ::setenv("NEXUS_FLASH_BWD_STAGE_DKV", "0", 1);
      }
      set_deterministic(true);
      Tensor ql = grad_leaf(q), kl = grad_leaf(k), vl = grad_leaf(v);
      BackwardOptions opt;
      opt.accumulate = false;
      Tensor out = flash_attention(ql, kl, vl, c.causal, c.alibi, 0.0);
      std::vector<Tensor> all = run_backward(out, gout, opt, {ql, kl, vl});
      all.insert(all.begin(), out);
      set_deterministic(false);
      ::unsetenv("NEXUS_FLASH_FWD_STAGE_O");
      ::unsetenv("NEXUS_FLASH_BWD_STAGE_DKV");
      return all;
    };
    const std::vector<Tensor> from_registers = run(false), staged = run(true);
    const char* names[4] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < 4; ++i) {
      std::printf("stores %s %s: max difference %.3g (max |x| %.3g)\n", describe(c).c_str(), names[i],
                  max_err(staged[i], from_registers[i]), max_abs(from_registers[i]));
      EXPECT_EQ(max_err(staged[i], from_registers[i]), 0.0) << names[i];
      EXPECT_GT(max_abs(from_registers[i]), 0.0) << names[i];
    }
  }
}

// The forward's lazy rescale (flash_common.cuh: a warp's reference maxima move only when a row's
// max grows by more than 2^8): designed scores whose maximum jumps late in the rows, by more than
// the threshold (at keys 300 and 2500: a rescale long after the first tile), by less (key 900: the
// weights run up to 2^6 against the old reference) and at the last key, against the f64 reference,
// causal and full, both head dims, bf16 and f16. Every query has a component along u = (1, ..., 1)
// and the bumped keys are multiples of u, so their scores stand out for every row.
TEST(CudaAttentionLazyRescale, LateGrowingMaximaMatchF64Reference) {
  NX_REQUIRE_GPU();
  const int64_t tk = 3000;
  std::vector<float> bump(size_t(tk), 0.f);
  // scores of about 8 bump (natural units) against about N(0, 2) elsewhere: 14, 18, 26, 33
  bump[300] = 1.75f, bump[900] = 2.25f, bump[2500] = 3.25f, bump[size_t(tk - 1)] = 4.125f;
  for (int64_t d : {64, 128})
    for (bool causal : {false, true})
      for (DType dt : {DType::BF16, DType::F16}) {
        manual_seed(31);
        const double root_d = std::sqrt(double(d));
        // q = randn + 1: q . u / sqrt(d) is about sqrt(d); k row i = randn + bump[i] * u
        Tensor q = cast(add_scalar(randn({1, 4, tk, d}, DType::F32, kCpu), 1.0), dt);
        Tensor kb = mul(from_data(bump.data(), {1, 1, tk, 1}, DType::F32, kCpu), ones({1, 1, 1, d}, DType::F32, kCpu));
        Tensor k = cast(add(randn({1, 4, tk, d}, DType::F32, kCpu), mul_scalar(kb, 8.0 / root_d)), dt);
        Tensor v = cast(randn({1, 4, tk, d}, DType::F32, kCpu), dt);
        const Tensor ref = f64_attention_reference(q, k, v, causal, false, randn(q.shape(), DType::F32, kCpu)).out;
        for (const char* lazy : {"default", "0"}) {  // "0": NEXUS_FLASH_LAZY_RESCALE=0, rescale at every growth
          if (lazy[0] == '0') ::setenv("NEXUS_FLASH_LAZY_RESCALE", "0", 1);
          const Tensor got = flash_attention(to_device(q, kGpu), to_device(k, kGpu), to_device(v, kGpu), causal, false, 0.0);
          ::unsetenv("NEXUS_FLASH_LAZY_RESCALE");
          const double err = max_err(got, ref) / std::max(1e-3, max_abs(ref)), bound = dt == DType::BF16 ? 2e-2 : 4e-3;
          std::printf("lazy rescale %s d%lld %s %s: rel err %.2e (bound %.0e)\n", lazy, (long long)d,
                      causal ? "causal" : "full", dtype_name(dt), err, bound);
          EXPECT_LT(err, bound) << lazy;
        }
      }
}

// Deterministic mode: on Hopper the wgmma backward adds dQ's parts in a fixed order (turn counters
// between key blocks), elsewhere and at head_dim 32 the two-kernel mma.sync path runs. Either must
// repeat bit for bit, match the f64 reference, and agree with the default backward up to rounding.
// The cases cover the orders the wgmma path builds: full (rotated walks), causal (diagonal walks),
// causal with Tq < Tk (blocks that share a first tile), more key blocks than query tiles, GQA, ALiBi.
class CudaAttentionModes : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudaAttentionModes, DeterministicBackwardRepeatsAndAgrees) {
  NX_REQUIRE_GPU();
  const AttnCase c = GetParam();
  manual_seed(8);
  auto make = [&](Shape s) { return cast(randn(s, DType::F32, kCpu), c.dt); };
  Tensor q = make({c.b, c.h, c.tq, c.d}), k = make({c.b, c.hkv, c.tk, c.d}), v = make({c.b, c.hkv, c.tk, c.d});
  Tensor gout = randn(q.shape(), DType::F32, kCpu);
  const AttentionReference reference = f64_attention_reference(q, k, v, c.causal, c.alibi, gout);
  auto grads = [&](bool det) {
    set_deterministic(det);
    Tensor ql = grad_leaf(to_device(q, kGpu)), kl = grad_leaf(to_device(k, kGpu)), vl = grad_leaf(to_device(v, kGpu));
    BackwardOptions opt;
    opt.accumulate = false;
    auto g = run_backward(flash_attention(ql, kl, vl, c.causal, c.alibi, 0.0), to_device(cast(gout, c.dt), kGpu), opt,
                          {ql, kl, vl});
    set_deterministic(false);
    return g;
  };
  auto a = grads(true), fast = grads(false), b = grads(true), again = grads(true);
  const double bound = c.dt == DType::BF16 ? 2e-2 : 4e-3;
  for (int i = 0; i < 3; ++i) {
    const Tensor& ref = reference.grads[size_t(i)];
    const double scale = std::max(1e-3, max_abs(ref));
    EXPECT_EQ(max_err(a[size_t(i)], b[size_t(i)]), 0.0) << "gradient " << i << " differs between deterministic runs";
    EXPECT_EQ(max_err(a[size_t(i)], again[size_t(i)]), 0.0) << "gradient " << i << " differs between deterministic runs";
    EXPECT_LT(max_err(a[size_t(i)], ref) / scale, 4 * bound) << "gradient " << i << " against the f64 reference";
    EXPECT_LT(max_err(fast[size_t(i)], a[size_t(i)]) / scale, 4 * bound) << "gradient " << i;
  }
}
INSTANTIATE_TEST_SUITE_P(Orders, CudaAttentionModes, ::testing::Values(
    AttnCase{2, 8, 2, 700, 700, 32, true, true, DType::BF16}, AttnCase{2, 8, 2, 700, 700, 128, true, true, DType::BF16},
    AttnCase{1, 4, 4, 1500, 1500, 64, false, false, DType::BF16}, AttnCase{1, 4, 4, 2048, 2048, 64, true, false, DType::F16},
    AttnCase{2, 4, 2, 300, 1100, 128, true, false, DType::BF16}, AttnCase{1, 2, 1, 1024, 3000, 64, false, true, DType::BF16},
    AttnCase{1, 4, 2, 1000, 1000, 128, false, true, DType::F16}));


}  // namespace
}  // namespace nx::gputest
