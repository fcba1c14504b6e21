// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): a counter-based
// generator, so element i of a random tensor depends only on (seed, offset + i): the same numbers
// for any thread count, and on any device that runs this same function.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define NX_HOST_DEVICE __host__ __device__
#else
#define NX_HOST_DEVICE
#endif

namespace nx {

struct Philox4 { uint32_t v[4]; };

NX_HOST_DEVICE inline Philox4 philox4x32(uint64_t counter, uint64_t seed) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 (f32) or 53 (f64) random bits; normal by Box-Muller.
NX_HOST_DEVICE inline double philox_uniform(uint64_t counter, uint64_t seed) {
  Philox4 r = philox4x32(counter, seed);
  uint64_t bits = (uint64_t(r.v[0]) << 21) ^ (uint64_t(r.v[1]) >> 11);
  return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}
NX_HOST_DEVICE inline double philox_normal(uint64_t counter, uint64_t seed) {
  Philox4 r = philox4x32(counter, seed);
  double u1 = (double(r.v[0]) + 1.0) * (1.0 / 4294967297.0);  // (0, 1): log is finite
  double u2 = double(r.v[1]) * (1.0 / 4294967296.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

}  // namespace nx
