/* One process per GPU for the C examples and benchmarks: `--gpus N` makes the program a launcher
 * that creates the communicator id (so the NCCL bootstrap listener lives in the launcher), passes
 * it to N copies of itself through NEXUS_COMM_ID with NEXUS_RANK / NEXUS_LOCAL_RANK /
 * NEXUS_WORLD_SIZE, and waits for them; a rank that fails stops the others (NCCL would wait for
 * it forever). Each copy joins with nx_comm_create_from_env. POSIX only. */
#ifndef NEXUS_DIST_UTIL_H
#define NEXUS_DIST_UTIL_H
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "example_util.h"

/* Removes "--gpus N" from argv; returns N (0 when absent). */
static inline int ex_take_gpus(int* argc, char** argv) {
  int gpus = 0;
  for (int i = 1; i < *argc; ++i) {
    if (strcmp(argv[i], "--gpus") != 0) continue;
    if (i + 1 >= *argc || atoi(argv[i + 1]) < 1) {
      fprintf(stderr, "--gpus needs a positive count\n");
      exit(2);
    }
    gpus = atoi(argv[i + 1]);
    for (int j = i; j + 2 <= *argc; ++j) argv[j] = argv[j + 2];
    *argc -= 2;
    break;
  }
  return gpus;
}

/* Runs argv (already without --gpus) as ranks 0..gpus-1 and returns the exit status for main. */
static inline int ex_launch_ranks(char** argv, int gpus) {
  if (nx_cuda_device_count() < gpus) {
    fprintf(stderr, "--gpus %d: only %d CUDA device(s) here\n", gpus, nx_cuda_device_count());
    return 2;
  }
  nx_comm_id id;
  char hex[2 * NX_COMM_ID_BYTES + 1], num[16];
  size_t len;
  CHECK(nx_comm_id_create(&id));
  CHECK(nx_comm_id_to_hex(&id, hex, sizeof hex, &len));
  setenv("NEXUS_COMM_ID", hex, 1);
  snprintf(num, sizeof num, "%d", gpus);
  setenv("NEXUS_WORLD_SIZE", num, 1);
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  pid_t* pids = (pid_t*)calloc((size_t)gpus, sizeof(pid_t));
  for (int r = 0; r < gpus; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) {
      perror("fork");
      gpus = r;
      break;
    }
    if (pids[r] == 0) {
      snprintf(num, sizeof num, "%d", r);
      setenv("NEXUS_RANK", num, 1);
      setenv("NEXUS_LOCAL_RANK", num, 1);
      execv("/proc/self/exe", argv);
      perror("execv /proc/self/exe");
      _exit(127);
    }
  }
  int rc = 0;
  for (int left = gpus; left > 0; --left) {
    int status = 0;
    pid_t done = wait(&status);
    if (done < 0) break;
    int failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    for (int r = 0; r < gpus; ++r)
      if (pids[r] == done) {
        pids[r] = 0;
        if (failed) fprintf(stderr, "rank %d failed (status %d); stopping the others\n", r, status);
      }
    if (failed && !rc) {
      rc = 1;
      for (int r = 0; r < gpus; ++r)
        if (pids[r] > 0) kill(pids[r], SIGTERM);
    }
  }
  free(pids);
  return rc;
}

/* In a rank started by ex_launch_ranks: its communicator (NULL in a plain run). */
static inline nx_comm ex_rank_comm(void) {
  nx_comm comm = NULL;
  if (getenv("NEXUS_RANK")) CHECK(nx_comm_create_from_env(&comm));
  return comm;
}

#endif
