// Views and layouts: broadcast_shapes, reshape as a view vs a copy (checked against a brute-force
// viewability oracle), permute/transpose/slice/expand geometry, contiguous(), View::broadcast,
// the strided row walker (nx::cpu::for_each_row, directly and through the backend's copy) on
// awkward layouts, and the nx::Error status codes of internals (the ops' own errors are the op
// harness's error variants).
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <optional>

#include "autograd/engine.hpp"
#include "cpp_test_util.hpp"
#include "core/strided.hpp"

namespace {

using nx::DType;
using nx::Shape;
using nx::Tensor;
using nxt::status_of;
using nxt::values;

// ---------------------------------------------------------------- helpers
// Row-major multi-index of linear index i in shape.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return idx;
}
int64_t dot(const std::vector<int64_t>& idx, const Shape& strides) {
  int64_t o = 0;
  for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * strides[d];
  return o;
}

// A [0, 1, 2, ...] f64 tensor: element values are their own storage offsets.
Tensor iota(const Shape& shape) {
  std::vector<double> v(size_t(nx::numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i);
  return nxt::make(v, shape);
}

// Expected logical contents of a view of an iota storage: storage offset of each element.
std::vector<double> offsets_of(const Tensor& t) {
  std::vector<double> out(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[size_t(i)] = double(nxt::element_offset(t, i));
  return out;
}

bool same_storage(const Tensor& a, const Tensor& b) { return a.impl()->storage == b.impl()->storage; }

// Brute force: strides that make new_shape address exactly the elements of t in row-major order,
// if they exist (strides of size-1 dimensions are reported as 0: they are never used).
std::optional<Shape> view_oracle(const Tensor& t, const Shape& new_shape) {
  const int64_t n = t.numel();
  Shape st(new_shape.size(), 0);
  auto offset_at = [&](int64_t lin) { return nxt::element_offset(t, lin) - t.offset(); };
  const Shape unit = nx::contiguous_strides(new_shape);
  for (size_t d = 0; d < new_shape.size(); ++d)
    if (new_shape[d] > 1) st[d] = offset_at(unit[d]);
  for (int64_t i = 0; i < n; ++i)
    if (dot(unravel(i, new_shape), st) != offset_at(i)) return std::nullopt;
  return st;
}

// ---------------------------------------------------------------- broadcast_shapes
Shape broadcast_oracle(Shape a, Shape b, bool* ok) {
  while (a.size() < b.size()) a.insert(a.begin(), 1);
  while (b.size() < a.size()) b.insert(b.begin(), 1);
  Shape out(a.size());
  *ok = true;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || b[i] == 1) out[i] = a[i];
    else if (a[i] == 1) out[i] = b[i];
    else *ok = false;
  }
  return out;
}

TEST(Broadcast, Rules) {
  EXPECT_EQ(nx::broadcast_shapes({3, 1}, {1, 4}), (Shape{3, 4}));
  EXPECT_EQ(nx::broadcast_shapes({}, {2, 3}), (Shape{2, 3}));
  EXPECT_EQ(nx::broadcast_shapes({2, 3}, {}), (Shape{2, 3}));
  EXPECT_EQ(nx::broadcast_shapes({5, 1, 4}, {3, 1}), (Shape{5, 3, 4}));
  EXPECT_EQ(nx::broadcast_shapes({0}, {1}), (Shape{0}));
  EXPECT_EQ(nx::broadcast_shapes({1}, {0}), (Shape{0}));
  EXPECT_EQ(nx::broadcast_shapes({2, 1, 0}, {7, 1}), (Shape{2, 7, 0}));
  EXPECT_EQ(status_of([] { nx::broadcast_shapes({2}, {3}); }), NX_ERR_SHAPE);
  EXPECT_EQ(status_of([] { nx::broadcast_shapes({2, 3}, {3, 2}); }), NX_ERR_SHAPE);
  EXPECT_EQ(status_of([] { nx::broadcast_shapes({0}, {2}); }), NX_ERR_SHAPE);
  // random pairs against the oracle, both orders
  std::mt19937_64 g(1);
  int failures = 0, ok_count = 0;
  for (int it = 0; it < 5000; ++it) {
    Shape a(g() % 5), b(g() % 5);
    for (auto& d : a) d = int64_t(g() % 4);
    for (auto& d : b) d = int64_t(g() % 4);
    if (g() % 2) {  // make them compatible most of the time
      for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        int64_t& x = a[a.size() - 1 - i];
        int64_t& y = b[b.size() - 1 - i];
        if (x != y && x != 1 && y != 1) (g() % 2 ? x : y) = 1;
      }
    }
    bool ok;
    Shape want = broadcast_oracle(a, b, &ok);
    for (int order = 0; order < 2; ++order) {
      const Shape& p = order ? b : a;
      const Shape& q = order ? a : b;
      nx_status st = status_of([&] {
        Shape got = nx::broadcast_shapes(p, q);
        if (got != want) ++failures;
      });
      if (ok != (st == NX_OK)) ++failures;
      if (!ok && st != NX_ERR_SHAPE) ++failures;
    }
    ok_count += ok;
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(ok_count, 1000);
  EXPECT_LT(ok_count, 4900);
}

