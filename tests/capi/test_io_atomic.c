/* The C contract of nexus.h: saves replace a file atomically, loads are all or nothing (issue 17,
 * items 4 and 5).
 *
 * Saves (nx_module_save, nx_optimizer_save, nx_safetensors_save, nx_tokenizer_save) write a
 * temporary file beside the target, fsync it and rename it over the target. Checked here:
 *  - a save over an existing file replaces it and leaves no temporary;
 *  - a failing save returns NX_ERR_IO naming the function, the path and strerror, leaves the old
 *    file byte-identical and no temporary in the directory. Failures simulated: a directory
 *    that does not exist (open fails, ENOENT), a directory made read-only (open fails, EACCES;
 *    the saving child drops root first, as root ignores permissions), a target that is a
 *    directory (the rename fails, EISDIR) and a full disk: RLIMIT_FSIZE in a forked child with
 *    SIGXFSZ ignored, so that write(2) fails with EFBIG part way through the file, as it fails
 *    with ENOSPC on a full disk (the same path through the code: a failed write);
 *  - killing a process that saves a module in a loop, 50 times with SIGKILL at random moments:
 *    after every kill the target loads and is byte for byte one of the complete versions.
 * Loads: a module file with one tensor of the wrong shape, of the wrong dtype or missing, and
 * optimizer files with wrong-shaped, [1]-shaped or integer moments, a float, negative or missing
 * step count, unpaired moments or state of a parameter the optimizer lacks: each is refused with
 * its message, the parameters and the optimizer state stay byte-identical, and the next step
 * equals that of an untouched twin optimizer. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nx_test.h"

/* ---------------------------------------------------------------- files and directories */
static int same_bytes(const unsigned char* a, size_t na, const unsigned char* b, size_t nb) {
  return na == nb && memcmp(a, b, na) == 0;
}
static void assert_file_is(const char* path, const unsigned char* want, size_t nwant) {
  size_t n = 0;
  unsigned char* got = nx_read_file(path, &n);
  if (!same_bytes(got, n, want, nwant)) {
    print_error("%s changed: %zu bytes, expected the old %zu bytes\n", path, n, nwant);
    fail();
  }
  free(got);
}

/* Temporaries are named ".<name>.tmp-<pid>-<n>" (io/atomic_file.hpp). */
static int count_temporaries(const char* dir, int remove_them) {
  DIR* d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent* e; (e = readdir(d));) {
    if (!strstr(e->d_name, ".tmp-")) continue;
    ++n;
    if (remove_them) {
      char p[600];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  }
  closedir(d);
  return n;
}
static void assert_no_temporaries(const char* dir) {
  int n = count_temporaries(dir, 0);
  if (n) {
    print_error("%d temporary file(s) left in %s\n", n, dir);
    fail();
  }
}

/* ---------------------------------------------------------------- objects to save */
static nx_module make_linear(uint64_t seed, int64_t in, int64_t out) {
  nx_module m = NULL;
  NX_OK_(nx_random_set_seed(seed));
  NX_OK_(nx_linear_create(&m, in, out, true, NX_F32, CPU, NULL));
  return m;
}

/* All parameters' bytes, concatenated in parameter order. */
static unsigned char* module_bytes(nx_module m, size_t* n) {
  size_t count = 0, total = 0;
  NX_OK_(nx_module_parameter_count(m, &count));
  unsigned char* buf = NULL;
  for (size_t i = 0; i < count; ++i) {
    const char* name = NULL;
    nx_tensor t = NULL;
    NX_OK_(nx_module_parameter(m, i, &name, &t));
    size_t nb = (size_t)tensor_numel(t) * nx_dtype_size(tensor_dtype(t));
    buf = realloc(buf, total + nb + 1);
    NX_OK_(nx_tensor_copy_to_host(t, buf + total, nb, NULL));
    total += nb;
    nx_tensor_free(t);
  }
  *n = total;
  return buf;
}

static nx_tokenizer make_tokenizer(void) {
  /* enough distinct pairs for the merges to make a file of a few hundred bytes */
  char text[4096];
  size_t len = 0;
  for (int i = 0; len + 16 < sizeof text; ++i)
    len += (size_t)snprintf(text + len, sizeof text - len, "w%c%c%c ", 'a' + i % 7, 'a' + i % 11, 'a' + i % 13);
  nx_tokenizer tok = NULL;
  NX_OK_(nx_tokenizer_bpe_train(&tok, text, len, 320));
  return tok;
}

