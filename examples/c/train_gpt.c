/* Trains a small GPT on a real English corpus (Moby Dick by default) through the C API, then
 * writes text with the KV cache. Reports validation loss before and after, shows a progress bar
 * (step, loss, tokens/s, ETA), evaluates 20 times and keeps the checkpoint with the best
 * validation loss (stopping early if 3 evaluations in a row do not improve on it), saves the loss
 * curves as CSV (with the command that plots them: scripts/plot.py), and prints a sample of at
 * least 200 words with the share of them that are words of the corpus ("real words: 91.8%").
 * The default run takes about 4 minutes on a 2-core CPU, tokenizer training included (size
 * "cpu", 3000 steps); on a GPU, size "gpu" is larger, regularized and trained under bf16
 * autocast (docs/decisions.md, sessions 9 and 10, has the tuning).
 *   usage: train_gpt [--gpus N] [--compile] [corpus.txt] [steps, 0: the default] [out_dir]
 * --gpus N trains data-parallel on N GPUs, one process per GPU (dist_util.h), each with the
 * batch below, so the global batch is N times larger; rank 0 prints and saves.
 * --compile runs each training step through a compiled plan (nx_plan_run: traced once, then
 * replayed without dispatch; docs/compiler.md).
 * Environment: NEXUS_DEVICE=cpu forces the CPU; NEXUS_GPT_SIZE=cpu|gpu|small|bench|gpt2 picks the
 * model and its default steps (example_util.h; default cpu on the CPU, gpu on a GPU). */
#include <sys/stat.h>

#include "dist_util.h"


/* The mean loss over the same `batches` validation batches every time (a loader made afresh with
 * one seed), so that evaluations can be compared to pick the best checkpoint. */
static double evaluate(nx_module model, nx_tensor val_ids, int64_t batch, int64_t context, nx_device dev, int batches) {
  nx_text_loader val;
  CHECK(nx_text_loader_create(&val, val_ids, batch, context, 2));
  CHECK(nx_module_set_training(model, false));
  nx_autograd_set_enabled(false);
  double total = 0;
  for (int i = 0; i < batches; ++i) {
    nx_tensor x, y, logits, flat, yflat, loss;
    CHECK(nx_text_loader_next(&x, &y, val, dev, NULL));
    CHECK(nx_module_forward(&logits, model, x, NULL));
    int64_t shape[3];
    CHECK(nx_tensor_shape(logits, shape, 3));
    int64_t fs[2] = {shape[0] * shape[1], shape[2]}, ys[1] = {shape[0] * shape[1]};
    CHECK(nx_reshape(&flat, logits, fs, 2, NULL));
    CHECK(nx_reshape(&yflat, y, ys, 1, NULL));
    CHECK(nx_cross_entropy(&loss, flat, yflat, -100, 0.0, NX_REDUCTION_MEAN, NULL));
    double l;
    CHECK(nx_tensor_item(loss, &l, NULL));
    total += l;
    nx_tensor_free(x); nx_tensor_free(y); nx_tensor_free(logits); nx_tensor_free(flat); nx_tensor_free(yflat);
    nx_tensor_free(loss);
  }
  nx_autograd_set_enabled(true);
  CHECK(nx_module_set_training(model, true));
  nx_text_loader_free(val);
  return total / batches;
}

/* The words of a text for the real-word figure: runs of ASCII letters, lowercased; anything else
 * separates them. word[i] points into chars (NUL-terminated copies); free with free_words. */
