// A CUDA out-of-memory in the middle of a training step (issue 17): the failing call returns
// NX_ERR_OUT_OF_MEMORY, and afterwards the engine is whole: no handle or device memory leaked,
// the parameters untouched, and the next step equals the step of a twin that never failed.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "capi_test_util.hpp"
#include "nexus.h"

namespace {

const nx_device kGpu = {NX_CUDA, 0};

#define REQUIRE_GPU() \
  do { if (nx_cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; } while (0)

uint64_t allocated_bytes() {
  nx_cuda_memory_stats s = {};
  s.struct_size = sizeof s;
  EXPECT_EQ(nx_cuda_get_memory_stats(0, &s), NX_OK);
  return s.allocated_bytes;
}

struct Trainer {
  nx_module model = nullptr;
  nx_optimizer opt = nullptr;
  nx_tensor x = nullptr, y = nullptr;
  nx_tensor* params = nullptr;
  size_t nparams = 0;

  explicit Trainer(uint64_t seed) {
    nx_transformer_config cfg = {};
    cfg.struct_size = sizeof cfg;
    cfg.vocab = 512, cfg.context = 256, cfg.dim = 256, cfg.layers = 4, cfg.heads = 4;
    cfg.rms_norm = true, cfg.rope = true, cfg.swiglu = true, cfg.tie_embeddings = true;
    EXPECT_EQ(nx_random_set_seed(seed), NX_OK);
    EXPECT_EQ(nx_gpt_create(&model, &cfg, NX_F32, kGpu, nullptr), NX_OK) << nx_last_error_message();
    EXPECT_EQ(nx_module_parameters(model, &params, &nparams), NX_OK);
    nx_adam_options o = NX_ADAM_OPTIONS_DEFAULT;
    o.weight_decay = 0.1, o.decoupled_weight_decay = true;
    EXPECT_EQ(nx_adam_create(&opt, params, nparams, &o), NX_OK);
    const int64_t batch = 16, seq = 256;
    std::vector<int64_t> ids(size_t(batch * seq)), next(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 37 + 11) % 512), next[i] = int64_t((i * 13 + 5) % 512);
    const int64_t shape[2] = {batch, seq}, flat[1] = {batch * seq};
    EXPECT_EQ(nx_tensor_from_data(&x, ids.data(), shape, 2, NX_I64, kGpu, nullptr), NX_OK);
    EXPECT_EQ(nx_tensor_from_data(&y, next.data(), flat, 1, NX_I64, kGpu, nullptr), NX_OK);
  }
  ~Trainer() {
    nx_tensor_array_free(params, nparams);
    nx_optimizer_free(opt);
    nx_module_free(model);
    nx_tensor_free(x);
    nx_tensor_free(y);
  }
  // One step through the public API; the first failing call's status, with the handles it made
  // freed either way. *loss_out gets the loss of a step that succeeded.
  nx_status step(double* loss_out, std::string* failed_at) {
    nx_tensor logits = nullptr, flat = nullptr, loss = nullptr;
    const int64_t flat_shape[2] = {-1, 512};
    nx_status st = NX_OK;
    auto call = [&](nx_status s, const char* what) {
      if (st == NX_OK && s != NX_OK) st = s, *failed_at = what;
      return st == NX_OK;
    };
    call(nx_optimizer_zero_grad(opt), "zero_grad") && call(nx_module_forward(&logits, model, x, nullptr), "forward") &&
        call(nx_reshape(&flat, logits, flat_shape, 2, nullptr), "reshape") &&
        call(nx_cross_entropy(&loss, flat, y, -100, 0.0, NX_REDUCTION_MEAN, nullptr), "loss") &&
        call(nx_backward(loss, nullptr, nullptr, nullptr), "backward") &&
        call(nx_optimizer_step(opt, nullptr), "optimizer step") && call(nx_tensor_item(loss, loss_out, nullptr), "item");
    nx_tensor_free(logits);
    nx_tensor_free(flat);
    nx_tensor_free(loss);
    return st;
  }
  std::vector<float> parameter(size_t i) const { return host(params[i]); }
};

TEST(CudaOutOfMemory, InsideATrainingStepLeavesTheEngineUsable) {
  REQUIRE_GPU();
  OK(nx_runtime_set_deterministic(true));  // the twin comparison below is bit for bit
  {
    Trainer a(7), twin(7);
    double la = 0, lt = 0;
    std::string where;
    for (int s = 0; s < 2; ++s) {  // the second step runs with Adam's moments in place
      OK(nx_cuda_reset_peak_memory(0));
      const uint64_t before = allocated_bytes();
      ASSERT_EQ(a.step(&la, &where), NX_OK) << where << ": " << nx_last_error_message();
      ASSERT_EQ(twin.step(&lt, &where), NX_OK) << where << ": " << nx_last_error_message();
      ASSERT_EQ(la, lt);
      nx_cuda_memory_stats st = {};
      st.struct_size = sizeof st;
      OK(nx_cuda_get_memory_stats(0, &st));
      if (s == 1) ASSERT_GT(st.peak_allocated_bytes, before);
    }
    nx_cuda_memory_stats st = {};
    st.struct_size = sizeof st;
    OK(nx_cuda_reset_peak_memory(0));
    const uint64_t base = allocated_bytes();
    ASSERT_EQ(a.step(&la, &where), NX_OK);
    ASSERT_EQ(twin.step(&lt, &where), NX_OK);
    OK(nx_cuda_get_memory_stats(0, &st));
    const uint64_t need = st.peak_allocated_bytes - base;  // one step of one model, about

    // Leave a quarter of a step's memory free on the device, held by one filler tensor.
    OK(nx_optimizer_zero_grad(a.opt));  // the failed step's own zero_grad would free these
    const int64_t live_tensors = nx_live_handle_count(NX_HANDLE_TENSOR);
    const std::vector<float> p0 = a.parameter(0), p_last = a.parameter(a.nparams - 1);
    OK(nx_cuda_empty_cache(0));
    size_t free_bytes = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    const uint64_t before_filler = allocated_bytes();
    int64_t filler_bytes = int64_t(free_bytes) - int64_t(need / 4);
    nx_tensor filler = nullptr;
    for (int tries = 0; tries < 8 && !filler; ++tries, filler_bytes -= int64_t(need / 16)) {
      const int64_t n[1] = {filler_bytes};
      if (nx_tensor_zeros(&filler, n, 1, NX_BOOL, kGpu, nullptr) != NX_OK) filler = nullptr;
    }
    ASSERT_NE(filler, nullptr) << "could not fill the device";

    const nx_status failed = a.step(&la, &where);
    EXPECT_EQ(failed, NX_ERR_OUT_OF_MEMORY) << where << ": " << nx_last_error_message();
    EXPECT_NE(std::strstr(nx_last_error_message(), "out of memory"), nullptr) << nx_last_error_message();
    EXPECT_NE(where, "optimizer step");  // so the parameters must be as they were
    std::printf("OOM inside the step at %s: %s\n", where.c_str(), nx_last_error_message());
    nx_tensor_free(filler);

    // Nothing leaked: the failed step's tensors are gone, and the parameters are untouched.
    OK(nx_optimizer_zero_grad(a.opt));
    EXPECT_EQ(nx_live_handle_count(NX_HANDLE_TENSOR), live_tensors);
    EXPECT_EQ(allocated_bytes(), before_filler);
    EXPECT_EQ(a.parameter(0), p0);
    EXPECT_EQ(a.parameter(a.nparams - 1), p_last);

    // The next steps equal the twin's, which never failed.
    for (int s = 0; s < 2; ++s) {
      ASSERT_EQ(a.step(&la, &where), NX_OK) << where << ": " << nx_last_error_message();
      ASSERT_EQ(twin.step(&lt, &where), NX_OK) << where << ": " << nx_last_error_message();
      EXPECT_EQ(la, lt);
    }
    for (size_t i = 0; i < a.nparams; ++i) EXPECT_EQ(a.parameter(i), twin.parameter(i)) << "parameter " << i;
  }
  OK(nx_runtime_set_deterministic(false));
}

}  // namespace