/* A parameter with a gradient g (backward of sum(p * g)). */
static void set_grad(nx_tensor p, const double* g) {
  int64_t shape[8];
  size_t nd = 0;
  NX_OK_(nx_tensor_ndim(p, &nd));
  NX_OK_(nx_tensor_shape(p, shape, 8));
  nx_tensor gt = make_from_f64(g, shape, nd, tensor_dtype(p)), y = NULL;
  NX_OK_(nx_mul_scalar(&y, p, 1.0, NULL));
  NX_OK_(nx_backward(y, gt, NULL, NULL));
  nx_tensor_free(y);
  nx_tensor_free(gt);
}

/* The four writers, each saving "its" object to a path; index k picks one. */
typedef struct {
  nx_module module;
  nx_optimizer opt;
  nx_tensor st_tensor;
  nx_tokenizer tok;
} saveables;
static const char* const WRITER_NAMES[4] = {"nx_module_save", "nx_optimizer_save", "nx_safetensors_save",
                                            "nx_tokenizer_save"};
static nx_status save_with(int k, const saveables* s, const char* path) {
  const char* names[1] = {"x"};
  switch (k) {
    case 0: return nx_module_save(s->module, path);
    case 1: return nx_optimizer_save(s->opt, path);
    case 2: return nx_safetensors_save(path, names, &s->st_tensor, 1);
    default: return nx_tokenizer_save(s->tok, path);
  }
}
/* version 0 or 1 of every saveable: different contents, same kinds */
static void make_saveables(saveables* s, int version) {
  s->module = make_linear(11 + (uint64_t)version, 16, 16);
  size_t n = 0;
  nx_tensor* params = NULL;
  NX_OK_(nx_module_parameters(s->module, &params, &n));
  nx_adam_options o = NX_ADAM_OPTIONS_DEFAULT;
  NX_OK_(nx_adam_create(&s->opt, params, n, &o));
  for (size_t i = 0; i < n; ++i) {
    double g[256];
    for (int j = 0; j < 256; ++j) g[j] = 0.01 * (j % 7) + version;
    set_grad(params[i], g);
  }
  NX_OK_(nx_optimizer_step(s->opt, NULL));
  nx_tensor_array_free(params, n);
  int64_t shape[1] = {64};
  s->st_tensor = rand_tensor(NULL, shape, 1, NX_F32, -1, 1);
  s->tok = version ? make_tokenizer() : NULL;
  if (!s->tok) NX_OK_(nx_tokenizer_bytes_create(&s->tok));
}
static void free_saveables(saveables* s) {
  nx_module_free(s->module);
  nx_optimizer_free(s->opt);
  nx_tensor_free(s->st_tensor);
  nx_tokenizer_free(s->tok);
}

/* ---------------------------------------------------------------- saves */
/* Each writer replaces an existing file with the new contents and leaves nothing else behind;
 * what it wrote loads back. */
static void test_save_replaces_file(void** state) {
  (void)state;
  saveables v0, v1;
  make_saveables(&v0, 0);
  make_saveables(&v1, 1);
  for (int k = 0; k < 4; ++k) {
    char name[64], ref[64];
    snprintf(name, sizeof name, "replace_%d", k);
    snprintf(ref, sizeof ref, "replace_ref_%d", k);
    NX_OK_(save_with(k, &v0, nx_scratch_path(name)));
    NX_OK_(save_with(k, &v1, nx_scratch_path(ref)));
    NX_OK_(save_with(k, &v1, nx_scratch_path(name))); /* over the existing file */
    size_t nref = 0;
    unsigned char* want = nx_read_file(nx_scratch_path(ref), &nref);
    assert_file_is(nx_scratch_path(name), want, nref);
    free(want);
    assert_no_temporaries(nx_scratch_dir);
  }
  /* the replaced files load */
  nx_module m = make_linear(99, 16, 16);
  NX_OK_(nx_module_load(m, nx_scratch_path("replace_0")));
  size_t na = 0, nb = 0;
  unsigned char *a = module_bytes(m, &na), *b = module_bytes(v1.module, &nb);
  assert_true(same_bytes(a, na, b, nb));
  free(a);
  free(b);
  nx_module_free(m);
  NX_OK_(nx_optimizer_load(v0.opt, nx_scratch_path("replace_1")));
  nx_tokenizer tok = NULL;
  int64_t vocab = 0, want_vocab = 0;
  NX_OK_(nx_tokenizer_load(&tok, nx_scratch_path("replace_3")));
  NX_OK_(nx_tokenizer_vocab_size(tok, &vocab));
  NX_OK_(nx_tokenizer_vocab_size(v1.tok, &want_vocab));
  assert_int_equal(vocab, want_vocab);
  nx_tokenizer_free(tok);
  free_saveables(&v0);
  free_saveables(&v1);
}

