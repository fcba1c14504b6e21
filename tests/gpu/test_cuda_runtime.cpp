// CUDA runtime behaviour through the C API: transfers, streams and events, the caching
// allocator, out-of-memory, random numbers equal to the CPU's, TF32 and half matmul, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "capi_test_util.hpp"
#include "nexus.h"

namespace {

const nx_device kCpu = {NX_CPU, 0};
const nx_device kGpu = {NX_CUDA, 0};

#define REQUIRE_GPU() \
  do { if (nx_cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; } while (0)


TEST(CudaRuntime, DeviceCountAndTransfersRoundTrip) {
  REQUIRE_GPU();
  int64_t shape[2] = {3, 5};
  std::vector<float> data(15);
  for (int i = 0; i < 15; ++i) data[size_t(i)] = float(i) * 0.5f - 3.f;
  nx_tensor a, g, back;
  OK(nx_tensor_from_data(&a, data.data(), shape, 2, NX_F32, kCpu, nullptr));
  OK(nx_tensor_to(&g, a, kGpu, nullptr));
  nx_device d;
  OK(nx_tensor_device(g, &d));
  EXPECT_EQ(d.type, NX_CUDA);
  OK(nx_tensor_to(&back, g, kCpu, nullptr));
  EXPECT_EQ(host(back), data);
  EXPECT_EQ(host(g), data);  // copy_to_host straight from the device
  nx_tensor_free(a); nx_tensor_free(g); nx_tensor_free(back);
}

// Uploads return before the GPU copy ends (pinned staging): the host buffer is overwritten at
// once, in several staging chunks (20 MiB > 8 MiB blocks), on a side stream, and must not leak in.
TEST(CudaRuntime, StagedUploadsMayReuseTheHostBufferAtOnce) {
  REQUIRE_GPU();
  nx_stream s;
  OK(nx_stream_create(&s, kGpu));
  const int64_t n = int64_t(5) << 20;
  std::vector<float> buf(static_cast<size_t>(n));
  std::vector<nx_tensor> up(3);
  for (int round = 0; round < 3; ++round) {
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = float(round * 7 + i % 1000);
    OK(nx_tensor_from_data(&up[size_t(round)], buf.data(), &n, 1, NX_F32, kGpu, s));
  }
  std::fill(buf.begin(), buf.end(), -1.f);
  OK(nx_stream_synchronize(s));
  for (int round = 0; round < 3; ++round) {
    std::vector<float> got = host(up[size_t(round)]);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += got[size_t(i)] != float(round * 7 + i % 1000);
    EXPECT_EQ(bad, 0) << "round " << round;
    nx_tensor_free(up[size_t(round)]);
  }
  nx_stream_free(s);
}

TEST(CudaRuntime, RandomNumbersEqualOnBothDevices) {
  REQUIRE_GPU();
  int64_t shape[1] = {4096};
  nx_tensor c, g;
  nx_random_set_seed(123);
  OK(nx_tensor_randn(&c, shape, 1, NX_F32, kCpu, nullptr));
  nx_random_set_seed(123);
  OK(nx_tensor_randn(&g, shape, 1, NX_F32, kGpu, nullptr));
  auto hc = host(c), hg = host(g);
  for (size_t i = 0; i < hc.size(); ++i) ASSERT_NEAR(hc[i], hg[i], 1e-6f) << i;
  nx_tensor_free(c); nx_tensor_free(g);
}

TEST(CudaRuntime, StreamsAndEventsOrderWork) {
  REQUIRE_GPU();
  nx_stream s1, s2;
  nx_event ev;
  OK(nx_stream_create(&s1, kGpu));
  OK(nx_stream_create(&s2, kGpu));
  OK(nx_event_create(&ev, kGpu));
  int64_t shape[1] = {1 << 22};
  nx_tensor x, y, z, total;
  OK(nx_tensor_ones(&x, shape, 1, NX_F32, kGpu, s1));
  OK(nx_mul_scalar(&y, x, 3.0, s1));
  OK(nx_event_record(ev, s1));
  OK(nx_event_wait(ev, s2));
  OK(nx_add_scalar(&z, y, 1.0, s2));  // must see y complete
  OK(nx_sum(&total, z, nullptr, 0, false, s2));
  OK(nx_stream_synchronize(s2));
  double v;
  OK(nx_tensor_item(total, &v, s2));
  EXPECT_DOUBLE_EQ(v, 4.0 * double(1 << 22));
  nx_device d;
  OK(nx_stream_device(s1, &d));
  EXPECT_EQ(d.type, NX_CUDA);
  nx_tensor_free(x); nx_tensor_free(y); nx_tensor_free(z); nx_tensor_free(total);
  nx_event_free(ev); nx_stream_free(s1); nx_stream_free(s2);
}

// The handle table for the GPU-only handles (tests/capi/test_handles.c covers the others): a
// freed or stale event or CUDA stream is refused and never reaches a newer one.
TEST(CudaRuntime, FreedAndStaleEventAndStreamHandlesAreRefused) {
  REQUIRE_GPU();
  const int64_t events0 = nx_live_handle_count(NX_HANDLE_EVENT);
  nx_event old_event;
  nx_stream old_stream;
  OK(nx_event_create(&old_event, kGpu));
  OK(nx_stream_create(&old_stream, kGpu));
  nx_event_free(old_event);
  nx_stream_free(old_stream);
  EXPECT_EQ(nx_live_handle_count(NX_HANDLE_EVENT), events0);
  nx_event fresh_event;
  nx_stream fresh_stream;
  OK(nx_event_create(&fresh_event, kGpu));
  OK(nx_stream_create(&fresh_stream, kGpu));
  EXPECT_NE(fresh_event, old_event);
  EXPECT_EQ(nx_event_synchronize(old_event), NX_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(nx_last_error_message(), "event is not a live event handle"), nullptr) << nx_last_error_message();
  EXPECT_EQ(nx_stream_synchronize(old_stream), NX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nx_event_record(fresh_event, old_stream), NX_ERR_INVALID_ARGUMENT);
  nx_event_free(old_event);  // a second free of the old handles leaves the new ones alone
  nx_stream_free(old_stream);
  OK(nx_event_record(fresh_event, fresh_stream));
  OK(nx_event_synchronize(fresh_event));
  nx_event_free(fresh_event);
  nx_stream_free(fresh_stream);
  EXPECT_EQ(nx_live_handle_count(NX_HANDLE_EVENT), events0);
}

TEST(CudaRuntime, CachingAllocatorReusesMemory) {
  REQUIRE_GPU();
  OK(nx_cuda_empty_cache(0));
  int64_t shape[2] = {512, 512};
  nx_cuda_memory_stats before{sizeof(nx_cuda_memory_stats)}, after{sizeof(nx_cuda_memory_stats)};
  auto step = [&] {
    nx_tensor a, b, c;
    ASSERT_EQ(nx_tensor_randn(&a, shape, 2, NX_F32, kGpu, nullptr), NX_OK);
    ASSERT_EQ(nx_matmul(&b, a, a, nullptr), NX_OK);
    ASSERT_EQ(nx_relu(&c, b, nullptr), NX_OK);
    nx_tensor_free(a); nx_tensor_free(b); nx_tensor_free(c);
  };
  step();
  OK(nx_cuda_get_memory_stats(0, &before));
  for (int i = 0; i < 50; ++i) step();
  OK(nx_cuda_get_memory_stats(0, &after));
  EXPECT_EQ(after.num_device_allocs, before.num_device_allocs) << "steady state must not call cudaMalloc";
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.peak_allocated_bytes, 3u * 512u * 512u * 4u);
  EXPECT_GE(after.reserved_bytes, after.allocated_bytes);
  OK(nx_cuda_empty_cache(0));
  nx_cuda_memory_stats emptied{sizeof(nx_cuda_memory_stats)};
  OK(nx_cuda_get_memory_stats(0, &emptied));
  EXPECT_EQ(emptied.reserved_bytes, emptied.allocated_bytes);
  nx_cuda_memory_stats bad{4};
  EXPECT_EQ(nx_cuda_get_memory_stats(0, &bad), NX_ERR_INVALID_ARGUMENT);
}

TEST(CudaRuntime, OutOfMemoryIsAStatusNotACrash) {
  REQUIRE_GPU();
  int64_t shape[1] = {int64_t(1) << 40};  // 4 TiB of f32
  nx_tensor t = reinterpret_cast<nx_tensor>(1);
  EXPECT_EQ(nx_tensor_zeros(&t, shape, 1, NX_F32, kGpu, nullptr), NX_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(t, nullptr);
  EXPECT_NE(std::strstr(nx_last_error_message(), "out of memory"), nullptr) << nx_last_error_message();
  nx_tensor ok;  // the device still works afterwards
  int64_t small[1] = {16};
  OK(nx_tensor_ones(&ok, small, 1, NX_F32, kGpu, nullptr));
  nx_tensor_free(ok);
}

TEST(CudaRuntime, MixingDevicesIsADeviceError) {
  REQUIRE_GPU();
  int64_t shape[1] = {4};
  nx_tensor c, g, out;
  OK(nx_tensor_ones(&c, shape, 1, NX_F32, kCpu, nullptr));
  OK(nx_tensor_ones(&g, shape, 1, NX_F32, kGpu, nullptr));
  EXPECT_EQ(nx_add(&out, c, g, nullptr), NX_ERR_DEVICE);
  EXPECT_NE(std::strstr(nx_last_error_message(), "cuda:0"), nullptr) << nx_last_error_message();
  nx_device bad = {NX_CUDA, 99};
  EXPECT_EQ(nx_tensor_ones(&out, shape, 1, NX_F32, bad, nullptr), NX_ERR_DEVICE);
  nx_tensor_free(c); nx_tensor_free(g);
}

// f16/bf16/TF32 matmul against an f64 CPU reference with bounds set by the formats' precision.
TEST(CudaRuntime, ReducedPrecisionMatmul) {
  REQUIRE_GPU();
  int64_t as[2] = {64, 256}, bs[2] = {256, 48};
  nx_tensor a, b, ref, a64, b64;
  nx_random_set_seed(5);
  OK(nx_tensor_randn(&a, as, 2, NX_F32, kCpu, nullptr));
  OK(nx_tensor_randn(&b, bs, 2, NX_F32, kCpu, nullptr));
  OK(nx_cast(&a64, a, NX_F64, nullptr));
  OK(nx_cast(&b64, b, NX_F64, nullptr));
  OK(nx_matmul(&ref, a64, b64, nullptr));
  std::vector<double> want(64 * 48);
  OK(nx_tensor_copy_to_host(ref, want.data(), want.size() * 8, nullptr));
  struct { nx_dtype dt; bool tf32; double tol; } modes[] = {
      {NX_F32, false, 1e-4}, {NX_F32, true, 0.1}, {NX_F16, false, 0.15}, {NX_BF16, false, 0.8}};
  for (auto m : modes) {
    nx_cuda_set_tf32(m.tf32);
    nx_tensor ag, bg, ac, bc, c, c32;
    OK(nx_tensor_to(&ag, a, kGpu, nullptr));
    OK(nx_tensor_to(&bg, b, kGpu, nullptr));
    OK(nx_cast(&ac, ag, m.dt, nullptr));
    OK(nx_cast(&bc, bg, m.dt, nullptr));
    OK(nx_matmul(&c, ac, bc, nullptr));
    nx_dtype out_dt;
    OK(nx_tensor_dtype(c, &out_dt));
    EXPECT_EQ(out_dt, m.dt);
    OK(nx_cast(&c32, c, NX_F32, nullptr));
    auto got = host(c32);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    EXPECT_LT(worst, m.tol) << "dtype " << nx_dtype_name(m.dt) << " tf32 " << m.tf32;
    nx_tensor_free(ag); nx_tensor_free(bg); nx_tensor_free(ac); nx_tensor_free(bc); nx_tensor_free(c); nx_tensor_free(c32);
  }
  nx_cuda_set_tf32(false);
  bool tf32 = true;
  OK(nx_cuda_get_tf32(&tf32));
  EXPECT_FALSE(tf32);
  nx_tensor_free(a); nx_tensor_free(b); nx_tensor_free(ref); nx_tensor_free(a64); nx_tensor_free(b64);
}

// Large products with a dimension that is not a multiple of 16 bytes (GPT-2's vocabulary of 50257)
// run on padded copies (blas.cu): the result equals the f64 product of the same half inputs.
TEST(CudaRuntime, LargeOddSizedProductsMatchTheF64Product) {
  REQUIRE_GPU();
  struct Case { int64_t m, k, n; bool a_transposed; nx_dtype dt; };
  const Case cases[] = {{1024, 1001, 1027, false, NX_BF16}, {1024, 1024, 1027, true, NX_BF16},
                        {1027, 1024, 1024, true, NX_F16}, {1000, 1003, 1100, false, NX_F32}};
  nx_cuda_set_tf32(false);
  for (const Case& c : cases) {
    int64_t as[2] = {c.a_transposed ? c.k : c.m, c.a_transposed ? c.m : c.k}, bs[2] = {c.k, c.n};
    nx_tensor a32, b32, a, b, ag, bg, at, prod, a64, b64, ref, got32;
    nx_random_set_seed(11);
    OK(nx_tensor_randn(&a32, as, 2, NX_F32, kCpu, nullptr));
    OK(nx_tensor_randn(&b32, bs, 2, NX_F32, kCpu, nullptr));
    OK(nx_cast(&a, a32, c.dt, nullptr));  // the inputs both sides see
    OK(nx_cast(&b, b32, c.dt, nullptr));
    OK(nx_tensor_to(&ag, a, kGpu, nullptr));
    OK(nx_tensor_to(&bg, b, kGpu, nullptr));
    if (c.a_transposed) OK(nx_transpose(&at, ag, 0, 1, nullptr));
    else OK(nx_tensor_retain(&at, ag));
    OK(nx_matmul(&prod, at, bg, nullptr));
    OK(nx_cast(&a64, a, NX_F64, nullptr));
    OK(nx_cast(&b64, b, NX_F64, nullptr));
    nx_tensor a64t;
    if (c.a_transposed) OK(nx_transpose(&a64t, a64, 0, 1, nullptr));
    else OK(nx_tensor_retain(&a64t, a64));
    OK(nx_matmul(&ref, a64t, b64, nullptr));
    OK(nx_cast(&got32, prod, NX_F32, nullptr));
    std::vector<double> want(size_t(c.m * c.n));
    OK(nx_tensor_copy_to_host(ref, want.data(), want.size() * 8, nullptr));
    auto got = host(got32);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - want[i]));
      scale = std::max(scale, std::fabs(want[i]));
    }
    // the output's rounding: 2^-8 of the largest value for bf16, 2^-11 for f16, f32's sums
    const double tol = scale * (c.dt == NX_BF16 ? 1.0 / 128 : c.dt == NX_F16 ? 1.0 / 1024 : 1e-5);
    EXPECT_LT(worst, tol) << c.m << "x" << c.k << "x" << c.n << " " << nx_dtype_name(c.dt);
    for (nx_tensor t : {a32, b32, a, b, ag, bg, at, prod, a64, b64, a64t, ref, got32}) nx_tensor_free(t);
  }
}