TEST(Broadcast, BinaryOpValuesFollowTheRules) {
  std::mt19937_64 g(2);
  Tensor a = nxt::make(nxt::uniform(g, 6, -1, 1), {2, 1, 3});
  Tensor b = nxt::make(nxt::uniform(g, 4, -1, 1), {4, 1});
  Tensor c = nx::sub(a, b);
  ASSERT_EQ(c.shape(), (Shape{2, 4, 3}));
  auto va = values(a), vb = values(b), vc = values(c);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(vc[size_t((i * 4 + j) * 3 + k)], va[size_t(i * 3 + k)] - vb[size_t(j)]);
}

TEST(Broadcast, ViewBroadcastStrides) {
  Tensor t = iota({3, 1});
  nx::View v = nx::View::broadcast(t, {2, 3, 4});
  EXPECT_EQ(v.shape, (Shape{2, 3, 4}));
  EXPECT_EQ(v.strides, (Shape{0, 1, 0}));
  EXPECT_EQ(v.data, t.data());
  EXPECT_EQ(v.dtype, DType::F64);
  // a transposed (non-contiguous) source keeps its real strides on the non-broadcast dims
  Tensor m = nx::transpose(iota({4, 5}), 0, 1);  // [5, 4] strides [1, 5]
  nx::View w = nx::View::broadcast(m, {3, 5, 4});
  EXPECT_EQ(w.strides, (Shape{0, 1, 5}));
  Tensor s = iota({});
  EXPECT_EQ(nx::View::broadcast(s, {2, 2}).strides, (Shape{0, 0}));
  // a sliced view: data points at its first element
  Tensor sl = nx::slice(iota({4, 5}), 1, 2, 5, 1);
  nx::View u = nx::View::broadcast(sl, {2, 4, 3});
  EXPECT_EQ(*static_cast<double*>(u.data), 2.0);
  EXPECT_EQ(u.strides, (Shape{0, 5, 1}));
}

