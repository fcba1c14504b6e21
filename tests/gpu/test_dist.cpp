// Communicators and data parallelism on real GPUs, through the C API. One GPU: a communicator
// of size 1 (collectives are the identity, DDP gradients equal plain backward's, error paths).
// Two or more GPUs (skipped otherwise): one thread per rank and device; collectives against a
// CPU computation, and DDP training on N GPUs against one GPU with N times the batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.hpp"
#include "nexus.h"

namespace {

#define REQUIRE_GPUS(n)                                                                           \
  do {                                                                                            \
    if (nx_cuda_device_count() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " \
                                                   << nx_cuda_device_count();                     \
  } while (0)

const nx_device kCpu = {NX_CPU, 0};
nx_device gpu(int i) { return nx_device{NX_CUDA, i}; }

nx_tensor tensor(const std::vector<float>& v, std::vector<int64_t> shape, nx_device d) {
  nx_tensor t = nullptr;
  EXPECT_EQ(nx_tensor_from_data(&t, v.data(), shape.data(), shape.size(), NX_F32, d, nullptr), NX_OK)
      << nx_last_error_message();
  return t;
}
// Runs body(rank) on one thread per rank (NCCL init and collectives block until all ranks join).
void per_rank(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}
int world() { return std::min(nx_cuda_device_count(), 8); }

TEST(Dist, CommunicatorOfSizeOneIsTheIdentity) {
  REQUIRE_GPUS(1);
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  nx_comm_id id;
  OK(nx_comm_id_create(&id));
  nx_comm c;
  OK(nx_comm_create(&c, &id, 0, 1, gpu(0)));
  int32_t rank = -1, size = -1;
  nx_device d;
  OK(nx_comm_rank(c, &rank));
  OK(nx_comm_size(c, &size));
  OK(nx_comm_device(c, &d));
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(size, 1);
  EXPECT_EQ(d.type, NX_CUDA);
  EXPECT_STREQ(getenv("NCCL_NVLS_ENABLE"), "0");

  std::vector<float> v = {1.5f, -2.f, 3.25f, 0.f, 7.f, -1.f};
  nx_tensor t = tensor(v, {3, 2}, gpu(0));
  for (nx_reduce_op op : {NX_REDUCE_SUM, NX_REDUCE_AVG, NX_REDUCE_MAX, NX_REDUCE_MIN, NX_REDUCE_PROD}) {
    OK(nx_comm_all_reduce(t, c, op, nullptr));
    EXPECT_EQ(host(t), v) << "op " << op;
  }
  OK(nx_comm_broadcast(t, c, 0, nullptr));
  EXPECT_EQ(host(t), v);
  nx_tensor g, s;
  OK(nx_comm_all_gather(&g, t, c, nullptr));
  OK(nx_comm_reduce_scatter(&s, t, c, NX_REDUCE_SUM, nullptr));
  EXPECT_EQ(host(g), v);
  EXPECT_EQ(host(s), v);
  int64_t shape[2];
  OK(nx_tensor_shape(s, shape, 2));
  EXPECT_EQ(shape[0], 3);

  // Error paths that need a live communicator.
  nx_tensor cpu_t = tensor(v, {6}, kCpu), tr, flag, scalar;
  EXPECT_EQ(nx_comm_all_reduce(cpu_t, c, NX_REDUCE_SUM, nullptr), NX_ERR_DEVICE);
  EXPECT_NE(std::string(nx_last_error_message()).find("t is on cpu:0 but the communicator is on cuda:0"), std::string::npos)
      << nx_last_error_message();
  OK(nx_transpose(&tr, t, 0, 1, nullptr));
  EXPECT_EQ(nx_comm_all_reduce(tr, c, NX_REDUCE_SUM, nullptr), NX_ERR_INVALID_ARGUMENT);
  OK(nx_gt(&flag, t, t, nullptr));
  EXPECT_EQ(nx_comm_all_reduce(flag, c, NX_REDUCE_SUM, nullptr), NX_ERR_DTYPE);
  OK(nx_comm_broadcast(flag, c, 0, nullptr));  // bool moves fine, it just cannot be summed
  EXPECT_EQ(nx_comm_broadcast(t, c, 1, nullptr), NX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nx_comm_all_reduce(t, c, (nx_reduce_op)9, nullptr), NX_ERR_INVALID_ARGUMENT);
  OK(nx_tensor_full(&scalar, nullptr, 0, 2.0, NX_F32, gpu(0), nullptr));
  nx_tensor none = nullptr;
  EXPECT_EQ(nx_comm_all_gather(&none, scalar, c, nullptr), NX_ERR_SHAPE);
  EXPECT_EQ(none, nullptr);
  nx_stream cpu_stream;
  OK(nx_stream_create(&cpu_stream, kCpu));
  EXPECT_EQ(nx_comm_all_reduce(t, c, NX_REDUCE_SUM, cpu_stream), NX_ERR_DEVICE);
  nx_ddp ddp;
  OK(nx_tensor_set_requires_grad(cpu_t, true));
  EXPECT_EQ(nx_ddp_create(&ddp, &cpu_t, 1, c, 0, nullptr), NX_ERR_DEVICE);
  OK(nx_tensor_set_requires_grad(t, true));
  nx_tensor twice[2] = {t, t};
  EXPECT_EQ(nx_ddp_create(&ddp, twice, 2, c, 0, nullptr), NX_ERR_INVALID_ARGUMENT);

  nx_stream_free(cpu_stream);
  for (nx_tensor x : {t, g, s, cpu_t, tr, flag, scalar}) nx_tensor_free(x);
  nx_comm_free(c);
  EXPECT_EQ(nx_live_handle_count(NX_HANDLE_TENSOR), 0);
}

// A two-layer MLP's gradients through DDP of size 1 (many small buckets, one unused parameter)
// equal plain backward's exactly: buckets, hooks and the averaging do not change a value.
TEST(Dist, DdpOfSizeOneGivesPlainGradients) {
  REQUIRE_GPUS(1);
  nx_random_set_seed(7);
  nx_module l1, l2, unused;
  OK(nx_linear_create(&l1, 8, 16, true, NX_F32, gpu(0), nullptr));
  OK(nx_linear_create(&l2, 16, 4, true, NX_F32, gpu(0), nullptr));
  OK(nx_linear_create(&unused, 4, 4, false, NX_F32, gpu(0), nullptr));
  std::vector<nx_tensor> params;
  for (nx_module m : {l1, l2, unused}) {
    nx_tensor* ps;
    size_t n;
    OK(nx_module_parameters(m, &ps, &n));
    for (size_t i = 0; i < n; ++i) OK(nx_tensor_retain(&params.emplace_back(), ps[i]));
    nx_tensor_array_free(ps, n);
  }
  int64_t xs[2] = {5, 8};
  nx_tensor x;
  OK(nx_tensor_randn(&x, xs, 2, NX_F32, gpu(0), nullptr));
  auto step = [&](nx_status want) {
    nx_tensor h, a, y, loss;
    EXPECT_EQ(nx_module_forward(&h, l1, x, nullptr), NX_OK);
    EXPECT_EQ(nx_tanh(&a, h, nullptr), NX_OK);
    EXPECT_EQ(nx_module_forward(&y, l2, a, nullptr), NX_OK);
    EXPECT_EQ(nx_sum(&loss, y, nullptr, 0, false, nullptr), NX_OK);
    for (nx_tensor p : params) EXPECT_EQ(nx_tensor_zero_grad(p), NX_OK);
    EXPECT_EQ(nx_backward(loss, nullptr, NULL, nullptr), want) << nx_last_error_message();
    for (nx_tensor t : {h, a, y, loss}) nx_tensor_free(t);
  };
  auto grads = [&] {
    std::vector<std::vector<float>> out;
    for (nx_tensor p : params) {
      nx_tensor g;
      EXPECT_EQ(nx_tensor_grad(&g, p), NX_OK);
      out.push_back(g ? host(g) : std::vector<float>{});
      nx_tensor_free(g);
    }
    return out;
  };
  step(NX_OK);
  auto plain = grads();
  plain.back().assign(16, 0.f);  // DDP: a parameter without a gradient counts as zero

  nx_comm_id id;
  nx_comm c;
  OK(nx_comm_id_create(&id));
  OK(nx_comm_create(&c, &id, 0, 1, gpu(0)));
  nx_ddp ddp;
  OK(nx_ddp_create(&ddp, params.data(), params.size(), c, 64, nullptr));  // 4 buckets
  size_t buckets = 0;
  OK(nx_ddp_bucket_count(ddp, &buckets));
  EXPECT_GE(buckets, 3u);
  for (int rep = 0; rep < 2; ++rep) {  // finish resets the buckets for the next step
    step(NX_OK);
    OK(nx_ddp_finish(ddp, nullptr));
    EXPECT_EQ(grads(), plain) << "step " << rep;
  }
  step(NX_OK);
  step(NX_ERR_STATE);  // a second backward before nx_ddp_finish is refused
  EXPECT_NE(std::string(nx_last_error_message()).find("call nx_ddp_finish after every backward"), std::string::npos);
  nx_ddp_free(ddp);
  nx_comm_free(c);
  for (nx_tensor p : params) nx_tensor_free(p);
  nx_tensor_free(x);
  for (nx_module m : {l1, l2, unused}) nx_module_free(m);
}

TEST(Dist, CollectivesMatchACpuComputation) {
  REQUIRE_GPUS(2);
  const int n = world();
  const int64_t len = 1000 * n + 8 * n;  // divisible by n, not a round size
  auto value = [](int r, int64_t i) { return float((r + 1) * ((i * 37) % 101) - 50) / 16.f; };
  nx_comm_id id;
  OK(nx_comm_id_create(&id));
  std::vector<std::vector<float>> reduced(n), gathered(n), scattered(n), bcast(n);
  per_rank(n, [&](int r) {
    nx_comm c;
    ASSERT_EQ(nx_comm_create(&c, &id, r, n, gpu(r)), NX_OK) << nx_last_error_message();
    std::vector<float> v(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) v[size_t(i)] = value(r, i);
    nx_tensor t = tensor(v, {len}, gpu(r)), b = tensor(v, {len}, gpu(r)), g, s;
    ASSERT_EQ(nx_comm_reduce_scatter(&s, t, c, NX_REDUCE_SUM, nullptr), NX_OK) << nx_last_error_message();
    ASSERT_EQ(nx_comm_all_gather(&g, t, c, nullptr), NX_OK) << nx_last_error_message();
    ASSERT_EQ(nx_comm_all_reduce(t, c, NX_REDUCE_SUM, nullptr), NX_OK) << nx_last_error_message();
    ASSERT_EQ(nx_comm_broadcast(b, c, n - 1, nullptr), NX_OK) << nx_last_error_message();
    reduced[r] = host(t);
    gathered[r] = host(g);
    scattered[r] = host(s);
    bcast[r] = host(b);
    for (nx_tensor x : {t, b, g, s}) nx_tensor_free(x);
    nx_comm_free(c);
  });
  std::vector<float> sum(static_cast<size_t>(len), 0.f);
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < len; ++i) sum[size_t(i)] += value(r, i);  // exact: multiples of 1/16
  const int64_t block = len / n;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(reduced[r], sum) << "all_reduce on rank " << r;
    ASSERT_EQ(gathered[r].size(), size_t(len * n));
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < len; i += 97) ASSERT_EQ(gathered[r][size_t(q * len + i)], value(q, i)) << r << " " << q;
    ASSERT_EQ(scattered[r].size(), size_t(block));
    for (int64_t i = 0; i < block; ++i) ASSERT_EQ(scattered[r][size_t(i)], sum[size_t(r * block + i)]) << r;
    for (int64_t i = 0; i < len; i += 97) ASSERT_EQ(bcast[r][size_t(i)], value(n - 1, i)) << r;
  }
}

