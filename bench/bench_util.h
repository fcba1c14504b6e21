/* Shared by the C benchmark drivers: the timing loop and the JSON line they print. Each driver
 * defines `static nx_stream g_stream;`, the stream TIME_IT synchronizes. */
#ifndef NEXUS_BENCH_UTIL_H
#define NEXUS_BENCH_UTIL_H
#include <stdio.h>

#include "example_util.h" /* CHECK, ex_now */

/* Runs body `iters` times after `warmup` runs; seconds per iteration (wall clock between two
 * synchronizations of g_stream). */
#define TIME_IT(seconds, warmup, iters, body)       \
  do {                                              \
    for (int w_ = 0; w_ < (warmup); ++w_) { body; } \
    CHECK(nx_stream_synchronize(g_stream));         \
    double t0_ = ex_now();                          \
    for (int i_ = 0; i_ < (iters); ++i_) { body; }  \
    CHECK(nx_stream_synchronize(g_stream));         \
    (seconds) = (ex_now() - t0_) / (iters);         \
  } while (0)

static inline void report(const char* name, double seconds, double bytes, double flops) {
  printf("{\"name\": \"%s\", \"seconds\": %.9g, \"bytes\": %.17g, \"flops\": %.17g}\n", name, seconds, bytes, flops);
  fflush(stdout);
}

/* The example_util.h size called name; exits with status 2 naming the sizes when there is none. */
static inline const ExGptSize* bench_gpt_size(const char* name) {
  const ExGptSize* sz = ex_gpt_size(name);
  if (!sz) {
    fprintf(stderr, "unknown size %s (small, bench, gpt2, cpu, gpu)\n", name);
    exit(2);
  }
  return sz;
}

/* A GPT of the named size with AdamW (lr and betas of the size; weight decay 0.1), from seed 1,
 * as the training benchmarks build it; bf16 runs its steps under autocast. */
static inline ExGptTrainer bench_gpt_model(const ExGptSize* sz, nx_device dev, bool bf16) {
  ExGptTrainer m = {0};
  CHECK(nx_random_set_seed(1));
  nx_transformer_config cfg = ex_gpt_config(sz);
  CHECK(nx_gpt_create(&m.model, &cfg, NX_F32, dev, NULL));
  CHECK(nx_module_parameters(m.model, &m.params, &m.nparams));
  nx_adam_options adamw = NX_ADAM_OPTIONS_DEFAULT;
  adamw.lr = sz->lr, adamw.beta2 = 0.95, adamw.weight_decay = 0.1, adamw.decoupled_weight_decay = true;
  CHECK(nx_adam_create(&m.opt, m.params, m.nparams, &adamw));
  m.vocab = sz->vocab;
  m.bf16 = bf16;
  return m;
}

static inline void bench_gpt_free(ExGptTrainer* m) {
  nx_optimizer_free(m->opt);
  nx_tensor_array_free(m->params, m->nparams);
  nx_module_free(m->model);
}

/* n batches of random tokens: xs[b] [batch, context] and ys[b] its next tokens, flat
 * [batch * context]; uploaded from the host, so their bounds are known (no range check reads
 * the device in the step), as a data loader's batches are. */
static inline void bench_token_batches(const ExGptSize* sz, nx_device dev, int n, nx_tensor* xs, nx_tensor* ys) {
  const int64_t count = sz->batch * sz->context;
  int64_t *xh = (int64_t*)malloc((size_t)count * sizeof(int64_t)), *yh = (int64_t*)malloc((size_t)count * sizeof(int64_t));
  uint64_t r = 88172645463325252ULL;
  for (int b = 0; b < n; ++b) {
    for (int64_t row = 0; row < sz->batch; ++row)
      for (int64_t t = 0; t <= sz->context; ++t) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        const int64_t id = (int64_t)(r % (uint64_t)sz->vocab);
        if (t < sz->context) xh[row * sz->context + t] = id;
        if (t > 0) yh[row * sz->context + t - 1] = id;
      }
    const int64_t shape[2] = {sz->batch, sz->context}, flat[1] = {count};
    CHECK(nx_tensor_from_data(&xs[b], xh, shape, 2, NX_I64, dev, NULL));
    CHECK(nx_tensor_from_data(&ys[b], yh, flat, 1, NX_I64, dev, NULL));
  }
  free(xh), free(yh);
}

#endif