/* A save that cannot even start: the directory does not exist. */
static void test_save_into_missing_directory(void** state) {
  (void)state;
  saveables s;
  make_saveables(&s, 0);
  const char* path = nx_scratch_path("no_such_dir/file.bin");
  for (int k = 0; k < 4; ++k) {
    EXPECT_ERR(NX_ERR_IO, save_with(k, &s, path), WRITER_NAMES[k], path, strerror(ENOENT));
  }
  assert_no_temporaries(nx_scratch_dir);
  free_saveables(&s);
}

/* The rename fails (the target is a directory): the temporary, complete by then, is removed and
 * the directory is left as it was. */
static void test_save_rename_fails(void** state) {
  (void)state;
  saveables s;
  make_saveables(&s, 0);
  const char* path = nx_scratch_path("target_is_a_dir");
  assert_int_equal(mkdir(path, 0755), 0);
  for (int k = 0; k < 4; ++k) {
    EXPECT_ERR(NX_ERR_IO, save_with(k, &s, path), WRITER_NAMES[k], path, "renaming", strerror(EISDIR));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
  }
  assert_no_temporaries(nx_scratch_dir);
  rmdir(path);
  free_saveables(&s);
}

/* Runs every writer over its existing file (old_<k>) in a forked child after prepare(); the child
 * exits 0 when each call failed with NX_ERR_IO, naming the function, the path and want_errno. */
static void run_failing_saves_in_child(const char* subdir, void (*prepare)(const char* dir), int want_errno) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", nx_scratch_path(subdir));
  assert_int_equal(mkdir(dir, 0755), 0);
  saveables old, fresh;
  make_saveables(&old, 0);
  make_saveables(&fresh, 1);
  unsigned char* before[4];
  size_t nbefore[4];
  char paths[4][600];
  for (int k = 0; k < 4; ++k) {
    snprintf(paths[k], sizeof paths[k], "%s/old_%d", dir, k);
    NX_OK_(save_with(k, &old, paths[k]));
    before[k] = nx_read_file(paths[k], &nbefore[k]);
    /* the new contents are longer than the 100 bytes the full-disk child may write */
    char probe[700];
    snprintf(probe, sizeof probe, "%s/probe_%d", dir, k);
    NX_OK_(save_with(k, &fresh, probe));
    struct stat st;
    assert_int_equal(stat(probe, &st), 0);
    assert_true(st.st_size > 100);
    unlink(probe);
  }
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prepare(dir);
    int bad = 0;
    for (int k = 0; k < 4; ++k) {
      nx_status st = save_with(k, &fresh, paths[k]);
      const char* msg = nx_last_error_message();
      if (st != NX_ERR_IO || !strstr(msg, WRITER_NAMES[k]) || !strstr(msg, paths[k]) || !strstr(msg, strerror(want_errno))) {
        fprintf(stderr, "child: %s returned %s: \"%s\" (expected NX_ERR_IO naming the function, the path and \"%s\")\n",
                WRITER_NAMES[k], nx_status_string(st), msg, strerror(want_errno));
        bad = 1;
      } else {
        printf("  %-20s %s\n", WRITER_NAMES[k], msg);
      }
    }
    fflush(NULL);
    _exit(bad);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  chmod(dir, 0755);
  for (int k = 0; k < 4; ++k) {
    assert_file_is(paths[k], before[k], nbefore[k]);
    free(before[k]);
  }
  assert_no_temporaries(dir);
  free_saveables(&old);
  free_saveables(&fresh);
}

/* A full disk. RLIMIT_FSIZE makes write(2) fail with EFBIG past 100 bytes of any file (SIGXFSZ
 * ignored, else it kills the process): the temporary is cut short after its first 100 bytes,
 * exactly where a full disk would cut it with ENOSPC. Every file saved is longer than that. */
static void limit_file_size(const char* dir) {
  (void)dir;
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = {100, 100};
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(3);
}
static void test_save_disk_full(void** state) {
  (void)state;
  printf("  full disk (RLIMIT_FSIZE of 100 bytes in a child):\n");
  run_failing_saves_in_child("disk_full", limit_file_size, EFBIG);
}

/* A directory the saving process may not write to. Root ignores permissions: the child then
 * runs as nobody. */
static void make_read_only(const char* dir) {
  if (chmod(dir, 0555) != 0) _exit(4);
  if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(5);
}
static void test_save_read_only_directory(void** state) {
  (void)state;
  printf("  read-only directory:\n");
  run_failing_saves_in_child("read_only", make_read_only, EACCES);
}

/* ---------------------------------------------------------------- kill during save */
enum { KILL_VERSIONS = 3, KILL_ROUNDS = 50, KILL_FEATURES = 256 };

/* The child (this executable run with --save-loop PATH FD): saves the versions over PATH
 * round-robin until killed; writes one byte to FD when the first save begins. */
