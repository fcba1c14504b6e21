/* NexusGrad quick start in C: a tiny linear model y = x @ w, its loss and gradient.
 * Build against an installed NexusGrad:  cc quickstart.c $(pkg-config --cflags --libs nexus) */
#include <stdio.h>
#include <stdlib.h>

#include <nexus.h>

#define CHECK(call)                                                                  \
  do {                                                                               \
    nx_status st_ = (call);                                                          \
    if (st_ != NX_OK) {                                                              \
      fprintf(stderr, "%s failed: %s: %s\n", #call, nx_status_string(st_),           \
              nx_last_error_message());                                              \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

int main(void) {
  const nx_device cpu = {NX_CPU, 0};
  const char* simd = "";
  CHECK(nx_cpu_get_simd_level(&simd));
  printf("NexusGrad %s (ABI %u, CPU kernels: %s)\n", nx_version_string(), nx_abi_version(), simd);
  nx_random_set_seed(42);

  int64_t xshape[2] = {2, 4}, wshape[2] = {4, 3};
  nx_tensor x, w, y, loss, grad;
  CHECK(nx_tensor_randn(&x, xshape, 2, NX_F32, cpu, NULL));
  CHECK(nx_tensor_randn(&w, wshape, 2, NX_F32, cpu, NULL));
  CHECK(nx_tensor_set_requires_grad(w, true));

  CHECK(nx_matmul(&y, x, w, NULL));              /* [2,4] @ [4,3] -> [2,3] */
  CHECK(nx_sum(&loss, y, NULL, 0, false, NULL)); /* all axes -> scalar */
  CHECK(nx_backward(loss, NULL, NULL, NULL));
  CHECK(nx_tensor_grad(&grad, w));

  double value;
  float g[12];
  CHECK(nx_tensor_item(loss, &value, NULL));
  CHECK(nx_tensor_copy_to_host(grad, g, sizeof g, NULL));
  printf("loss = %.6f\n", value);
  printf("d loss / d w =\n");
  for (int i = 0; i < 4; ++i) printf("  % .5f % .5f % .5f\n", g[3 * i], g[3 * i + 1], g[3 * i + 2]);

  /* Errors come back as a status and a message; nothing aborts. */
  nx_tensor bad;
  nx_status st = nx_matmul(&bad, x, x, NULL);
  printf("x @ x -> %s: %s\n", nx_status_string(st), nx_last_error_message());

  nx_tensor_free(grad);
  nx_tensor_free(loss);
  nx_tensor_free(y);
  nx_tensor_free(w);
  nx_tensor_free(x);
  printf("live tensors after freeing: %lld\n", (long long)nx_live_handle_count(NX_HANDLE_TENSOR));
  return 0;
}
