// The deterministic flash backward's order of dQ additions (flash_wgmma_bwd.cu; docs/decisions.md,
// session 16). Plain integer arithmetic, host and device, so tests/cpp checks it on the CPU.
//
// Key block kb (KB keys) of a (batch, kv head) walks the query tiles (T rows) of every head of its
// group: causal from its diagonal tile on, full from position rotation(kb) of its walk on, wrapping
// around. So at one step the blocks touch different tiles. The parts of one dQ tile are added in
// the order of (the step at which a block visits it, block index); turn() says how many come before
// a block's, and the block adds when the tile's counter has reached it. In lockstep the previous
// part was added a step or more earlier, so a block seldom waits.
#pragma once

#if defined(__CUDACC__)
#define NX_FLASH_ORDER_HD __host__ __device__
#else
#define NX_FLASH_ORDER_HD
#endif

namespace nx::cuda::flash {

template <int T, int KB>
struct TileOrder {
  int tq, tk, nkb, group;
  bool causal;
  NX_FLASH_ORDER_HD TileOrder(int tq_, int tk_, int group_, bool causal_)
      : tq(tq_), tk(tk_), nkb((tk_ + KB - 1) / KB), group(group_), causal(causal_) {}
  NX_FLASH_ORDER_HD int tiles() const { return (tq + T - 1) / T; }
  // Block kb's first query tile (as KeyBlockWalk) and tiles per head.
  NX_FLASH_ORDER_HD int first_tile(int kb) const {
    const int from = kb * KB - (tk - tq);
    return causal ? (from > 0 ? from : 0) / T : 0;
  }
  NX_FLASH_ORDER_HD int per_head(int kb) const {
    const int n = tiles() - first_tile(kb);
    return n > 0 ? n : 0;
  }
  // Where block kb's walk starts (int32: the launcher checks nkb * tiles * heads < 2^31).
  NX_FLASH_ORDER_HD int rotation(int kb) const { return causal ? 0 : kb * tiles() * group / nkb; }
  // The step at which block kb adds to query tile qt of head hg (within the group); -1: never.
  NX_FLASH_ORDER_HD int step(int kb, int hg, int qt) const {
    const int first = first_tile(kb), n = per_head(kb), total = n * group;
    if (n == 0 || qt < first) return -1;
    return (hg * n + qt - first - rotation(kb) + total) % total;
  }
  // How many parts of tile (hg, qt) come before block kb's: the blocks that visit it at an
  // earlier step, or at the same step with a lower index. In closed form, as it runs once per
  // tile on the kernel's path (counting over the blocks cost the backward about 10%).
  NX_FLASH_ORDER_HD int turn(int kb, int hg, int qt) const {
    if (causal) {  // step = hg * (n - f) + qt - f: blocks with later first tiles come first
      const int off = tk - tq, f = first_tile(kb);
      auto starting_by = [&](int x) {  // blocks whose first tile is <= x
        if (x < 0) return 0;
        const int c = ((x + 1) * T + off + KB - 1) / KB;
        return c < 0 ? 0 : c > nkb ? nkb : c;
      };
      return starting_by(qt) - starting_by(f) + kb - starting_by(f - 1);
    }
    // full: step = (position - rotation) mod total, and rotations grow with the block index
    const int total = group * tiles(), pos = hg * tiles() + qt, r = rotation(kb);
    auto rotated_by = [&](int x) {  // blocks whose rotation is <= x
      if (x < 0) return 0;
      const int c = ((x + 1) * nkb + total - 1) / total;
      return c > nkb ? nkb : c;
    };
    return rotated_by(pos) - rotated_by(r) + kb - rotated_by(r - 1) + (r > pos ? nkb : 0);
  }
};

}  // namespace nx::cuda::flash
