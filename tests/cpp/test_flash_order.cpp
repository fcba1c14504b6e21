// The deterministic flash backward's order of dQ additions (src/cuda/flash_order.hpp), on the CPU:
// the closed-form turn against counting the blocks' steps, every tile's turns a permutation, and
// the blocks of a (batch, kv head) simulated in lockstep: never stuck, and on square shapes never
// waiting (the staggering that keeps deterministic mode's cost small).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "cuda/flash_order.hpp"

namespace {

using nx::cuda::flash::TileOrder;

struct Shape { int tq, tk, group; bool causal; };

// The blocks' walks as the kernel runs them: (head in group, query tile) per step.
template <int T, int KB>
std::vector<std::vector<std::pair<int, int>>> walks(const TileOrder<T, KB>& order) {
  std::vector<std::vector<std::pair<int, int>>> all(size_t(order.nkb));
  for (int kb = 0; kb < order.nkb; ++kb) {
    const int n = order.per_head(kb), total = n * order.group;
    for (int i = 0; i < total; ++i) {
      const int position = (i + order.rotation(kb)) % total;
      all[size_t(kb)].push_back({position / n, order.first_tile(kb) + position % n});
    }
  }
  return all;
}

template <int T, int KB>
void check_turns(const Shape& s) {
  const TileOrder<T, KB> order(s.tq, s.tk, s.group, s.causal);
  const auto all = walks(order);
  std::map<std::pair<int, int>, std::vector<int>> turns;
  for (int kb = 0; kb < order.nkb; ++kb)
    for (size_t i = 0; i < all[size_t(kb)].size(); ++i) {
      const auto [hg, qt] = all[size_t(kb)][i];
      ASSERT_EQ(order.step(kb, hg, qt), int(i)) << "kb " << kb;
      int before = 0;  // counted directly
      for (int other = 0; other < order.nkb; ++other) {
        const int at = order.step(other, hg, qt);
        before += at >= 0 && (at < int(i) || (at == int(i) && other < kb));
      }
      ASSERT_EQ(order.turn(kb, hg, qt), before)
          << "T " << T << " tq " << s.tq << " tk " << s.tk << " group " << s.group << " causal " << s.causal
          << " kb " << kb << " tile " << hg << "," << qt;
      turns[{hg, qt}].push_back(before);
    }
  for (auto& [tile, t] : turns) {
    std::sort(t.begin(), t.end());
    for (size_t j = 0; j < t.size(); ++j) ASSERT_EQ(t[j], int(j)) << "turns of a tile are not 0..n-1";
  }
}

// Rounds in which every block tries its current tile; adds land at the round's end. Returns the
// rounds taken; fails if a round moves nobody (a cycle of waits).
template <int T, int KB>
int lockstep_rounds(const Shape& s) {
  const TileOrder<T, KB> order(s.tq, s.tk, s.group, s.causal);
  const auto all = walks(order);
  std::vector<size_t> at(size_t(order.nkb), 0);
  std::map<std::pair<int, int>, int> counter;
  int rounds = 0;
  for (bool left = true; left; ++rounds) {
    std::vector<std::pair<int, int>> added;
    left = false;
    for (int kb = 0; kb < order.nkb; ++kb) {
      if (at[size_t(kb)] == all[size_t(kb)].size()) continue;
      left = true;
      const auto tile = all[size_t(kb)][at[size_t(kb)]];
      if (counter[tile] == order.turn(kb, tile.first, tile.second)) added.push_back(tile), ++at[size_t(kb)];
    }
    if (!left) break;
    EXPECT_FALSE(added.empty()) << "no block can add: the order has a cycle";
    if (added.empty()) return -1;
    for (const auto& tile : added) ++counter[tile];
  }
  return rounds;
}

TEST(FlashOrder, ClosedFormTurnEqualsCountingSteps) {
  std::mt19937 rng(16);
  std::uniform_int_distribution<int> len(1, 2500);
  const int groups[4] = {1, 2, 4, 8};
  for (int c = 0; c < 150; ++c) {
    const Shape s{len(rng), len(rng), groups[rng() % 4], rng() % 2 == 0};
    check_turns<64, 128>(s);
    check_turns<128, 128>(s);
  }
  for (const Shape& s : {Shape{4096, 4096, 1, false}, Shape{4096, 4096, 1, true}, Shape{1, 3000, 4, true},
                         Shape{3000, 1, 2, false}, Shape{2000, 500, 1, true}}) {
    check_turns<64, 128>(s);
    check_turns<128, 128>(s);
  }
}

TEST(FlashOrder, BlocksNeverWaitOnSquareShapesAndAlwaysFinish) {
  for (int t : {128, 700, 1024, 4096})
    for (int group : {1, 4})
      for (bool causal : {false, true}) {
        const Shape s{t, t, group, causal};
        const TileOrder<64, 128> o64(t, t, group, causal);
        const TileOrder<128, 128> o128(t, t, group, causal);
        // without waits every block finishes in as many rounds as its walk has steps
        EXPECT_EQ((lockstep_rounds<64, 128>(s)), o64.per_head(0) * group) << t << " " << group << " " << causal;
        EXPECT_EQ((lockstep_rounds<128, 128>(s)), o128.per_head(0) * group) << t << " " << group << " " << causal;
      }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> len(1, 2500);
  for (int c = 0; c < 60; ++c) {  // other shapes may wait, but never forever
    const Shape s{len(rng), len(rng), 1 + int(rng() % 4), rng() % 2 == 0};
    EXPECT_GT((lockstep_rounds<64, 128>(s)), 0);
    EXPECT_GT((lockstep_rounds<128, 128>(s)), 0);
  }
}

}  // namespace
