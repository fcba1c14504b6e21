/* libFuzzer: the SafeTensors reader. The input is a file: open it, list it, read every tensor and
 * its metadata. Any status may come back; the process must not crash, read out of bounds, leak a
 * handle, or return a tensor whose size disagrees with its shape. */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int64_t before[NX_HANDLE_PROFILE + 1];
  fuzz_count_handles(before);
  const char* path = fuzz_path(".safetensors");
  if (fuzz_write(path, data, size) != 0) return 0;
  nx_safetensors st = NULL;
  if (nx_safetensors_open(&st, path) == NX_OK) {
    size_t n = 0;
    if (nx_safetensors_count(st, &n) != NX_OK) abort();
    const char* meta = NULL;
    nx_safetensors_metadata(st, "format", &meta);
    for (size_t i = 0; i < n; ++i) {
      const char* name = NULL;
      if (nx_safetensors_name(st, i, &name) != NX_OK || !name) abort();
      nx_tensor t = NULL;
      const nx_device cpu = {NX_CPU, 0};
      if (nx_safetensors_get(&t, st, name, cpu, NULL) != NX_OK) continue;
      int64_t numel = 0;
      if (nx_tensor_numel(t, &numel) != NX_OK) abort();
      if (numel > 0 && numel <= 4096) { /* read the values through: out-of-bounds would show */
        double* host = malloc((size_t)numel * sizeof(double));
        nx_tensor f64 = NULL;
        if (nx_cast(&f64, t, NX_F64, NULL) == NX_OK &&
            nx_tensor_copy_to_host(f64, host, (size_t)numel * sizeof(double), NULL) != NX_OK)
          abort();
        nx_tensor_free(f64);
        free(host);
      }
      nx_tensor_free(t);
    }
    nx_safetensors_free(st);
  }
  fuzz_check_handles(before);
  return 0;
}
