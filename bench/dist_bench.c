/* Data-parallel throughput of a GPT-2 124M-sized training step (12 layers, dim 768, 12 heads,
 * context 1024, vocab 50257, LayerNorm + GELU + learned positions + tied embeddings), AdamW,
 * random tokens (data loading is not measured). Prints one line per run for dist_bench.sh:
 *   RESULT gpus=N ddp=0|1 batch=B seq=T tokens_per_s=X step_ms=Y
 * usage: dist_bench [--gpus N] [batch_per_gpu=8] [steps=20] [f32|bf16] [seq=1024]
 * Without --gpus it runs one process without a communicator (the baseline); --gpus N starts N
 * ranks (dist_util.h) that average gradients through nx_ddp. f32 uses TF32 matmuls. */
#include "dist_util.h"

int main(int argc, char** argv) {
  int gpus = ex_take_gpus(&argc, argv);
  if (gpus > 0 && !getenv("NEXUS_RANK")) return ex_launch_ranks(argv, gpus);
  const int64_t batch = argc > 1 ? atoll(argv[1]) : 8, steps = argc > 2 ? atoll(argv[2]) : 20;
  const nx_dtype dtype = argc > 3 && !strcmp(argv[3], "bf16") ? NX_BF16 : NX_F32;
  const int64_t seq = argc > 4 ? atoll(argv[4]) : 1024, vocab = 50257, warmup = 3;
  if (nx_cuda_device_count() == 0) {
    fprintf(stderr, "dist_bench needs a CUDA device\n");
    return 2;
  }
  nx_comm comm = ex_rank_comm();
  int32_t rank = 0, world = 1;
  nx_device dev = {NX_CUDA, 0};
  if (comm) {
    CHECK(nx_comm_rank(comm, &rank));
    CHECK(nx_comm_size(comm, &world));
    CHECK(nx_comm_device(comm, &dev));
  }
  nx_cuda_set_tf32(true);
  nx_random_set_seed(1);
  nx_transformer_config cfg = {sizeof(nx_transformer_config), vocab, seq, 768, 12, 12, 0, 0,
                               false, false, false, false, true, 0.0};
  nx_module model;
  CHECK(nx_gpt_create(&model, &cfg, dtype, dev, NULL));
  nx_tensor* params;
  size_t nparams;
  CHECK(nx_module_parameters(model, &params, &nparams));
  nx_optimizer opt;
  const nx_adam_options adamw = {sizeof adamw, 3e-4, 0.9, 0.95, 1e-8, 0.1, true};
  CHECK(nx_adam_create(&opt, params, nparams, &adamw));
  nx_ddp ddp = NULL;
  if (comm) CHECK(nx_ddp_create(&ddp, params, nparams, comm, 0, NULL));

  /* One fixed batch of random tokens per rank. */
  int64_t* ids = (int64_t*)malloc((size_t)(batch * (seq + 1)) * sizeof(int64_t));
  uint64_t s = 88172645463325252ULL + (uint64_t)rank;
  for (int64_t i = 0; i < batch * (seq + 1); ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    ids[i] = (int64_t)(s % (uint64_t)vocab);
  }
  int64_t all_shape[2] = {batch, seq + 1}, flat[2] = {batch * seq, vocab}, yflat[1] = {batch * seq};
  nx_tensor all, x, y, yf;
  CHECK(nx_tensor_from_data(&all, ids, all_shape, 2, NX_I64, dev, NULL));
  CHECK(nx_slice(&x, all, 1, 0, seq, 1, NULL));
  CHECK(nx_slice(&y, all, 1, 1, seq + 1, 1, NULL));
  CHECK(nx_reshape(&yf, y, yflat, 1, NULL));
  free(ids);

  double start = 0;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      CHECK(nx_stream_synchronize(NULL));
      start = ex_now();
    }
    nx_tensor logits, lf, loss;
    CHECK(nx_module_forward(&logits, model, x, NULL));
    CHECK(nx_reshape(&lf, logits, flat, 2, NULL));
    CHECK(nx_cross_entropy(&loss, lf, yf, -100, 0.0, NX_REDUCTION_MEAN, NULL));
    CHECK(nx_optimizer_zero_grad(opt));
    CHECK(nx_backward(loss, NULL, NULL, NULL));
    if (ddp) CHECK(nx_ddp_finish(ddp, NULL));
    CHECK(nx_optimizer_step(opt, NULL));
    if (step == 0 && rank == 0) {
      double l;
      CHECK(nx_tensor_item(loss, &l, NULL));
      fprintf(stderr, "first loss %.3f (uniform: %.3f)\n", l, log((double)vocab));
    }
    nx_tensor_free(logits); nx_tensor_free(lf); nx_tensor_free(loss);
  }
  CHECK(nx_stream_synchronize(NULL));
  double elapsed = ex_now() - start;
  if (rank == 0)
    printf("RESULT gpus=%d ddp=%d batch=%lld seq=%lld tokens_per_s=%.0f step_ms=%.2f\n", world, comm != NULL,
           (long long)batch, (long long)seq, (double)(steps * batch * seq * world) / elapsed, 1e3 * elapsed / (double)steps);
  nx_tensor_free(all); nx_tensor_free(x); nx_tensor_free(y); nx_tensor_free(yf);
  nx_ddp_free(ddp);
  nx_optimizer_free(opt);
  nx_tensor_array_free(params, nparams);
  nx_module_free(model);
  nx_comm_free(comm);
  return 0;
}