// ---------------------------------------------------------------- geometry of views
TEST(Views, PermuteTransposeStrides) {
  Tensor x = iota({2, 3, 4});
  EXPECT_EQ(x.strides(), (Shape{12, 4, 1}));
  Tensor p = nx::permute(x, {2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_TRUE(same_storage(p, x));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(values(p), offsets_of(p));
  Tensor n = nx::permute(x, {-1, -3, -2});  // negative entries wrap
  EXPECT_EQ(n.strides(), p.strides());
  Tensor t = nx::transpose(x, 0, -1);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  // p[i][j][k] == x[j][k][i]
  auto vx = values(x), vp = values(p);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(vp[size_t((i * 2 + j) * 3 + k)], vx[size_t((j * 3 + k) * 4 + i)]);
  // permuting back is the identity view
  Tensor back = nx::permute(p, {1, 2, 0});
  EXPECT_EQ(back.strides(), x.strides());
  EXPECT_TRUE(back.is_contiguous());
}

TEST(Views, SliceStridesAndOffsets) {
  Tensor x = iota({5, 7});
  Tensor s = nx::slice(x, 1, 1, 7, 2);  // columns 1, 3, 5
  EXPECT_EQ(s.shape(), (Shape{5, 3}));
  EXPECT_EQ(s.strides(), (Shape{7, 2}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_EQ(values(s), offsets_of(s));
  Tensor r = nx::slice(s, 0, -3, 100, 2);  // rows 2, 4 (negative start, end clamped)
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_EQ(r.strides(), (Shape{14, 2}));
  EXPECT_EQ(r.offset(), 1 + 2 * 7);
  EXPECT_EQ(values(r), (std::vector<double>{15, 17, 19, 29, 31, 33}));
  Tensor e = nx::slice(x, 0, 3, 2, 1);  // empty
  EXPECT_EQ(e.shape(), (Shape{0, 7}));
  EXPECT_EQ(e.numel(), 0);
  Tensor last = nx::slice(x, -1, -1, 7, 1);
  EXPECT_EQ(last.shape(), (Shape{5, 1}));
  EXPECT_EQ(values(last), (std::vector<double>{6, 13, 20, 27, 34}));
  EXPECT_TRUE(same_storage(r, x));
  // split = consecutive slices
  auto parts = nx::split(x, {2, 0, 5}, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), (Shape{5, 2}));
  EXPECT_EQ(parts[1].shape(), (Shape{5, 0}));
  EXPECT_EQ(parts[2].offset(), 2);
  EXPECT_EQ(values(parts[2]), offsets_of(parts[2]));
}

TEST(Views, ExpandStrides) {
  Tensor x = iota({3, 1});
  Tensor e = nx::expand(x, {2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_TRUE(same_storage(e, x));
  auto v = values(e);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(v[size_t(i)], double((i / 4) % 3));
  Tensor k = nx::expand(x, {-1, 5});  // -1 keeps the size
  EXPECT_EQ(k.shape(), (Shape{3, 5}));
  EXPECT_EQ(k.strides(), (Shape{1, 0}));
  // expanding an already expanded view keeps stride 0
  Tensor ee = nx::expand(nx::unsqueeze(k, 0), {4, 3, 5});
  EXPECT_EQ(ee.strides(), (Shape{0, 1, 0}));
}

TEST(Views, SqueezeUnsqueezeFlatten) {
  Tensor x = nx::transpose(iota({3, 4}), 0, 1);  // [4, 3] strides [1, 4]
  Tensor u = nx::unsqueeze(x, 1);
  EXPECT_EQ(u.shape(), (Shape{4, 1, 3}));
  EXPECT_TRUE(same_storage(u, x));  // inserting a size-1 dim never needs a copy
  EXPECT_EQ(values(u), values(x));
  Tensor s = nx::squeeze(u, 1);
  EXPECT_EQ(s.shape(), (Shape{4, 3}));
  EXPECT_EQ(s.strides(), x.strides());
  EXPECT_EQ(nx::unsqueeze(x, -1).shape(), (Shape{4, 3, 1}));
  Tensor f = nx::flatten(iota({2, 3, 4, 5}), 1, 2);
  EXPECT_EQ(f.shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(nx::flatten(iota({}), 0, -1).shape(), (Shape{1}));
  Tensor ft = nx::flatten(x, 0, 1);  // needs a copy
  EXPECT_FALSE(same_storage(ft, x));
  EXPECT_EQ(values(ft), values(x));
}

TEST(Views, ReshapeViewOrCopy) {
  Tensor x = iota({2, 3, 4});
  Tensor r = nx::reshape(x, {6, 4});
  EXPECT_TRUE(same_storage(r, x));
  EXPECT_EQ(r.strides(), (Shape{4, 1}));
  EXPECT_EQ(nx::reshape(x, {4, -1}).shape(), (Shape{4, 6}));
  EXPECT_EQ(nx::reshape(x, {-1}).shape(), (Shape{24}));

  // transposed: flattening needs a copy, with the transposed order of elements
  Tensor t = nx::transpose(iota({3, 4}), 0, 1);
  Tensor tf = nx::reshape(t, {12});
  EXPECT_FALSE(same_storage(tf, t));
  EXPECT_TRUE(tf.is_contiguous());
  EXPECT_EQ(values(tf), values(t));
  EXPECT_EQ(values(tf), (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // splitting a dimension of it is a view (flattening it is view's error: the op harness's)
  Tensor ts = nx::view(t, {2, 2, 3});
  EXPECT_TRUE(same_storage(ts, t));
  EXPECT_EQ(ts.strides(), (Shape{2, 1, 4}));

  // a row-sliced tensor: rows keep a stride of 8, so [3, 2, 2] is a view and [12] is not
  Tensor s = nx::slice(iota({6, 4}), 0, 0, 6, 2);
  EXPECT_EQ(s.strides(), (Shape{8, 1}));
  Tensor sv = nx::reshape(s, {3, 2, 2});
  EXPECT_TRUE(same_storage(sv, s));
  EXPECT_EQ(sv.strides(), (Shape{8, 2, 1}));
  EXPECT_EQ(values(sv), values(s));
  Tensor sc = nx::reshape(s, {12});
  EXPECT_FALSE(same_storage(sc, s));
  EXPECT_EQ(values(sc), values(s));

  // expanded: size-1 splits stay views with stride 0
  Tensor e = nx::expand(iota({3, 1}), {3, 4});
  Tensor ev = nx::reshape(e, {3, 2, 2});
  EXPECT_TRUE(same_storage(ev, e));
  EXPECT_EQ(ev.strides(), (Shape{1, 0, 0}));
  Tensor ec = nx::reshape(e, {12});
  EXPECT_FALSE(same_storage(ec, e));
  EXPECT_EQ(values(ec), values(e));

  // zero elements: any shape with zero elements (-1 next to a 0 is reshape's error: the harness's)
  Tensor z = iota({0, 3});
  EXPECT_EQ(nx::reshape(z, {3, 0, 5}).shape(), (Shape{3, 0, 5}));
  // scalars
  EXPECT_EQ(nx::reshape(iota({}), {1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(nx::reshape(iota({1, 1}), {}).shape(), Shape{});
}

// Random layouts and target shapes: view() succeeds exactly when the oracle finds strides, and
// then uses them; reshape() always gives the right elements.
TEST(Views, ViewMatchesBruteForceOracle) {
  std::mt19937_64 g(42);
  int views = 0, copies = 0, mismatches = 0;
  for (int it = 0; it < 3000; ++it) {
    // a base tensor of 1..4 dims, then a random permutation, slice and expand
    Shape shape(1 + g() % 4);
    for (auto& d : shape) d = int64_t(1 + g() % 4);
    Tensor t = iota(shape);
    Shape perm_dims(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) perm_dims[i] = int64_t(i);
    std::shuffle(perm_dims.begin(), perm_dims.end(), g);
    if (g() % 3) t = nx::permute(t, perm_dims);
    if (g() % 2) {
      int64_t ax = int64_t(g() % size_t(t.dim()));
      int64_t n = t.shape()[size_t(ax)];
      int64_t start = int64_t(g() % size_t(n)), step = 1 + int64_t(g() % 2);
      t = nx::slice(t, ax, start, n, step);
    }
    if (g() % 4 == 0) {
      Shape es = t.shape();
      es.insert(es.begin(), 2);
      t = nx::expand(nx::unsqueeze(t, 0), es);
    }
    // a random target shape with the same number of elements
    int64_t n = t.numel();
    Shape target;
    int64_t rest = n;
    while (rest > 1) {
      std::vector<int64_t> divisors;
      for (int64_t d = 2; d <= rest; ++d)
        if (rest % d == 0) divisors.push_back(d);
      int64_t d = divisors[g() % divisors.size()];
      target.push_back(d);
      rest /= d;
      if (g() % 4 == 0) target.push_back(1);
    }
    std::shuffle(target.begin(), target.end(), g);
    auto want = view_oracle(t, target);
    Tensor v;
    nx_status st = status_of([&] { v = nx::view(t, target); });
    if (bool(want) != (st == NX_OK)) {
      ++mismatches;
      ADD_FAILURE() << "view " << nx::shape_str(t.shape()) << " strides " << nx::shape_str(t.strides()) << " -> "
                    << nx::shape_str(target) << ": oracle " << (want ? "viewable" : "not viewable") << ", engine status "
                    << st;
      continue;
    }
    if (want) {
      ++views;
      EXPECT_TRUE(same_storage(v, t));
      for (size_t d = 0; d < target.size(); ++d)
        if (target[d] > 1) {
          EXPECT_EQ(v.strides()[d], (*want)[d]) << nx::shape_str(target);
        }
      EXPECT_EQ(values(v), values(t));
    } else {
      ++copies;
      EXPECT_EQ(st, NX_ERR_SHAPE);
    }
    Tensor r = nx::reshape(t, target);
    EXPECT_EQ(r.shape(), target);
    EXPECT_EQ(values(r), values(t));
    EXPECT_EQ(same_storage(r, t), bool(want));
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(views, 500);
  EXPECT_GT(copies, 200);
}

TEST(Views, ContiguousCopiesOnlyWhenNeeded) {
  Tensor x = iota({3, 4});
  Tensor c = nx::contiguous(x);
  EXPECT_TRUE(same_storage(c, x));
  EXPECT_EQ(c.data(), x.data());
  Tensor t = nx::transpose(x, 0, 1);
  Tensor tc = nx::contiguous(t);
  EXPECT_FALSE(same_storage(tc, t));
  EXPECT_TRUE(tc.is_contiguous());
  EXPECT_EQ(tc.strides(), (Shape{3, 1}));
  EXPECT_EQ(values(tc), values(t));
  // size-1 dims with odd strides still count as contiguous
  Tensor odd = x.alias({3, 1, 4}, {4, 999, 1}, 0);
  EXPECT_TRUE(odd.is_contiguous());
  EXPECT_TRUE(same_storage(nx::contiguous(odd), odd));
  // a slice with an offset: contiguous rows 1..2 need no copy; the copy of a column slice does
  Tensor rows = nx::slice(x, 0, 1, 3, 1);
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(nx::contiguous(rows).data(), rows.data());
  Tensor cols = nx::slice(x, 1, 1, 3, 1);
  Tensor cc = nx::contiguous(cols);
  EXPECT_FALSE(same_storage(cc, cols));
  EXPECT_EQ(values(cc), (std::vector<double>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(cc.offset(), 0);
  // expanded
  Tensor e = nx::expand(iota({1, 3}), {2, 3});
  EXPECT_FALSE(e.is_contiguous());
  EXPECT_EQ(values(nx::contiguous(e)), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  // zero-size tensors are contiguous whatever their strides
  EXPECT_TRUE(iota({0, 5}).is_contiguous());
}

TEST(Views, CatStackIntoStridedSources) {
  Tensor a = nx::transpose(iota({3, 2}), 0, 1);          // [2, 3] non-contiguous
  Tensor b = nx::slice(iota({2, 8}), 1, 0, 8, 3);        // [2, 3] strides [8, 3]
  Tensor c = nx::cat({a, b}, 0);
  EXPECT_EQ(c.shape(), (Shape{4, 3}));
  EXPECT_EQ(values(c), (std::vector<double>{0, 2, 4, 1, 3, 5, 0, 3, 6, 8, 11, 14}));
  Tensor d = nx::cat({a, b}, -1);
  EXPECT_EQ(values(d), (std::vector<double>{0, 2, 4, 0, 3, 6, 1, 3, 5, 8, 11, 14}));
  Tensor s = nx::stack({a, b}, 1);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values(s), (std::vector<double>{0, 2, 4, 0, 3, 6, 1, 3, 5, 8, 11, 14}));
}

// ---------------------------------------------------------------- the strided walker
struct Layout {
  const char* name;
  Shape shape;
  Shape dst, src;  // strides (elements)
};

std::vector<Layout> awkward_layouts() {
  return {
      {"contiguous 3-d", {2, 3, 4}, {12, 4, 1}, {12, 4, 1}},
      {"transposed src", {4, 5}, {5, 1}, {1, 4}},
      {"size-1 dim with a junk stride", {3, 1, 5}, {5, 5, 1}, {5, 999, 1}},
      {"broadcast row", {2, 3}, {3, 1}, {0, 1}},
      {"broadcast everything", {4, 6}, {6, 1}, {0, 0}},
      {"negative strides (reversed)", {3, 4}, {4, 1}, {-4, -1}},
      {"negative outer, positive inner", {5, 3}, {3, 1}, {-3, 1}},
      {"mergeable step-2 slice", {4, 6}, {6, 1}, {12, 2}},
      {"step-2 rows and columns (not mergeable)", {4, 6}, {6, 1}, {24, 2}},
      {"permuted 4-d", {2, 3, 4, 5}, {60, 20, 5, 1}, {1, 40, 10, 2}},
      {"permuted 4-d, both sides", {2, 3, 4, 5}, {1, 2, 6, 24}, {60, 1, 15, 3}},
      {"zero-size dim", {3, 0, 2}, {0, 2, 1}, {0, 2, 1}},
      {"scalar", {}, {}, {}},
      {"all ones", {1, 1, 1}, {7, 3, 1}, {2, 9, 4}},
      {"many short rows (parallel)", {700, 3}, {3, 1}, {1, 700}},
      {"few long rows (chunked, parallel)", {2, 40000}, {40000, 1}, {1, 2}},
      {"one long row (chunked)", {100003}, {1}, {-1}},
      {"long broadcast column", {50000, 2}, {2, 1}, {1, 0}},
  };
}

// Storage span of a strided layout: the minimum offset (<= 0) and the number of elements.
std::pair<int64_t, int64_t> span(const Shape& shape, const Shape& strides) {
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return {0, 0};
    int64_t ext = (shape[d] - 1) * strides[d];
    (ext < 0 ? lo : hi) += ext;
  }
  return {lo, hi - lo + 1};
}

TEST(StridedWalker, VisitsEveryElementOnceWithMatchingOffsets) {
  for (const auto& L : awkward_layouts()) {
    const int64_t n = nx::numel_of(L.shape);
    // expected (dst offset, src offset) pairs, in row-major order of the logical index
    std::vector<std::pair<int64_t, int64_t>> want, got;
    for (int64_t i = 0; i < n; ++i) {
      auto idx = unravel(i, L.shape);
      want.push_back({dot(idx, L.dst), dot(idx, L.src)});
    }
    std::mutex mu;
    int64_t calls = 0;
    nx::cpu::for_each_row<2>(L.shape, {&L.dst, &L.src}, [&](std::array<int64_t, 2> off, int64_t len, std::array<int64_t, 2> st) {
      std::vector<std::pair<int64_t, int64_t>> local;
      for (int64_t i = 0; i < len; ++i) local.push_back({off[0] + i * st[0], off[1] + i * st[1]});
      std::lock_guard<std::mutex> lock(mu);
      got.insert(got.end(), local.begin(), local.end());
      ++calls;
    });
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got.size(), size_t(n)) << L.name;
    EXPECT_TRUE(got == want) << L.name;
    if (std::string(L.name) == "contiguous 3-d") {
      EXPECT_EQ(calls, 1) << "contiguous dims must coalesce into one row";
    }
    if (std::string(L.name) == "mergeable step-2 slice") {
      EXPECT_EQ(calls, 1) << "uniformly strided dims must coalesce";
    }
  }
}

TEST(StridedWalker, BackendCopyOnAwkwardLayouts) {
  const nx::Kernels be = nx::kernels(nxt::cpu());
  std::mt19937_64 g(8);
  for (const auto& L : awkward_layouts()) {
    auto [slo, slen] = span(L.shape, L.src);
    auto [dlo, dlen] = span(L.shape, L.dst);
    const int64_t n = nx::numel_of(L.shape);
    std::vector<double> src(size_t(std::max<int64_t>(slen, 1)));
    for (auto& v : src) v = double(g() % 100000);
    std::vector<double> dst(size_t(std::max<int64_t>(dlen, 1)), -1.0);
    nx::View sv{src.data() - slo, L.shape, L.src, DType::F64};
    nx::View dv{dst.data() - dlo, L.shape, L.dst, DType::F64};
    be.copy(dv, sv);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      auto idx = unravel(i, L.shape);
      if (dst[size_t(dot(idx, L.dst) - dlo)] != src[size_t(dot(idx, L.src) - slo)]) ++bad;
    }
    EXPECT_EQ(bad, 0) << L.name;
    // converting copy f64 -> f32 through the same walker
    std::vector<float> dst32(dst.size(), -1.f);
    nx::View d32{dst32.data() - dlo, L.shape, L.dst, DType::F32};
    be.copy(d32, sv);
    bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      auto idx = unravel(i, L.shape);
      if (dst32[size_t(dot(idx, L.dst) - dlo)] != float(src[size_t(dot(idx, L.src) - slo)])) ++bad;
    }
    EXPECT_EQ(bad, 0) << L.name << " (f64 -> f32)";
    // fill on the destination layout touches exactly the addressed elements
    std::vector<double> filled(dst.size(), -1.0);
    nx::View fv{filled.data() - dlo, L.shape, L.dst, DType::F64};
    be.fill(fv, 2.5);
    int64_t touched = 0;
    for (double v : filled) touched += v == 2.5;
    std::vector<int64_t> distinct;
    for (int64_t i = 0; i < n; ++i) distinct.push_back(dot(unravel(i, L.shape), L.dst));
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    EXPECT_EQ(touched, int64_t(distinct.size())) << L.name << " (fill)";
  }
}

TEST(StridedWalker, ElementwiseOpsOnNonContiguousInputs) {
  // The op layer hands strided views to the kernels: compare with contiguous inputs.
  std::mt19937_64 g(9);
  Tensor a = nxt::make(nxt::uniform(g, 60, -2, 2), {3, 4, 5});
  Tensor b = nxt::make(nxt::uniform(g, 20, -2, 2), {5, 4});
  Tensor at = nx::permute(a, {2, 0, 1});  // [5, 3, 4], strides [1, 20, 5]
  Tensor bs = nx::unsqueeze(b, 1);         // [5, 1, 4] broadcasts against [5, 3, 4]
  Tensor y = nx::mul(nx::exp(at), bs);
  Tensor y2 = nx::mul(nx::exp(nx::contiguous(at)), nx::contiguous(nx::expand(bs, {5, 3, 4})));
  EXPECT_EQ(values(y), values(y2));
  auto va = values(a), vb = values(b), vy = values(y);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k)
        EXPECT_DOUBLE_EQ(vy[size_t((i * 3 + j) * 4 + k)], std::exp(va[size_t((j * 4 + k) * 5 + i)]) * vb[size_t(i * 4 + k)]);
  // reductions over non-contiguous axes
  Tensor s = nx::sum(at, {0, 2}, false);  // [3]
  auto vs = values(s);
  for (int64_t j = 0; j < 3; ++j) {
    double want = 0;
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t k = 0; k < 4; ++k) want += va[size_t((j * 4 + k) * 5 + i)];
    EXPECT_NEAR(vs[size_t(j)], want, 1e-12);
  }
}

// ---------------------------------------------------------------- error status codes
// The registry ops' own errors (status, message, values) are error variants of their cases in
// tests/harness/op_cases.py; here: the internal ops and helpers without a C function of their
// own, and the message prefix the C shims set.
TEST(Errors, StatusCodesOfInternals) {
  Tensor x = iota({2, 3});
  Tensor i64 = nxt::make_i64({0, 1}, {2});
  EXPECT_EQ(status_of([&] { nx::Tensor::empty({2, -1}, DType::F32, nxt::cpu()); }), NX_ERR_SHAPE);
  EXPECT_EQ(status_of([&] { nx::scatter_add(x, 1, nxt::make_i64({0, 1}, {2, 1}), iota({2, 2})); }), NX_ERR_SHAPE);
  EXPECT_EQ(status_of([&] { nx::index_add(x, 0, i64, iota({2, 2})); }), NX_ERR_SHAPE);
  EXPECT_EQ(status_of([&] { nx::item(x); }), NX_ERR_SHAPE);
  EXPECT_EQ(status_of([&] { nx::randn({2}, DType::I32, nxt::cpu()); }), NX_ERR_DTYPE);
  EXPECT_EQ(status_of([&] { nx::arange(0, 1, 0, DType::F32, nxt::cpu()); }), NX_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of([&] { nx::backend(nx::Device{NX_CPU, 1}); }), NX_ERR_DEVICE);
#ifndef NEXUS_HAVE_CUDA
  EXPECT_EQ(status_of([&] { nx::zeros({2}, DType::F32, nx::Device{NX_CUDA, 0}); }), NX_ERR_DEVICE);
#endif
  // the op name prefix set by the C shim appears in the message
  try {
    nx::ApiScope scope("nx_test_op");
    nx::reshape(x, {4});
    ADD_FAILURE() << "reshape to a wrong size did not throw";
  } catch (const nx::Error& e) {
    EXPECT_EQ(e.status(), NX_ERR_SHAPE);
    EXPECT_EQ(std::string(e.what()).rfind("nx_test_op", 0), 0u) << e.what();
  }
}

TEST(Errors, StatusCodesOfAutodiff) {
  std::mt19937_64 g(3);
  Tensor w = nxt::make(nxt::uniform(g, 6, -1, 1), {2, 3});
  w.impl()->requires_grad = true;
  // in-place on a leaf that requires grad, and copies into it
  EXPECT_EQ(status_of([&] { nx::binary_(nx::BinaryOp::Add, w, iota({2, 3})); }), NX_ERR_STATE);
  EXPECT_EQ(status_of([&] { nx::unary_(nx::UnaryOp::MulScalar, w, 2.0); }), NX_ERR_STATE);
  EXPECT_EQ(status_of([&] { nx::copy_(w, iota({2, 3})); }), NX_ERR_STATE);
  {
    nx::GradModeGuard off(false);  // parameter updates: allowed without grad mode
    EXPECT_EQ(status_of([&] { nx::unary_(nx::UnaryOp::MulScalar, w, 1.0); }), NX_OK);
  }
  nx::BackwardOptions opt;
  // a root that does not require grad
  EXPECT_EQ(status_of([&] { nx::run_backward(iota({}), Tensor(), opt); }), NX_ERR_STATE);
  // a non-scalar root without an explicit gradient; a gradient of the wrong shape
  Tensor y = nx::mul(w, w);
  EXPECT_EQ(status_of([&] { nx::run_backward(y, Tensor(), opt); }), NX_ERR_SHAPE);
  EXPECT_EQ(status_of([&] { nx::run_backward(y, iota({3, 2}), opt); }), NX_ERR_SHAPE);
  // backward twice through a freed graph
  Tensor l = nx::sum(nx::exp(w), {}, false);
  EXPECT_EQ(status_of([&] { nx::run_backward(l, Tensor(), opt); }), NX_OK);
  EXPECT_EQ(status_of([&] { nx::run_backward(l, Tensor(), opt); }), NX_ERR_STATE);
  // ... fine with retain_graph
  nx::BackwardOptions keep;
  keep.retain_graph = true;
  Tensor l2 = nx::sum(nx::exp(w), {}, false);
  EXPECT_EQ(status_of([&] { nx::run_backward(l2, Tensor(), keep); }), NX_OK);
  EXPECT_EQ(status_of([&] { nx::run_backward(l2, Tensor(), keep); }), NX_OK);
  // a saved tensor modified in place after the forward
  Tensor h = nx::mul_scalar(w, 1.0);        // non-leaf
  Tensor l3 = nx::sum(nx::exp(h), {}, false);  // ExpBackward saved h
  {
    nx::GradModeGuard off(false);
    nx::unary_(nx::UnaryOp::AddScalar, h, 1.0);
  }
  EXPECT_EQ(status_of([&] { nx::run_backward(l3, Tensor(), opt); }), NX_ERR_STATE);
  // check_finite names the node that produced a non-finite gradient
  nx::BackwardOptions fin;
  fin.check_finite = true;
  Tensor z = nxt::make({0.0, 1.0}, {2});
  z.impl()->requires_grad = true;
  Tensor l4 = nx::sum(nx::unary(nx::UnaryOp::Sqrt, z), {}, false);  // d sqrt at 0 = inf
  try {
    nx::run_backward(l4, Tensor(), fin);
    ADD_FAILURE() << "check_finite did not fail";
  } catch (const nx::Error& e) {
    EXPECT_EQ(e.status(), NX_ERR_STATE);
    EXPECT_NE(std::string(e.what()).find("SqrtBackward"), std::string::npos) << e.what();
  }
}

}  // namespace
