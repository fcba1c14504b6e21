#include "compile/repeated.hpp"

#include <map>
#include <tuple>

namespace nx::compile {
namespace {

bool same_view(const View& a, const View& b) {
  return a.shape == b.shape && a.strides == b.strides && a.dtype == b.dtype;
}

// What makes two elementwise calls compute the same thing, apart from the views' geometry (checked
// separately): the kernel, op and parameters, and where each input lies.
using Signature = std::tuple<std::string, int, int, double, double, std::vector<std::tuple<int, size_t, size_t>>>;

}  // namespace

size_t drop_repeated_calls(Trace& trace, std::vector<Call*>& list) {
  const auto& allocs = trace.allocations;
  // Positions in list that write each buffer.
  std::map<BufferId, std::vector<size_t>> writes;
  for (size_t i = 0; i < list.size(); ++i)
    for (const BufferRef& r : list[i]->refs)
      if (r.written) writes[id_of(r)].push_back(i);
  auto written_between = [&](const BufferRef& r, size_t after, size_t before) {
    for (size_t w : writes[id_of(r)])
      if (w > after && w < before) return true;
    return false;
  };
  // A result that can stand for another: a step temporary that this call alone writes.
  auto own_result = [&](Call* c) {
    const BufferRef& out = c->refs[0];
    return out.written && out.kind == BufferRef::Internal && allocs[out.index].died != Allocation::kAlive &&
           writes[id_of(out)].size() == 1;
  };
  std::map<Signature, std::vector<size_t>> seen;  // earlier candidates, by signature
  std::map<size_t, size_t> replaced;              // dropped result's allocation -> the one that stands for it
  std::vector<bool> drop(list.size(), false);
  size_t dropped = 0;
  for (size_t j = 0; j < list.size(); ++j) {
    Call* c = list[j];
    // Reads of a dropped call's result go to the result that stands for it.
    for (BufferRef& r : c->refs)
      if (!r.written && r.kind == BufferRef::Internal)
        if (auto it = replaced.find(r.index); it != replaced.end()) r.index = it->second;
    ElementwiseCall ew;
    if (!c->elementwise(&ew) || c->refs.size() != size_t(1 + ew.ninputs) || !own_result(c)) continue;
    Signature sig{c->name(), ew.kind, ew.op, ew.p0, ew.p1, {}};
    for (int k = 0; k < ew.ninputs; ++k) {
      const BufferRef& r = c->refs[size_t(1 + k)];
      std::get<5>(sig).emplace_back(int(r.kind), r.index, r.offset);
    }
    auto& earlier = seen[sig];
    for (size_t i : earlier) {
      ElementwiseCall first;
      list[i]->elementwise(&first);
      bool same = same_view(*first.dst, *ew.dst) && list[i]->refs[0].offset == c->refs[0].offset;
      for (int k = 0; k < ew.ninputs && same; ++k)
        same = same_view(*first.in[k], *ew.in[k]) && !written_between(c->refs[size_t(1 + k)], i, j);
      if (!same) continue;
      replaced[c->refs[0].index] = list[i]->refs[0].index;
      drop[j] = true;
      ++dropped;
      break;
    }
    if (!drop[j]) earlier.push_back(j);
  }
  if (!dropped) return 0;
  for (auto& req : trace.index_requirements)
    if (req.buffer.kind == BufferRef::Internal)
      if (auto it = replaced.find(req.buffer.index); it != replaced.end()) req.buffer.index = it->second;
  remove_calls(list, drop);
  return dropped;
}

}  // namespace nx::compile