TEST(CudaRuntime, BackwardRunsOnTheGpuAndGradientsStayThere) {
  REQUIRE_GPU();
  int64_t xs[2] = {8, 16}, ws[2] = {16, 4};
  nx_tensor x, w, y, act, loss, grad;
  OK(nx_tensor_randn(&x, xs, 2, NX_F32, kGpu, nullptr));
  OK(nx_tensor_randn(&w, ws, 2, NX_F32, kGpu, nullptr));
  OK(nx_tensor_set_requires_grad(w, true));
  OK(nx_matmul(&y, x, w, nullptr));
  OK(nx_tanh(&act, y, nullptr));
  OK(nx_mean(&loss, act, nullptr, 0, false, nullptr));
  OK(nx_backward(loss, nullptr, NULL, nullptr));
  OK(nx_tensor_grad(&grad, w));
  nx_device d;
  OK(nx_tensor_device(grad, &d));
  EXPECT_EQ(d.type, NX_CUDA);
  for (float v : host(grad)) EXPECT_TRUE(std::isfinite(v));
  nx_tensor_free(x); nx_tensor_free(w); nx_tensor_free(y); nx_tensor_free(act); nx_tensor_free(loss); nx_tensor_free(grad);
}

}  // namespace

namespace {

// One training step of a small GPT as a user writes it (forward under bf16 autocast, loss, zero
// grad, backward, AdamW): after the first steps it neither waits for the device on the host
// (nx_runtime_get_host_syncs) nor asks the driver for memory (the caching allocator is steady).
TEST(CudaRuntime, AutocastTrainingStepDoesNoHostSyncAndNoNewAllocation) {
  REQUIRE_GPU();
  nx_transformer_config cfg = {};
  cfg.struct_size = sizeof cfg;
  cfg.vocab = 96, cfg.context = 32, cfg.dim = 64, cfg.layers = 2, cfg.heads = 2;
  cfg.tie_embeddings = true, cfg.activation = NX_ACTIVATION_GELU_TANH;
  nx_module model;
  OK(nx_gpt_create(&model, &cfg, NX_F32, kGpu, nullptr));
  nx_tensor* params;
  size_t nparams;
  OK(nx_module_parameters(model, &params, &nparams));
  nx_optimizer opt;
  nx_adam_options o = NX_ADAM_OPTIONS_DEFAULT;
  o.weight_decay = 0.1, o.decoupled_weight_decay = true;
  OK(nx_adam_create(&opt, params, nparams, &o));
  std::vector<int64_t> ids(4 * 33);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 37 + 11) % 96);
  int64_t shape[2] = {4, 33}, flat[2] = {4 * 32, 96}, tflat[1] = {4 * 32};
  nx_tensor all, x, y, yf;
  OK(nx_tensor_from_data(&all, ids.data(), shape, 2, NX_I64, kGpu, nullptr));
  OK(nx_slice(&x, all, 1, 0, 32, 1, nullptr));
  OK(nx_slice(&y, all, 1, 1, 33, 1, nullptr));
  OK(nx_reshape(&yf, y, tflat, 1, nullptr));
  auto step = [&] {
    nx_tensor logits, lf, loss;
    OK(nx_autocast_push(NX_CUDA, NX_BF16, true));
    OK(nx_module_forward(&logits, model, x, nullptr));
    OK(nx_reshape(&lf, logits, flat, 2, nullptr));
    OK(nx_cross_entropy(&loss, lf, yf, -100, 0.0, NX_REDUCTION_MEAN, nullptr));
    OK(nx_autocast_pop());
    OK(nx_optimizer_zero_grad(opt));
    OK(nx_backward(loss, nullptr, nullptr, nullptr));
    OK(nx_optimizer_step(opt, nullptr));
    nx_tensor_free(logits); nx_tensor_free(lf); nx_tensor_free(loss);
  };
  for (int i = 0; i < 3; ++i) step();
  OK(nx_stream_synchronize(nullptr));
  uint64_t syncs_before = 0, syncs_after = 0;
  nx_cuda_memory_stats before{}, after{};
  before.struct_size = after.struct_size = sizeof before;
  OK(nx_runtime_get_host_syncs(&syncs_before));
  OK(nx_cuda_get_memory_stats(0, &before));
  for (int i = 0; i < 5; ++i) step();
  OK(nx_runtime_get_host_syncs(&syncs_after));
  OK(nx_cuda_get_memory_stats(0, &after));
  EXPECT_EQ(syncs_after, syncs_before) << "host syncs during 5 training steps";
  EXPECT_EQ(after.num_device_allocs, before.num_device_allocs) << "cudaMalloc calls during 5 training steps";
  // the count does move when the host does wait
  OK(nx_stream_synchronize(nullptr));
  OK(nx_runtime_get_host_syncs(&syncs_after));
  EXPECT_EQ(syncs_after, syncs_before + 1);
  nx_tensor_free(all); nx_tensor_free(x); nx_tensor_free(y); nx_tensor_free(yf);
  nx_optimizer_free(opt);
  nx_tensor_array_free(params, nparams);
  nx_module_free(model);
}

