/* A GPT-2 124M training step through the C API, as a user's program runs it: 12 layers, 12 heads,
 * 768 wide, context 1024, vocab 50257, tied embeddings, GELU-tanh MLP, LayerNorm, learned
 * positions; AdamW (fused multi-tensor), random tokens, a fresh batch every step (data loading is
 * not measured: the batches are made on the device before timing). Parameters are f32 in both
 * modes: "f32" runs every op in f32 with TF32 matmuls on; "bf16" runs the step under
 * nx_autocast_push(NX_CUDA, NX_BF16) (matmuls and attention in bf16, norms/softmax/loss in f32).
 * bench/train_gpt2.py runs it beside its PyTorch twin and prints the table of ratios.
 *
 * usage: train_gpt2 [batch=8] [steps=20] [f32|bf16] [seq=1024] [phases]
 * Prints: RESULT impl=nexus mode=M batch=B seq=T ms=X tokens_per_s=Y peak_gib=Z device_allocs=N
 *         syncs=S loss0=L0 loss=L
 * "phases" also times forward / backward / optimizer separately (one device sync after each, so
 * that line's sum is a little above the plain step time). */
#include "example_util.h"

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? atoll(argv[1]) : 8, steps = argc > 2 ? atoll(argv[2]) : 20;
  const bool bf16 = argc > 3 && !strcmp(argv[3], "bf16");
  const int64_t seq = argc > 4 ? atoll(argv[4]) : 1024, vocab = 50257, warmup = 3, batches = 4;
  const bool phases = argc > 5 && !strcmp(argv[5], "phases");
  if (nx_cuda_device_count() == 0) {
    fprintf(stderr, "train_gpt2 needs a CUDA device\n");
    return 2;
  }
  const nx_device dev = {NX_CUDA, 0};
  CHECK(nx_cuda_set_tf32(true));
  CHECK(nx_random_set_seed(1));
  const nx_transformer_config cfg = {.struct_size = sizeof cfg, .vocab = vocab, .context = 1024, .dim = 768,
                                     .layers = 12, .heads = 12, .tie_embeddings = true,
                                     .activation = NX_ACTIVATION_GELU_TANH};
  nx_module model;
  CHECK(nx_gpt_create(&model, &cfg, NX_F32, dev, NULL));
  nx_tensor* params;
  size_t nparams;
  CHECK(nx_module_parameters(model, &params, &nparams));
  nx_optimizer opt;
  nx_adam_options adamw = NX_ADAM_OPTIONS_DEFAULT;
  adamw.lr = 3e-4, adamw.beta2 = 0.95, adamw.weight_decay = 0.1, adamw.decoupled_weight_decay = true;
  CHECK(nx_adam_create(&opt, params, nparams, &adamw));

  /* A few batches of random tokens, cycled (each [batch, seq + 1]: inputs and shifted targets). */
  nx_tensor xs[4], ys[4];
  int64_t* ids = (int64_t*)malloc((size_t)(batch * (seq + 1)) * sizeof(int64_t));
  uint64_t s = 88172645463325252ULL;
  for (int b = 0; b < batches; ++b) {
    for (int64_t i = 0; i < batch * (seq + 1); ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      ids[i] = (int64_t)(s % (uint64_t)vocab);
    }
    int64_t shape[2] = {batch, seq + 1}, flat[1] = {batch * seq};
    nx_tensor all, y;
    CHECK(nx_tensor_from_data(&all, ids, shape, 2, NX_I64, dev, NULL));
    CHECK(nx_slice(&xs[b], all, 1, 0, seq, 1, NULL));
    CHECK(nx_slice(&y, all, 1, 1, seq + 1, 1, NULL));
    CHECK(nx_reshape(&ys[b], y, flat, 1, NULL));
    nx_tensor_free(all);
    nx_tensor_free(y);
  }
  free(ids);

  int64_t logits_flat[2] = {batch * seq, vocab};
  double start = 0, t_fwd = 0, t_bwd = 0, t_opt = 0, loss0 = 0, loss_last = 0;
  uint64_t allocs_at_start = 0, syncs_at_start = 0;
  nx_cuda_memory_stats mem;
  memset(&mem, 0, sizeof mem);
  mem.struct_size = sizeof mem;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      CHECK(nx_stream_synchronize(NULL));
      CHECK(nx_cuda_get_memory_stats(0, &mem));
      allocs_at_start = mem.num_device_allocs;
      CHECK(nx_cuda_reset_peak_memory(0));  /* the steady state's peak, as the twin measures it */
      CHECK(nx_runtime_get_host_syncs(&syncs_at_start));
      start = ex_now();
    }
    const int b = (int)(step % batches);
    double t0 = ex_now();
    nx_tensor logits, lf, loss;
    if (bf16) CHECK(nx_autocast_push(NX_CUDA, NX_BF16, true));
    CHECK(nx_module_forward(&logits, model, xs[b], NULL));
    CHECK(nx_reshape(&lf, logits, logits_flat, 2, NULL));
    CHECK(nx_cross_entropy(&loss, lf, ys[b], -100, 0.0, NX_REDUCTION_MEAN, NULL));
    if (bf16) CHECK(nx_autocast_pop());
    nx_tensor_free(logits);
    nx_tensor_free(lf);
    if (phases) CHECK(nx_stream_synchronize(NULL));
    double t1 = ex_now();
    CHECK(nx_optimizer_zero_grad(opt));
    CHECK(nx_backward(loss, NULL, NULL, NULL));
    if (phases) CHECK(nx_stream_synchronize(NULL));
    double t2 = ex_now();
    CHECK(nx_optimizer_step(opt, NULL));
    if (phases) {
      CHECK(nx_stream_synchronize(NULL));
      if (step >= warmup) t_fwd += t1 - t0, t_bwd += t2 - t1, t_opt += ex_now() - t2;
    }
    /* The loss is read only on the first and last steps (a read is a host sync). */
    if (step == 0) CHECK(nx_tensor_item(loss, &loss0, NULL));
    if (step == warmup + steps - 1) CHECK(nx_tensor_item(loss, &loss_last, NULL));
    nx_tensor_free(loss);
  }
  CHECK(nx_stream_synchronize(NULL));
  const double elapsed = ex_now() - start;
  uint64_t syncs_at_end = 0;
  CHECK(nx_runtime_get_host_syncs(&syncs_at_end));
  CHECK(nx_cuda_get_memory_stats(0, &mem));
  /* The syncs of the timed steps, less the final synchronize, the last loss read and the phase
   * timings' own three synchronizes per step. */
  const double syncs_per_step =
      (double)(syncs_at_end - syncs_at_start - 2 - (phases ? 3 * (uint64_t)steps : 0)) / (double)steps;
  printf("RESULT impl=nexus mode=%s batch=%lld seq=%lld ms=%.2f tokens_per_s=%.0f peak_gib=%.2f "
         "device_allocs=%llu syncs_per_step=%.2f loss0=%.4f loss=%.4f\n",
         bf16 ? "bf16" : "f32", (long long)batch, (long long)seq, 1e3 * elapsed / (double)steps,
         (double)(steps * batch * seq) / elapsed, (double)mem.peak_allocated_bytes / (1u << 30),
         (unsigned long long)(mem.num_device_allocs - allocs_at_start), syncs_per_step, loss0, loss_last);
  if (phases)
    printf("PHASES forward_ms=%.2f backward_ms=%.2f optimizer_ms=%.2f\n", 1e3 * t_fwd / (double)steps,
           1e3 * t_bwd / (double)steps, 1e3 * t_opt / (double)steps);
  for (int b = 0; b < batches; ++b) nx_tensor_free(xs[b]), nx_tensor_free(ys[b]);
  nx_optimizer_free(opt);
  nx_tensor_array_free(params, nparams);
  nx_module_free(model);
  return 0;
}