static int save_loop_main(const char* path, int ready_fd) {
  nx_module versions[KILL_VERSIONS];
  for (int v = 0; v < KILL_VERSIONS; ++v) versions[v] = make_linear(1000 + (uint64_t)v, KILL_FEATURES, KILL_FEATURES);
  if (write(ready_fd, "r", 1) != 1) return 2;
  close(ready_fd);
  for (unsigned long i = 0;; ++i) {
    if (nx_module_save(versions[i % KILL_VERSIONS], path) != NX_OK) {
      fprintf(stderr, "save-loop: %s\n", nx_last_error_message());
      return 1;
    }
  }
}

static void test_kill_during_save(void** state) {
  (void)state;
  /* the complete versions, saved once each */
  unsigned char* versions[KILL_VERSIONS];
  size_t nversions[KILL_VERSIONS];
  for (int v = 0; v < KILL_VERSIONS; ++v) {
    nx_module m = make_linear(1000 + (uint64_t)v, KILL_FEATURES, KILL_FEATURES);
    char name[64];
    snprintf(name, sizeof name, "kill_ref_%d", v);
    NX_OK_(nx_module_save(m, nx_scratch_path(name)));
    versions[v] = nx_read_file(nx_scratch_path(name), &nversions[v]);
    nx_module_free(m);
    if (v) assert_false(same_bytes(versions[v], nversions[v], versions[0], nversions[0]));
  }
  char dir[512];
  snprintf(dir, sizeof dir, "%s", nx_scratch_path("kill"));
  assert_int_equal(mkdir(dir, 0755), 0);
  char target[600];
  snprintf(target, sizeof target, "%s/checkpoint.safetensors", dir);
  nx_module first = make_linear(1000, KILL_FEATURES, KILL_FEATURES);
  NX_OK_(nx_module_save(first, target)); /* the previous checkpoint */
  nx_module_free(first);

  nx_module loaded = make_linear(7, KILL_FEATURES, KILL_FEATURES);
  int survived = 0, mid_write = 0, seen[KILL_VERSIONS] = {0};
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  rng_seed((uint64_t)t0.tv_nsec); /* random moments: a different schedule every run */
  for (int round = 0; round < KILL_ROUNDS; ++round) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      /* a fresh process image: the parent's OpenMP threads do not survive fork */
      close(fds[0]);
      char fd_arg[16];
      snprintf(fd_arg, sizeof fd_arg, "%d", fds[1]);
      execl("/proc/self/exe", "capi_test_io_atomic", "--save-loop", target, fd_arg, (char*)NULL);
      _exit(127);
    }
    close(fds[1]);
    char ready = 0;
    assert_int_equal(read(fds[0], &ready, 1), 1);
    close(fds[0]);
    /* kill after 0..20 ms of saving: a few saves, and then any moment of one */
    struct timespec d = {0, (long)rng_int(20000000)};
    nanosleep(&d, NULL);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
      print_error("round %d: the saving child ended by itself (status %d) before the kill\n", round, status);
      fail();
    }
    /* the target is one complete version, and loads */
    size_t n = 0;
    unsigned char* got = nx_read_file(target, &n);
    int which = -1;
    for (int v = 0; v < KILL_VERSIONS; ++v)
      if (same_bytes(got, n, versions[v], nversions[v])) which = v;
    if (which < 0) {
      print_error("round %d: after the kill %s holds %zu bytes that are no complete version\n", round, target, n);
      fail();
    }
    free(got);
    NX_OK_(nx_module_load(loaded, target));
    ++seen[which];
    ++survived;
    /* a temporary left behind means the kill landed before the rename: mid-save */
    if (count_temporaries(dir, 1) > 0) ++mid_write;
  }
  printf("  kill-during-save: %d of %d SIGKILLs survived (%d landed mid-save, leaving a temporary); "
         "the checkpoint always loaded as a complete version (versions seen: %d, %d, %d)\n",
         survived, KILL_ROUNDS, mid_write, seen[0], seen[1], seen[2]);
  assert_int_equal(survived, KILL_ROUNDS);
  assert_true(mid_write > 0); /* else the test never hit a save in progress */
  nx_module_free(loaded);
  for (int v = 0; v < KILL_VERSIONS; ++v) free(versions[v]);
}

/* ---------------------------------------------------------------- a small SafeTensors writer */
/* The tests write the malformed state files themselves: nx_safetensors_save takes no metadata,
 * and the engine's own writer would not produce them. */
typedef struct {
  char name[32];
  const char* dtype; /* "F32", "I64"... */
  int64_t shape[4];
  size_t ndim;
  unsigned char* data;
  size_t nbytes;
} st_entry;