// A half tensor with an f32 one into f32 (bf16/f16, either order, add/sub/mul/div/maximum): the
// same bits as the CPU's, through the packed kernel (aligned, with a tail of 3) and the general one
// (views starting one element in).
TEST(CudaRuntime, MixedHalfAndF32BinaryOpsMatchCpuBitForBit) {
  REQUIRE_GPU();
  using Op = nx_status (*)(nx_tensor*, nx_tensor, nx_tensor, nx_stream);
  const Op ops[] = {nx_add, nx_sub, nx_mul, nx_div, nx_maximum};
  const int64_t n = 4100;
  nx_random_set_seed(5);
  nx_tensor h32, f_cpu;
  OK(nx_tensor_randn(&h32, &n, 1, NX_F32, kCpu, nullptr));
  OK(nx_tensor_randn(&f_cpu, &n, 1, NX_F32, kCpu, nullptr));
  for (nx_dtype half : {NX_BF16, NX_F16}) {
    nx_tensor h_cpu, h_gpu, f_gpu;
    OK(nx_cast(&h_cpu, h32, half, nullptr));
    OK(nx_tensor_to(&h_gpu, h_cpu, kGpu, nullptr));
    OK(nx_tensor_to(&f_gpu, f_cpu, kGpu, nullptr));
    for (int64_t start : {int64_t(0), int64_t(1)}) {
      nx_tensor hc, hg, fc, fg;  // [start, n): 4100 elements (4 x 1025) or 4099 starting off alignment
      OK(nx_slice(&hc, h_cpu, 0, start, n, 1, nullptr));
      OK(nx_slice(&hg, h_gpu, 0, start, n, 1, nullptr));
      OK(nx_slice(&fc, f_cpu, 0, start, n, 1, nullptr));
      OK(nx_slice(&fg, f_gpu, 0, start, n, 1, nullptr));
      for (size_t k = 0; k < sizeof ops / sizeof ops[0]; ++k)
        for (bool half_first : {true, false}) {
          nx_tensor want, got;
          OK(half_first ? ops[k](&want, hc, fc, nullptr) : ops[k](&want, fc, hc, nullptr));
          OK(half_first ? ops[k](&got, hg, fg, nullptr) : ops[k](&got, fg, hg, nullptr));
          nx_dtype dt;
          OK(nx_tensor_dtype(got, &dt));
          EXPECT_EQ(dt, NX_F32);
          const std::vector<float> w = host(want), g = host(got);
          ASSERT_EQ(w.size(), g.size());
          EXPECT_EQ(std::memcmp(w.data(), g.data(), w.size() * sizeof(float)), 0)
              << nx_dtype_name(half) << " op " << k << (half_first ? " half first" : " f32 first") << " start " << start;
          nx_tensor_free(want); nx_tensor_free(got);
        }
      nx_tensor_free(hc); nx_tensor_free(hg); nx_tensor_free(fc); nx_tensor_free(fg);
    }
    nx_tensor_free(h_cpu); nx_tensor_free(h_gpu); nx_tensor_free(f_gpu);
  }
  nx_tensor_free(h32); nx_tensor_free(f_cpu);
}

}  // namespace