typedef struct {
  char* chars;
  char** word;
  size_t count;
} Words;
static int ascii_letter(char c) { return ((unsigned char)c | 32) >= 'a' && ((unsigned char)c | 32) <= 'z'; }
static Words split_words(const char* text, size_t len) {
  /* a word takes its letters and one separator (or the final NUL): len + 1 bytes hold them all */
  Words w = {(char*)malloc(len + 1), (char**)malloc((len / 2 + 1) * sizeof(char*)), 0};
  char* out = w.chars;
  for (size_t i = 0; i < len;) {
    if (!ascii_letter(text[i])) {
      ++i;
      continue;
    }
    w.word[w.count++] = out;
    for (; i < len && ascii_letter(text[i]); ++i) *out++ = (char)(text[i] | 32);
    *out++ = 0;
  }
  return w;
}
static void free_words(Words w) { free(w.chars), free(w.word); }
static int compare_words(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

int main(int argc, char** argv) {
  const int compile = ex_take_flag(&argc, argv, "--compile");
  int gpus = ex_take_gpus(&argc, argv);
  if (gpus > 0 && compile) {
    fprintf(stderr, "--compile and --gpus do not combine: a plan cannot capture DDP's collectives\n");
    return 2;
  }
  if (gpus > 0 && !getenv("NEXUS_RANK")) return ex_launch_ranks(argv, gpus);
  nx_comm comm = ex_rank_comm();
  int32_t rank = 0, world = 1;
  if (comm) {
    CHECK(nx_comm_rank(comm, &rank));
    CHECK(nx_comm_size(comm, &world));
  }
  const char* corpus_path = argc > 1 ? argv[1] : "data/mobydick.txt";
  const char* out_dir = argc > 3 ? argv[3] : "out";
  nx_device dev = ex_default_device();
  if (comm) CHECK(nx_comm_device(comm, &dev));
  if (rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;  /* rank 0 speaks for all */
  int gpu = dev.type == NX_CUDA;
  const char* size_name = getenv("NEXUS_GPT_SIZE") ? getenv("NEXUS_GPT_SIZE") : gpu ? "gpu" : "cpu";
  if (!ex_gpt_size(size_name)) {
    fprintf(stderr, "NEXUS_GPT_SIZE=%s: expected cpu, gpu, small, bench, medium or gpt2\n", size_name);
    return 2;
  }
  const ExGptSize sz = *ex_gpt_size(size_name);
  int64_t steps = argc > 2 ? atoll(argv[2]) : 0;
  if (steps <= 0) steps = sz.steps; /* 0 (or none): the size's default, so an out_dir can follow */
  mkdir(out_dir, 0755);
  nx_random_set_seed(1234);

  size_t len;
  char* text = (char*)ex_read_file(corpus_path, &len);
  if (!text) {
    fprintf(stderr, "cannot read %s (scripts/get_data.sh extracts Moby Dick into data/)\n", corpus_path);
    return 1;
  }
  double t0 = ex_now();
  nx_tokenizer tok;
  CHECK(nx_tokenizer_bpe_train(&tok, text, len, sz.vocab));
  char tok_path[1024];
  snprintf(tok_path, sizeof tok_path, "%s/tokenizer.txt", out_dir);
  if (rank == 0) CHECK(nx_tokenizer_save(tok, tok_path));
  nx_tensor ids;
  CHECK(nx_tokenizer_encode(&ids, tok, text, len));
  int64_t ntok;
  CHECK(nx_tensor_numel(ids, &ntok));
  printf("corpus %s: %zu bytes -> %lld BPE tokens (vocab %lld, trained in %.1f s)\n", corpus_path, len, (long long)ntok,
         (long long)sz.vocab, ex_now() - t0);
  Words corpus_words = split_words(text, len); /* sorted, for bsearch: which sampled words are real */
  qsort(corpus_words.word, corpus_words.count, sizeof(char*), compare_words);
  free(text);

  int64_t split = ntok * 9 / 10;
  nx_tensor train_ids, val_ids;
  CHECK(nx_slice(&train_ids, ids, 0, 0, split, 1, NULL));
  CHECK(nx_slice(&val_ids, ids, 0, split, ntok, 1, NULL));
  nx_text_loader train;
  CHECK(nx_text_loader_create(&train, train_ids, sz.batch, sz.context, 1));
  CHECK(nx_text_loader_shard(train, rank, world));

  nx_transformer_config cfg = ex_gpt_config(&sz);
  nx_module model;
  CHECK(nx_gpt_create(&model, &cfg, NX_F32, dev, NULL));
  nx_tensor* params;
  size_t nparams;
  CHECK(nx_module_parameters(model, &params, &nparams));
  int64_t count = 0;
  for (size_t i = 0; i < nparams; ++i) {
    int64_t n;
    CHECK(nx_tensor_numel(params[i], &n));
    count += n;
  }
  printf("GPT %s: %lld layers, dim %lld, %lld heads, context %lld, %.2fM parameters, dropout %.2f, on %s x %d "
         "(batch %lld per rank); %lld steps = %.1f epochs of the %lld training tokens\n",
         size_name, (long long)sz.layers, (long long)sz.dim, (long long)sz.heads, (long long)sz.context, count / 1e6,
         sz.dropout, gpu ? "cuda" : "cpu", world, (long long)sz.batch, (long long)steps,
         (double)steps * (double)(sz.batch * sz.context * world) / (double)split, (long long)split);
  /* Same initial weights everywhere (broadcast from rank 0); gradients averaged during backward. */
  nx_ddp ddp = NULL;
  if (comm) CHECK(nx_ddp_create(&ddp, params, nparams, comm, 0, NULL));
  nx_optimizer opt;
  const nx_adam_options adamw = {sizeof adamw, sz.lr, 0.9, 0.95, 1e-8, sz.weight_decay, true};
  CHECK(nx_adam_create(&opt, params, nparams, &adamw));
  /* On a GPU the step runs under bf16 autocast, as people train on such GPUs (the parameters and
   * the optimizer stay f32); the CPU keeps f32. */
  ExGptTrainer trainer = {model, opt, params, nparams, sz.vocab, gpu != 0};
  nx_plan plan = NULL;
  if (compile) CHECK(nx_plan_create(&plan, ex_gpt_train_step, &trainer, 1, NULL));

  /* 20 evaluations: a curve that shows where validation turns, and a best checkpoint chosen
   * closely, for about 5% of the training time. Each reads at least 8 batches and 8192 tokens,
   * so that a small batch does not make it noisy. Training stops early when `patience`
   * evaluations in a row find no better validation loss. */
  const int64_t eval_tokens = 8192, batch_tokens = sz.batch * sz.context;
  const int evals = 20, patience = 3;
  const int eval_batches = batch_tokens * 8 >= eval_tokens ? 8 : (int)((eval_tokens + batch_tokens - 1) / batch_tokens);
  const int eval_every = steps / evals > 0 ? (int)(steps / evals) : 1;
  double val_before = evaluate(model, val_ids, sz.batch, sz.context, dev, eval_batches);
  printf("validation loss before training: %.4f (uniform guess: %.4f)\n", val_before, log((double)sz.vocab));
  /* The curves, at x = the optimizer steps taken when the loss was measured: the training loss
   * of every step (before its update), the validation loss before training and every eval_every
   * steps. */
  double* train_x = (double*)malloc((size_t)steps * sizeof(double));
  double* train_curve = (double*)malloc((size_t)steps * sizeof(double));
  double* val_x = (double*)malloc((size_t)(steps + 1) * sizeof(double));
  double* val_curve = (double*)malloc((size_t)(steps + 1) * sizeof(double));
  int nval = 0;
  val_x[nval] = 0, val_curve[nval++] = val_before;
  /* The checkpoint kept is the best by validation loss, not the last: a model that starts to
   * overfit late in training is not the one to keep. The last one is saved beside it. */
  char best_path[1024];
  snprintf(best_path, sizeof best_path, "%s/gpt_checkpoint.safetensors", out_dir);
  double best_val = INFINITY;
  int64_t best_step = -1;
  double start = ex_now(), smooth = 0;
  for (int64_t step = 0; step < steps; ++step) {
    nx_tensor x, y, loss;
    CHECK(nx_text_loader_next(&x, &y, train, dev, NULL));
    CHECK(nx_optimizer_set_lr(opt, nx_lr_cosine_warmup(sz.lr, step, steps / 20 + 1, steps, sz.lr * 0.1)));
    const nx_tensor batch[2] = {x, y};
    if (plan) {
      CHECK(nx_plan_run(plan, &loss, 1, batch, 2, NULL));
    } else if (!ddp) {
      CHECK(ex_gpt_train_step(&loss, 1, batch, 2, &trainer));
    } else { /* data-parallel: the gradients are averaged between backward and clipping */
      nx_tensor logits, flat, yflat;
      if (trainer.bf16) CHECK(nx_autocast_push(NX_CUDA, NX_BF16, true));
      CHECK(nx_module_forward(&logits, model, x, NULL));
      int64_t fs[2] = {sz.batch * sz.context, sz.vocab}, ys[1] = {sz.batch * sz.context};
      CHECK(nx_reshape(&flat, logits, fs, 2, NULL));
      CHECK(nx_reshape(&yflat, y, ys, 1, NULL));
      CHECK(nx_cross_entropy(&loss, flat, yflat, -100, 0.0, NX_REDUCTION_MEAN, NULL));
      if (trainer.bf16) CHECK(nx_autocast_pop());
      CHECK(nx_optimizer_zero_grad(opt));
      CHECK(nx_backward(loss, NULL, NULL, NULL));
      CHECK(nx_ddp_finish(ddp, NULL));
      CHECK(nx_clip_grad_norm(NULL, params, nparams, 1.0, NULL));
      CHECK(nx_optimizer_step(opt, NULL));
      nx_tensor_free(logits), nx_tensor_free(flat), nx_tensor_free(yflat);
    }
    double l;
    if (comm) { /* the loss of the global batch: the mean of the ranks' means */
      nx_tensor mean;
      CHECK(nx_clone(&mean, loss, NULL));
      CHECK(nx_comm_all_reduce(mean, comm, NX_REDUCE_AVG, NULL));
      CHECK(nx_tensor_item(mean, &l, NULL));
      nx_tensor_free(mean);
    } else {
      CHECK(nx_tensor_item(loss, &l, NULL));
    }
    smooth = step ? 0.9 * smooth + 0.1 * l : l;
    train_x[step] = (double)step, train_curve[step] = l;
    if ((step + 1) % eval_every == 0 || step + 1 == steps) {
      const double v = evaluate(model, val_ids, sz.batch, sz.context, dev, eval_batches);
      val_x[nval] = (double)(step + 1), val_curve[nval++] = v;
      if (v < best_val) {
        best_val = v, best_step = step + 1;
        if (rank == 0) CHECK(nx_module_save(model, best_path));
      } else if (step + 1 - best_step >= patience * eval_every && step + 1 < steps) {
        /* Stops in time: the defaults are tuned not to get here, but a longer run (or more ranks,
         * hence more epochs) should not go on overfitting. Every rank has the same weights and
         * validation batches, hence the same v, and stops at the same step. */
        printf("\nstopping at step %lld of %lld: no better validation loss in %d evaluations\n", (long long)(step + 1),
               (long long)steps, patience);
        steps = step + 1;
      }
    }
    char extra[96];
    double tps = (double)(step + 1) * sz.batch * world * sz.context / (ex_now() - start);
    snprintf(extra, sizeof extra, "loss %.3f  %.0f tok/s", smooth, tps);
    if (rank == 0) ex_progress(step + 1, steps, start, extra);
    nx_tensor_free(x), nx_tensor_free(y), nx_tensor_free(loss);
  }
  if (plan) {
    nx_plan_stats ps = {sizeof ps};
    CHECK(nx_plan_get_stats(plan, &ps));
    printf("plan: %lld eager, %lld captured, %lld recaptured (stale), %lld replayed steps; %lld ops, "
           "arena %.1f MiB (eager step peak %.1f MiB), CUDA graph %s\n",
           (long long)ps.eager_runs, (long long)ps.captures, (long long)ps.recaptures, (long long)ps.replays,
           (long long)ps.ops, ps.arena_bytes / 1048576.0, ps.eager_peak_bytes / 1048576.0, ps.cuda_graph ? "yes" : "no");
    nx_plan_free(plan);
  }
  double val_after = evaluate(model, val_ids, sz.batch, sz.context, dev, eval_batches);
  printf("validation loss after %lld steps: %.4f (before: %.4f); %.1f s\n", (long long)steps, val_after, val_before,
         ex_now() - start);

  if (rank == 0) { /* rank 0 saves and samples for everyone */
    char path[1024];
    snprintf(path, sizeof path, "%s/gpt_last.safetensors", out_dir);
    CHECK(nx_module_save(model, path));
    if (best_step >= 0 && best_step < steps) { /* sample from the best model */
      CHECK(nx_module_load(model, best_path));
      printf("best validation loss %.4f at step %lld: gpt_checkpoint.safetensors holds it and the samples "
             "below come from it (the last weights are in gpt_last.safetensors)\n",
             best_val, (long long)best_step);
    }
    snprintf(path, sizeof path, "%s/gpt_optimizer.safetensors", out_dir);
    CHECK(nx_optimizer_save(opt, path));
    /* the loss curves as a table by step (empty where a loss was not measured), for scripts/plot.py */
    snprintf(path, sizeof path, "%s/loss_curve.csv", out_dir);
    double* table = (double*)malloc((size_t)(steps + 1) * 3 * sizeof(double));
    for (int64_t i = 0; i <= steps; ++i) table[3 * i] = (double)i, table[3 * i + 1] = table[3 * i + 2] = NAN;
    for (int64_t i = 0; i < steps; ++i) table[3 * (int64_t)train_x[i] + 1] = train_curve[i];
    for (int i = 0; i < nval; ++i) table[3 * (int64_t)val_x[i] + 2] = val_curve[i];
    const char* const columns[3] = {"step", "train_loss", "val_loss"};
    if (ex_write_csv(path, NULL, NULL, columns, 3, table, steps + 1) == 0) {
      printf("best and last checkpoints, optimizer state (of the last) and loss curves (loss_curve.csv) "
             "written to %s/\n", out_dir);
      const char* corpus_name = strrchr(corpus_path, '/') ? strrchr(corpus_path, '/') + 1 : corpus_path;
      char title[256];
      snprintf(title, sizeof title, "GPT %s on %s", size_name, corpus_name);
      const char* const csvs[1] = {path};
      ex_print_plot_command(title, csvs, 1);
    }
    free(table);

    /* At least sample_words words after the prompt (200, so that the real-word figure varies less
     * between seeds than with the 100 the issue asks for). nx_gpt_generate stops at the model's
     * context, so the sample is a chain of continuations, each prompted with the last half context
     * of the text so far, each with the next seed. */
    const size_t sample_words = 200;
    const int max_parts = 32;
    const char* prompt_text = "The whale";
    const size_t prompt_len = strlen(prompt_text);
    nx_tensor prompt;
    CHECK(nx_tokenizer_encode(&prompt, tok, prompt_text, prompt_len));
    int64_t np;
    CHECK(nx_tensor_numel(prompt, &np));
    int64_t* pids;
    CHECK(nx_tensor_data_ptr(prompt, (void**)&pids));
    int64_t* sample_ids = (int64_t*)malloc((size_t)(np + max_parts * sz.context) * sizeof(int64_t));
    int64_t nsample = np;
    memcpy(sample_ids, pids, (size_t)np * sizeof(int64_t));
    /* temperature 0.7: fewer made-up words than 0.8 (docs/decisions.md, session 9) */
    nx_sample_config sc = {sizeof(nx_sample_config), 0.7, 40, 0.95, 7};
    static char sample[1 << 20];
    size_t slen = 0;
    Words words = {NULL, NULL, 0};
    int parts = 0;
    for (; parts < max_parts && words.count < sample_words; ++parts) {
      const int64_t keep = nsample < sz.context / 2 ? nsample : sz.context / 2;
      nx_tensor generated;
      int64_t *gids, ng;
      sc.seed = 7 + (uint64_t)parts;
      CHECK(nx_gpt_generate(&generated, model, sample_ids + nsample - keep, (size_t)keep, sz.context + 1 - keep, &sc,
                            NULL));
      CHECK(nx_tensor_numel(generated, &ng));
      CHECK(nx_tensor_data_ptr(generated, (void**)&gids));
      memcpy(sample_ids + nsample, gids + keep, (size_t)(ng - keep) * sizeof(int64_t));
      nsample += ng - keep;
      nx_tensor_free(generated);
      CHECK(nx_tokenizer_decode(tok, sample_ids, (size_t)nsample, sample, sizeof sample - 1, &slen));
      sample[slen] = 0;
      free_words(words);
      words = split_words(sample + prompt_len, slen - prompt_len);
    }
    size_t real = 0;
    for (size_t i = 0; i < words.count; ++i)
      real += bsearch(&words.word[i], corpus_words.word, corpus_words.count, sizeof(char*), compare_words) != NULL;
    printf("--- sample (temperature %.1f, top-k %lld, top-p %.2f, KV cache; %d continuation%s of at most %lld tokens) "
           "---\n%s\n---\n",
           sc.temperature, (long long)sc.top_k, sc.top_p, parts, parts == 1 ? "" : "s", (long long)sz.context, sample);
    printf("real words: %.1f%% (%zu of %zu sampled words occur in the corpus)\n",
           words.count ? 100.0 * (double)real / (double)words.count : 0.0, real, words.count);

    free_words(words);
    free(sample_ids);
    nx_tensor_free(prompt);
  }
  free_words(corpus_words);
  free(train_x); free(train_curve); free(val_x); free(val_curve);
  nx_optimizer_free(opt);
  nx_tensor_array_free(params, nparams);
  nx_module_free(model);
  nx_text_loader_free(train);
  nx_tensor_free(train_ids); nx_tensor_free(val_ids); nx_tensor_free(ids);
  nx_tokenizer_free(tok);
  nx_ddp_free(ddp);
  nx_comm_free(comm);
  return 0;
}