static void write_state_file(const char* path, const char* kind, const st_entry* e, size_t n) {
  char header[4096];
  size_t len = (size_t)snprintf(header, sizeof header, "{\"__metadata__\":{\"optimizer\":\"%s\"}", kind);
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    len += (size_t)snprintf(header + len, sizeof header - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e[i].name,
                            e[i].dtype);
    for (size_t d = 0; d < e[i].ndim; ++d)
      len += (size_t)snprintf(header + len, sizeof header - len, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
    len += (size_t)snprintf(header + len, sizeof header - len, "],\"data_offsets\":[%zu,%zu]}", at, at + e[i].nbytes);
    at += e[i].nbytes;
  }
  len += (size_t)snprintf(header + len, sizeof header - len, "}");
  assert_true(len < sizeof header);
  FILE* f = fopen(path, "wb");
  assert_non_null(f);
  unsigned char lenbuf[8];
  for (int i = 0; i < 8; ++i) lenbuf[i] = (unsigned char)((uint64_t)len >> (8 * i));
  fwrite(lenbuf, 1, 8, f);
  fwrite(header, 1, len, f);
  for (size_t i = 0; i < n; ++i) fwrite(e[i].data, 1, e[i].nbytes, f);
  assert_int_equal(fclose(f), 0);
}

static const char* st_dtype(nx_dtype d) {
  switch (d) {
    case NX_F32: return "F32";
    case NX_F64: return "F64";
    case NX_I32: return "I32";
    case NX_I64: return "I64";
    default: return "?";
  }
}
/* The entries of a file the engine saved (names sorted, as saved). */
static size_t read_entries(const char* path, st_entry* out, size_t cap) {
  nx_safetensors st = NULL;
  NX_OK_(nx_safetensors_open(&st, path));
  size_t n = 0;
  NX_OK_(nx_safetensors_count(st, &n));
  assert_true(n <= cap);
  for (size_t i = 0; i < n; ++i) {
    const char* name = NULL;
    NX_OK_(nx_safetensors_name(st, i, &name));
    nx_tensor t = NULL;
    NX_OK_(nx_safetensors_get(&t, st, name, CPU, NULL));
    st_entry* e = &out[i];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->dtype = st_dtype(tensor_dtype(t));
    NX_OK_(nx_tensor_ndim(t, &e->ndim));
    NX_OK_(nx_tensor_shape(t, e->shape, 4));
    e->nbytes = (size_t)tensor_numel(t) * nx_dtype_size(tensor_dtype(t));
    e->data = malloc(e->nbytes + 1);
    NX_OK_(nx_tensor_copy_to_host(t, e->data, e->nbytes, NULL));
    nx_tensor_free(t);
  }
  nx_safetensors_free(st);
  return n;
}
static void free_entries(st_entry* e, size_t n) {
  for (size_t i = 0; i < n; ++i) free(e[i].data);
}
static st_entry* find_entry(st_entry* e, size_t n, const char* name) {
  for (size_t i = 0; i < n; ++i)
    if (!strcmp(e[i].name, name)) return &e[i];
  print_error("no entry %s\n", name);
  fail();
  return NULL;
}
static void set_data(st_entry* e, const char* dtype, const void* data, size_t nbytes, const int64_t* shape, size_t ndim) {
  free(e->data);
  e->data = malloc(nbytes + 1);
  memcpy(e->data, data, nbytes);
  e->nbytes = nbytes;
  e->dtype = dtype;
  e->ndim = ndim;
  memcpy(e->shape, shape, sizeof(int64_t) * ndim);
}
static void drop_entry(st_entry* e, size_t* n, const char* name) {
  st_entry* d = find_entry(e, *n, name);
  free(d->data);
  size_t i = (size_t)(d - e);
  memmove(&e[i], &e[i + 1], sizeof *e * (*n - i - 1));
  --*n;
}

/* ---------------------------------------------------------------- module loads */
static void assert_module_unchanged(nx_module m, const unsigned char* before, size_t nbefore, const char* what) {
  size_t n = 0;
  unsigned char* now = module_bytes(m, &n);
  if (!same_bytes(now, n, before, nbefore)) {
    print_error("%s: the failed load changed the parameters\n", what);
    fail();
  }
  free(now);
}

