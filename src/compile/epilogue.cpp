#include "compile/epilogue.hpp"

#include <map>

namespace nx::compile {

size_t fold_casts_into_norms(Trace& trace, std::vector<Call*>& list) {
  const auto& allocs = trace.allocations;
  // Positions in list of the calls that touch each buffer (reads and writes).
  std::map<BufferId, std::vector<size_t>> touches, writes;
  for (size_t i = 0; i < list.size(); ++i)
    for (const BufferRef& r : list[i]->refs) {
      if (touches[id_of(r)].empty() || touches[id_of(r)].back() != i) touches[id_of(r)].push_back(i);
      if (r.written) writes[id_of(r)].push_back(i);
    }
  std::vector<bool> drop(list.size(), false);
  size_t folded = 0;
  for (size_t n = 0; n < list.size(); ++n) {
    View* y = list[n]->norm_output();
    if (!y || list[n]->refs.empty()) continue;
    const BufferRef yref = list[n]->refs[0];
    // y: an f32 step temporary that this norm alone writes, contiguous from the buffer's start.
    if (y->dtype != DType::F32 || yref.kind != BufferRef::Internal || allocs[yref.index].died == Allocation::kAlive ||
        yref.offset != 0 || writes[id_of(yref)].size() != 1 || y->strides != contiguous_strides(y->shape))
      continue;
    // Its one reader (besides the norm itself): a cast of the whole of y to bf16 or f16.
    const std::vector<size_t>& users = touches[id_of(yref)];
    if (users.size() != 2 || users[0] != n) continue;
    const size_t c = users[1];
    ElementwiseCall cast;
    if (drop[c] || !list[c]->elementwise(&cast) || cast.kind != FusedInstr::Copy || list[c]->refs.size() != 2) continue;
    const BufferRef out = list[c]->refs[0];
    if (list[c]->refs[1].offset != 0 || cast.in[0]->shape != y->shape || cast.in[0]->strides != y->strides ||
        (cast.dst->dtype != DType::BF16 && cast.dst->dtype != DType::F16) || cast.dst->shape != y->shape ||
        cast.dst->strides != contiguous_strides(cast.dst->shape))
      continue;
    // The cast's output: written by the cast alone and touched by no call before it, so the norm
    // may write it earlier.
    if (writes[id_of(out)].size() != 1 || touches[id_of(out)].front() != c) continue;
    *y = *cast.dst;
    list[n]->refs[0] = out;
    drop[c] = true;
    ++folded;
  }
  if (!folded) return 0;
  remove_calls(list, drop);
  return folded;
}

}  // namespace nx::compile
