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

#endif