static void test_module_load_all_or_nothing(void** state) {
  (void)state;
  /* Sequential(Linear(4, 3), Linear(3, 2)): 0.bias, 0.weight, 1.bias, 1.weight */
  nx_module layers[2] = {make_linear(1, 4, 3), make_linear(2, 3, 2)}, model = NULL;
  NX_OK_(nx_sequential_create(&model, layers, 2));
  nx_module other_layers[2] = {make_linear(3, 4, 3), make_linear(4, 3, 2)}, other = NULL;
  NX_OK_(nx_sequential_create(&other, other_layers, 2));
  char good[600];
  snprintf(good, sizeof good, "%s", nx_scratch_path("module_good.safetensors"));
  NX_OK_(nx_module_save(other, good)); /* different values: a load that applies changes bytes */
  size_t nbefore = 0;
  unsigned char* before = module_bytes(model, &nbefore);
  static const float wrong[6] = {7, 7, 7, 7, 7, 7};
  static const double wide[2] = {7, 7};
  struct {
    const char* what;
    nx_status status;
    const char* needle;
  } cases[] = {
      {"1.weight transposed ([3,2] for [2,3])", NX_ERR_SHAPE, "[3,2]"},
      {"1.weight missing", NX_ERR_IO, "has no tensor \"1.weight\""},
      {"1.bias f64 for f32", NX_ERR_SHAPE, "f64"},
  };
  for (size_t c = 0; c < 3; ++c) {
    st_entry v[8];
    size_t n = read_entries(good, v, 8);
    const int64_t t32[2] = {3, 2}, b2[1] = {2};
    if (c == 0) set_data(find_entry(v, n, "1.weight"), "F32", wrong, sizeof wrong, t32, 2);
    if (c == 1) drop_entry(v, &n, "1.weight");
    if (c == 2) set_data(find_entry(v, n, "1.bias"), "F64", wide, sizeof wide, b2, 1);
    const char* path = nx_scratch_path("module_bad.safetensors");
    /* plain tensors, no metadata: through the public writer */
    const char* names[8];
    nx_tensor ts[8];
    for (size_t i = 0; i < n; ++i) {
      names[i] = v[i].name;
      nx_dtype dt = !strcmp(v[i].dtype, "F64") ? NX_F64 : NX_F32;
      ts[i] = make_tensor(v[i].data, v[i].shape, v[i].ndim, dt);
    }
    NX_OK_(nx_safetensors_save(path, names, ts, n));
    for (size_t i = 0; i < n; ++i) nx_tensor_free(ts[i]);
    EXPECT_ERR(cases[c].status, nx_module_load(model, path), "nx_module_load", path, cases[c].needle);
    printf("  module file with %-38s refused: %s\n", cases[c].what, nx_last_error_message());
    assert_module_unchanged(model, before, nbefore, cases[c].what);
    free_entries(v, n);
  }
  /* the control: the same file, unmodified, loads and changes every parameter */
  NX_OK_(nx_module_load(model, good));
  size_t nafter = 0, nother = 0;
  unsigned char *after = module_bytes(model, &nafter), *want = module_bytes(other, &nother);
  assert_true(same_bytes(after, nafter, want, nother));
  assert_false(same_bytes(after, nafter, before, nbefore));
  free(after);
  free(want);
  free(before);
  for (int i = 0; i < 2; ++i) {
    nx_module_free(layers[i]);
    nx_module_free(other_layers[i]);
  }
  nx_module_free(model);
  nx_module_free(other);
}

/* ---------------------------------------------------------------- optimizer loads */
/* Two parameters, [2, 3] and [3], in f32, and the gradients of step s. */
static void make_params(nx_tensor* p) {
  const double a[6] = {0.5, -1, 2, 0.25, -0.75, 1.5}, b[3] = {1, -2, 0.5};
  const int64_t sa[2] = {2, 3}, sb[1] = {3};
  p[0] = t_requiring_grad(make_from_f64(a, sa, 2, NX_F32));
  p[1] = t_requiring_grad(make_from_f64(b, sb, 1, NX_F32));
}
static void grads_of_step(nx_tensor* p, int s) {
  double g0[6], g1[3];
  for (int j = 0; j < 6; ++j) g0[j] = 0.1 * (j + 1) * (s % 2 ? -1 : 1) + 0.01 * s;
  for (int j = 0; j < 3; ++j) g1[j] = 0.2 * (j - 1) + 0.03 * s;
  set_grad(p[0], g0);
  set_grad(p[1], g1);
}
static void step_both(nx_optimizer a, nx_tensor* pa, nx_optimizer b, nx_tensor* pb, int s) {
  grads_of_step(pa, s);
  grads_of_step(pb, s);
  NX_OK_(nx_optimizer_step(a, NULL));
  NX_OK_(nx_optimizer_step(b, NULL));
  NX_OK_(nx_optimizer_zero_grad(a));
  NX_OK_(nx_optimizer_zero_grad(b));
}
static void assert_params_identical(nx_tensor* a, nx_tensor* b, const char* what) {
  for (int i = 0; i < 2; ++i) {
    int64_t n = tensor_numel(a[i]);
    float x[8], y[8];
    NX_OK_(nx_tensor_copy_to_host(a[i], x, sizeof(float) * (size_t)n, NULL));
    NX_OK_(nx_tensor_copy_to_host(b[i], y, sizeof(float) * (size_t)n, NULL));
    if (memcmp(x, y, sizeof(float) * (size_t)n)) {
      print_error("%s: parameter %d after the next step differs from the untouched optimizer's\n", what, i);
      fail();
    }
  }
}