// ---------------------------------------------------------------- training equivalence
struct Gpt {
  nx_module model = nullptr;
  nx_optimizer opt = nullptr;
  nx_tensor* params = nullptr;
  size_t nparams = 0;
};
constexpr int64_t kVocab = 64, kSeq = 16, kBatch = 4;
const nx_adam_options kAdamW = {sizeof(nx_adam_options), 3e-3, 0.9, 0.95, 1e-8, 0.0, true};
Gpt make_gpt(nx_device d, uint64_t seed) {
  nx_transformer_config cfg = {sizeof(nx_transformer_config), kVocab, kSeq, 32, 2, 2, 0, 0,
                               false, true, true, true, true, 0.0};
  Gpt g;
  nx_random_set_seed(seed);
  EXPECT_EQ(nx_gpt_create(&g.model, &cfg, NX_F32, d, nullptr), NX_OK) << nx_last_error_message();
  EXPECT_EQ(nx_module_parameters(g.model, &g.params, &g.nparams), NX_OK);
  EXPECT_EQ(nx_adam_create(&g.opt, g.params, g.nparams, &kAdamW), NX_OK);
  return g;
}
void free_gpt(Gpt& g) {
  nx_optimizer_free(g.opt);
  nx_tensor_array_free(g.params, g.nparams);
  nx_module_free(g.model);
}
nx_tensor corpus() {
  std::vector<int64_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * i * 7 + i * 13) % kVocab);  // learnable pattern
  int64_t n = int64_t(ids.size());
  nx_tensor t = nullptr;
  EXPECT_EQ(nx_tensor_from_data(&t, ids.data(), &n, 1, NX_I64, kCpu, nullptr), NX_OK);
  return t;
}
// One step; returns the loss tensor (mean over this rank's rows), already backpropagated.
nx_tensor forward_backward(Gpt& g, nx_text_loader loader, nx_device d, int64_t batch) {
  nx_tensor x, y, logits, flat, yflat, loss = nullptr;
  EXPECT_EQ(nx_text_loader_next(&x, &y, loader, d, nullptr), NX_OK);
  EXPECT_EQ(nx_module_forward(&logits, g.model, x, nullptr), NX_OK) << nx_last_error_message();
  int64_t fs[2] = {batch * kSeq, kVocab}, ys[1] = {batch * kSeq};
  EXPECT_EQ(nx_reshape(&flat, logits, fs, 2, nullptr), NX_OK);
  EXPECT_EQ(nx_reshape(&yflat, y, ys, 1, nullptr), NX_OK);
  EXPECT_EQ(nx_cross_entropy(&loss, flat, yflat, -100, 0.0, NX_REDUCTION_MEAN, nullptr), NX_OK);
  EXPECT_EQ(nx_optimizer_zero_grad(g.opt), NX_OK);
  EXPECT_EQ(nx_backward(loss, nullptr, NULL, nullptr), NX_OK) << nx_last_error_message();
  for (nx_tensor t : {x, y, logits, flat, yflat}) nx_tensor_free(t);
  return loss;
}

