// Multi-tensor Adam(W): one launch updates every (param, grad, m, v) of a step. The host builds
// a table of slots (pointers, size, per-tensor bias corrections) and of chunks (slot, first
// element; kChunk elements each), puts it in device memory (upload_table, multi_tensor.cu: kept
// there for the next steps, which step the same tensors) and launches one block per chunk. Per element, in torch.optim's order:
//   g += wd p (Adam) | p *= 1 - lr wd (AdamW); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
#include <cmath>
#include <cstring>

#include "cuda/fused.cuh"

namespace nx::cuda {
namespace {

using namespace fused;

constexpr int64_t kChunk = 1 << 16;

struct DevSlot {
  void *p, *g, *m, *v;
  int64_t n;
  double step_size, inv_sqrt_bc2;  // lr / bc1, 1 / sqrt(bc2)
};
struct DevChunk {
  int64_t slot, begin;
};

template <class T, class A>
__device__ __forceinline__ void adam_one(T& p, T g_in, T& m, T& v, const AdamParams& hp, A lr, A step, A isb) {
  A g = to_acc<A>(g_in), w = to_acc<A>(p);
  const A wd = A(hp.weight_decay);
  if (hp.decoupled) w *= A(1) - lr * wd;
  else g += wd * w;
  const A mm = A(hp.beta1) * to_acc<A>(m) + (A(1) - A(hp.beta1)) * g;
  const A vv = A(hp.beta2) * to_acc<A>(v) + (A(1) - A(hp.beta2)) * g * g;
  m = from_acc<T>(mm);
  v = from_acc<T>(vv);
  p = from_acc<T>(w - step * (mm / (sqrt(vv) * isb + A(hp.eps))));
}

// step_size > 0: every slot's bias corrections (the table's are then zero); otherwise per slot.
// hp.step_values (a compiled plan's, in device memory) overrides both and hp.lr.
template <class T>
__global__ void adam_multi_kernel(const DevSlot* slots, const DevChunk* chunks, AdamParams hp, double step_size,
                                  double inv_sqrt_bc2) {
  using A = typename AccT<T>::type;
  if (hp.skip_if_nan && isnan(*hp.skip_if_nan)) return;  // a scaled step that found Inf/NaN
  const DevChunk c = chunks[blockIdx.x];
  const DevSlot s = slots[c.slot];
  const int64_t end = c.begin + kChunk < s.n ? c.begin + kChunk : s.n;
  T *p = static_cast<T*>(s.p) + c.begin, *m = static_cast<T*>(s.m) + c.begin, *v = static_cast<T*>(s.v) + c.begin;
  const T* g = static_cast<const T*>(s.g) + c.begin;
  const int64_t len = end - c.begin;
  const double* sv = hp.step_values;
  const A lr = A(sv ? sv[0] : hp.lr);
  const A step = A(sv ? sv[1 + 2 * c.slot] : step_size > 0 ? step_size : s.step_size);
  const A isb = A(sv ? sv[2 + 2 * c.slot] : step_size > 0 ? inv_sqrt_bc2 : s.inv_sqrt_bc2);
  constexpr int N = Pack<T>::N;
  const bool aligned = ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(m) |
                         reinterpret_cast<uintptr_t>(v)) & 15) == 0;
  int64_t done = 0;
  if (aligned) {
    done = len / N * N;
    for (int64_t i = threadIdx.x; i < len / N; i += blockDim.x) {
      Pack<T> pp = reinterpret_cast<Pack<T>*>(p)[i], gg = reinterpret_cast<const Pack<T>*>(g)[i];
      Pack<T> mm = reinterpret_cast<Pack<T>*>(m)[i], vv = reinterpret_cast<Pack<T>*>(v)[i];
#pragma unroll
      for (int k = 0; k < N; ++k) adam_one<T, A>(pp.v[k], gg.v[k], mm.v[k], vv.v[k], hp, lr, step, isb);
      reinterpret_cast<Pack<T>*>(p)[i] = pp;
      reinterpret_cast<Pack<T>*>(m)[i] = mm;
      reinterpret_cast<Pack<T>*>(v)[i] = vv;
    }
  }
  for (int64_t i = done + threadIdx.x; i < len; i += blockDim.x) adam_one<T, A>(p[i], g[i], m[i], v[i], hp, lr, step, isb);
}

}  // namespace

void launch_adam_multi(const ExecContext& ctx, const std::vector<AdamSlot>& slots, DType dtype, const AdamParams& hp) {
  std::vector<DevSlot> ds;
  std::vector<DevChunk> dc;
  for (size_t i = 0; i < slots.size(); ++i) {
    const AdamSlot& s = slots[i];
    ds.push_back({s.param, s.grad, s.m, s.v, s.n, hp.lr / s.bc1, 1.0 / std::sqrt(s.bc2)});
    for (int64_t b = 0; b < s.n; b += kChunk) dc.push_back({int64_t(i), b});
  }
  if (dc.empty()) return;
  if (dc.size() > 2147483647u) fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": too many chunks in one Adam step");
  // One step size for all slots (the usual case: every parameter has taken as many steps).
  double step_size = ds[0].step_size, inv_sqrt_bc2 = ds[0].inv_sqrt_bc2;
  for (const DevSlot& d : ds)
    if (d.step_size != step_size || d.inv_sqrt_bc2 != inv_sqrt_bc2) step_size = 0;
  if (step_size > 0)
    for (DevSlot& d : ds) d.step_size = d.inv_sqrt_bc2 = 0;
  const size_t slot_bytes = ds.size() * sizeof(DevSlot), bytes = slot_bytes + dc.size() * sizeof(DevChunk);
  std::vector<char> wanted(bytes);
  std::memcpy(wanted.data(), ds.data(), slot_bytes);
  std::memcpy(wanted.data() + slot_bytes, dc.data(), dc.size() * sizeof(DevChunk));
  const void* table = upload_table(ctx, TableSite::Adam, std::move(wanted));
  const DevSlot* d_slots = static_cast<const DevSlot*>(table);
  const DevChunk* d_chunks = reinterpret_cast<const DevChunk*>(static_cast<const char*>(table) + slot_bytes);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    adam_multi_kernel<T><<<unsigned(dc.size()), kThreads, 0, stream_of(ctx)>>>(d_slots, d_chunks, hp, step_size,
                                                                                 inv_sqrt_bc2);
    NX_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace nx::cuda