typedef enum { EDIT_SET, EDIT_DROP, EDIT_ADD } edit_kind;
typedef struct {
  const char* what;
  edit_kind edit;
  const char* entry;
  const char* dtype;
  int64_t shape[2];
  size_t ndim;
  double value; /* every element of an EDIT_SET or EDIT_ADD entry */
  nx_status status;
  const char* needle;
} state_case;

/* For each case: the optimizer's state file edited one way is refused with the status and a
 * message naming nx_optimizer_load, the file and needle; the optimizer's state (as it saves it)
 * is byte-identical after, and its next step equals the step of a twin that never saw the file. */
static void run_state_cases(bool adam, const state_case* cases, size_t ncases) {
  nx_tensor p[2], q[2];
  make_params(p);
  make_params(q);
  nx_optimizer opt = NULL, twin = NULL;
  if (adam) {
    nx_adam_options o = NX_ADAM_OPTIONS_DEFAULT;
    o.lr = 0.1;
    NX_OK_(nx_adam_create(&opt, p, 2, &o));
    NX_OK_(nx_adam_create(&twin, q, 2, &o));
  } else {
    nx_sgd_options o = NX_SGD_OPTIONS_DEFAULT;
    o.lr = 0.1;
    o.momentum = 0.9;
    NX_OK_(nx_sgd_create(&opt, p, 2, &o));
    NX_OK_(nx_sgd_create(&twin, q, 2, &o));
  }
  const char* kind = adam ? "Adam" : "SGD";
  int s = 0;
  for (; s < 2; ++s) step_both(opt, p, twin, q, s);
  char good[600], bad[600], now[600];
  snprintf(good, sizeof good, "%s", nx_scratch_path("opt_good.safetensors"));
  snprintf(bad, sizeof bad, "%s", nx_scratch_path("opt_bad.safetensors"));
  snprintf(now, sizeof now, "%s", nx_scratch_path("opt_now.safetensors"));
  for (size_t c = 0; c < ncases; ++c) {
    NX_OK_(nx_optimizer_save(opt, good));
    st_entry e[16];
    size_t n = read_entries(good, e, 14);
    const state_case* k = &cases[c];
    unsigned char raw[64] = {0};
    if (k->edit == EDIT_DROP) {
      drop_entry(e, &n, k->entry);
    } else {
      st_entry* target = k->edit == EDIT_ADD ? &e[n++] : find_entry(e, n, k->entry);
      if (k->edit == EDIT_ADD) {
        memset(target, 0, sizeof *target);
        snprintf(target->name, sizeof target->name, "%s", k->entry);
      }
      int64_t numel = 1;
      for (size_t d = 0; d < k->ndim; ++d) numel *= k->shape[d];
      const bool narrow = !strcmp(k->dtype, "F32") || !strcmp(k->dtype, "I32");
      const size_t elt = narrow ? 4 : 8;
      assert_true(elt * (size_t)numel <= sizeof raw);
      for (int64_t i = 0; i < numel; ++i) {
        const float f = (float)k->value;
        const int32_t i32 = (int32_t)k->value;
        const int64_t i64 = (int64_t)k->value;
        const void* src = !strcmp(k->dtype, "F32") ? (const void*)&f : !strcmp(k->dtype, "I32") ? (const void*)&i32
                        : !strcmp(k->dtype, "I64") ? (const void*)&i64 : (const void*)&k->value;
        memcpy(raw + elt * (size_t)i, src, elt);
      }
      set_data(target, k->dtype, raw, elt * (size_t)numel, k->shape, k->ndim);
    }
    write_state_file(bad, kind, e, n);
    free_entries(e, n);
    size_t nbefore = 0, nafter = 0;
    unsigned char* before = nx_read_file(good, &nbefore);
    EXPECT_ERR(k->status, nx_optimizer_load(opt, bad), "nx_optimizer_load", bad, k->needle);
    printf("  %-4s state with %-34s refused: %s\n", kind, k->what, nx_last_error_message());
    NX_OK_(nx_optimizer_save(opt, now));
    unsigned char* after = nx_read_file(now, &nafter);
    if (!same_bytes(before, nbefore, after, nafter)) {
      print_error("%s: the failed load changed the optimizer's state\n", k->what);
      fail();
    }
    free(before);
    free(after);
    step_both(opt, p, twin, q, s++);
    assert_params_identical(p, q, k->what);
  }
  /* the control: the engine's own file, rewritten by this writer unmodified, loads */
  NX_OK_(nx_optimizer_save(opt, good));
  st_entry e[16];
  size_t n = read_entries(good, e, 16);
  write_state_file(bad, kind, e, n);
  free_entries(e, n);
  NX_OK_(nx_optimizer_load(twin, bad));
  step_both(opt, p, twin, q, s++);
  assert_params_identical(p, q, "after loading the unmodified state");
  nx_optimizer_free(opt);
  nx_optimizer_free(twin);
  for (int i = 0; i < 2; ++i) {
    nx_tensor_free(p[i]);
    nx_tensor_free(q[i]);
  }
}