TEST(Dist, DataParallelMatchesOneGpuWithNTimesTheBatch) {
  REQUIRE_GPUS(2);
  const int n = world(), steps = 20;
  nx_tensor tokens = corpus();

  std::vector<double> want;
  {
    Gpt g = make_gpt(gpu(0), 99);
    nx_text_loader loader;
    OK(nx_text_loader_create(&loader, tokens, kBatch * n, kSeq, 5));
    for (int s = 0; s < steps; ++s) {
      nx_tensor loss = forward_backward(g, loader, gpu(0), kBatch * n);
      double l;
      OK(nx_tensor_item(loss, &l, nullptr));
      want.push_back(l);
      OK(nx_optimizer_step(g.opt, nullptr));
      nx_tensor_free(loss);
    }
    nx_text_loader_free(loader);
    free_gpt(g);
  }

  // Models are made on the main thread (the generator is process-wide); ranks > 0 get other
  // initial values, which the broadcast in nx_ddp_create must overwrite.
  std::vector<Gpt> models;
  for (int r = 0; r < n; ++r) models.push_back(make_gpt(gpu(r), r == 0 ? 99 : 1000 + uint64_t(r)));
  nx_comm_id id;
  OK(nx_comm_id_create(&id));
  std::vector<double> got;
  per_rank(n, [&](int r) {
    Gpt& g = models[size_t(r)];
    nx_comm c;
    ASSERT_EQ(nx_comm_create(&c, &id, r, n, gpu(r)), NX_OK) << nx_last_error_message();
    nx_ddp ddp;
    ASSERT_EQ(nx_ddp_create(&ddp, g.params, g.nparams, c, 1 << 16, nullptr), NX_OK) << nx_last_error_message();
    nx_text_loader loader;
    ASSERT_EQ(nx_text_loader_create(&loader, tokens, kBatch, kSeq, 5), NX_OK);
    ASSERT_EQ(nx_text_loader_shard(loader, r, n), NX_OK);
    for (int s = 0; s < steps; ++s) {
      nx_tensor loss = forward_backward(g, loader, gpu(r), kBatch), mean;
      ASSERT_EQ(nx_ddp_finish(ddp, nullptr), NX_OK) << nx_last_error_message();
      ASSERT_EQ(nx_optimizer_step(g.opt, nullptr), NX_OK);
      ASSERT_EQ(nx_clone(&mean, loss, nullptr), NX_OK);
      ASSERT_EQ(nx_comm_all_reduce(mean, c, NX_REDUCE_AVG, nullptr), NX_OK) << nx_last_error_message();
      double l;
      ASSERT_EQ(nx_tensor_item(mean, &l, nullptr), NX_OK);
      if (r == 0) got.push_back(l);
      nx_tensor_free(loss);
      nx_tensor_free(mean);
    }
    nx_text_loader_free(loader);
    nx_ddp_free(ddp);
    nx_comm_free(c);
  });
  for (auto& g : models) free_gpt(g);
  nx_tensor_free(tokens);
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) EXPECT_NEAR(got[s], want[s], 2e-3 * std::max(1.0, want[s])) << "step " << s;
  EXPECT_LT(want.back(), want.front() - 0.1);  // it learned something, so the comparison means something
}

}  // namespace