static void test_adam_load_all_or_nothing(void** state) {
  (void)state;
  /* file order is by name: m.0 m.1 step step.0 step.1 v.0 v.1; a bad v.1 comes after entries
   * that the old loader had already applied */
  static const state_case cases[] = {
      {"m.0 of shape [3,2] (param [2,3])", EDIT_SET, "m.0", "F32", {3, 2}, 2, 2, NX_ERR_SHAPE, "[3,2]"},
      {"v.1 of shape [1] (would broadcast)", EDIT_SET, "v.1", "F32", {1}, 1, 2, NX_ERR_SHAPE, "[1]"},
      {"v.1 of shape [] (would broadcast)", EDIT_SET, "v.1", "F32", {0}, 0, 2, NX_ERR_SHAPE, "[]"},
      {"integer moment m.1 (i64)", EDIT_SET, "m.1", "I64", {3}, 1, 2, NX_ERR_IO, "i64"},
      {"float step count (f32 2.0)", EDIT_SET, "step", "F32", {0}, 0, 2, NX_ERR_IO, "f32"},
      {"negative step count", EDIT_SET, "step", "I64", {0}, 0, -1, NX_ERR_IO, "-1"},
      {"step count of shape [1]", EDIT_SET, "step", "I64", {1}, 1, 2, NX_ERR_IO, "[1]"},
      {"negative parameter step step.1", EDIT_SET, "step.1", "I64", {0}, 0, -1, NX_ERR_IO, "-1"},
      {"float parameter step step.0", EDIT_SET, "step.0", "F32", {0}, 0, 2, NX_ERR_IO, "f32"},
      {"step.1 = 1000 > the step count", EDIT_SET, "step.1", "I64", {0}, 0, 1000, NX_ERR_IO, "1000"},
      {"no step count", EDIT_DROP, "step", NULL, {0}, 0, 0, NX_ERR_IO, "\"step\""},
      {"m.1 without v.1", EDIT_DROP, "v.1", NULL, {0}, 0, 0, NX_ERR_IO, "no v.1"},
      {"m.2 for a third parameter", EDIT_ADD, "m.2", "F32", {3}, 1, 2, NX_ERR_IO, "m.2"},
      {"an unknown entry", EDIT_ADD, "exp_avg.0", "F32", {3}, 1, 2, NX_ERR_IO, "exp_avg.0"},
  };
  run_state_cases(true, cases, sizeof cases / sizeof cases[0]);
}

static void test_sgd_load_all_or_nothing(void** state) {
  (void)state;
  static const state_case cases[] = {
      {"momentum.0 of shape [6]", EDIT_SET, "momentum.0", "F32", {6}, 1, 2, NX_ERR_SHAPE, "[6]"},
      {"momentum.1 of shape [1]", EDIT_SET, "momentum.1", "F32", {1}, 1, 2, NX_ERR_SHAPE, "[1]"},
      {"integer momentum.1 (i32)", EDIT_SET, "momentum.1", "I32", {3}, 1, 2, NX_ERR_IO, "i32"},
      {"float step count (f32 2.0)", EDIT_SET, "step", "F32", {0}, 0, 2, NX_ERR_IO, "f32"},
      {"negative step count", EDIT_SET, "step", "I64", {0}, 0, -1, NX_ERR_IO, "-1"},
      {"momentum.5 for a missing parameter", EDIT_ADD, "momentum.5", "F32", {3}, 1, 2, NX_ERR_IO, "momentum.5"},
  };
  run_state_cases(false, cases, sizeof cases / sizeof cases[0]);
}

int main(int argc, char** argv) {
  if (argc == 4 && !strcmp(argv[1], "--save-loop")) return save_loop_main(argv[2], atoi(argv[3]));
  const struct CMUnitTest tests[] = {
      NX_TEST(test_save_replaces_file),
      NX_TEST(test_save_into_missing_directory),
      NX_TEST(test_save_rename_fails),
      NX_TEST(test_save_disk_full),
      NX_TEST(test_save_read_only_directory),
      NX_TEST(test_kill_during_save),
      NX_TEST(test_module_load_all_or_nothing),
      NX_TEST(test_adam_load_all_or_nothing),
      NX_TEST(test_sgd_load_all_or_nothing),
  };
  return cmocka_run_group_tests(tests, nx_scratch_create, nx_scratch_remove);
}
