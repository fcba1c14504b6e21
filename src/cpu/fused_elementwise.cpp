// Fused elementwise chains on the CPU (core/fused_program.hpp; docs/compiler.md, "Fusion"): a
// tile interpreter. The iteration shape, coalesced over every operand, is cut into tiles of at
// most kTile elements (a piece of one row, or whole short rows), spread over OpenMP threads. A
// tile gathers the inputs it reads into f32 buffers, runs each instruction over the whole tile
// with the very row functions the eager kernels call (the SIMD table's unary_f32 / binary_f32; a
// copy is the conversion alone), rounds the result to the instruction's dtype as a store and a
// reload of an f16/bf16 tensor would, and stores the outputs. The row functions give each element
// the bits of its values alone, whatever the row's length, position or strides
// (simd_kernels.inl, map1), so computing in tiles rather than in the eager kernels' rows changes
// nothing: a fused chain is bit-identical to its ops run one by one. Intermediates live in
// buffers of one tile, reused once their last reader has run, so a chain stays in L1.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "core/fused_program.hpp"
#include "core/strided.hpp"
#include "cpu/simd.hpp"

namespace nx::cpu {
namespace {

constexpr int64_t kTile = 1024;  // elements: a few live buffers of 4 KiB each stay in L1
constexpr int kMaxOperands = kFuseMaxInputs + kFuseMaxOutputs;
constexpr int kMaxBuffers = kFuseMaxInputs + kFuseMaxInstrs;

// The iteration shape coalesced over every operand (inputs, then outputs): outer dimensions and
// one inner row, as core/strided.hpp's plan_rows does for a fixed operand count.
struct Walk {
  int nd = 0, nops = 0;
  int64_t sizes[kFuseMaxRank];
  int64_t strides[kFuseMaxRank][kMaxOperands];
  int64_t inner = 1, rows = 1;
  int64_t inner_stride[kMaxOperands] = {};
};

Walk walk_of(const FusedProgram& p) {
  Walk w;
  w.nops = p.ninputs + p.noutputs;
  auto stride = [&](int k, int d) { return k < p.ninputs ? p.inputs[k].strides[d] : p.outputs[k - p.ninputs].strides[d]; };
  int n = 0;
  for (int d = 0; d < p.rank; ++d) {
    if (p.shape[d] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < w.nops && merge; ++k) merge = w.strides[n - 1][k] == stride(k, d) * p.shape[d];
    if (merge) {
      w.sizes[n - 1] *= p.shape[d];
      for (int k = 0; k < w.nops; ++k) w.strides[n - 1][k] = stride(k, d);
      continue;
    }
    w.sizes[n] = p.shape[d];
    for (int k = 0; k < w.nops; ++k) w.strides[n][k] = stride(k, d);
    ++n;
  }
  if (n > 0) {
    --n;
    w.inner = w.sizes[n];
    for (int k = 0; k < w.nops; ++k) w.inner_stride[k] = w.strides[n][k];
  }
  w.nd = n;
  for (int d = 0; d < n; ++d) w.rows *= w.sizes[d];
  return w;
}

// Rows row0 .. row0 + nrows - 1 of operand k: f(element offset of the row's start, i).
template <class F>
void for_rows(const Walk& w, int k, int64_t row0, int64_t nrows, F f) {
  int64_t idx[kFuseMaxRank], off = 0, rem = row0;
  for (int d = w.nd - 1; d >= 0; --d) {
    idx[d] = rem % w.sizes[d];
    rem /= w.sizes[d];
    off += idx[d] * w.strides[d][k];
  }
  for (int64_t r = 0; r < nrows; ++r) {
    f(off, r);
    for (int d = w.nd - 1; d >= 0; --d) {
      off += w.strides[d][k];
      if (++idx[d] < w.sizes[d]) break;
      off -= w.sizes[d] * w.strides[d][k];
      idx[d] = 0;
    }
  }
}

float widen(DType dt, const void* base, int64_t i) {
  switch (dt) {
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::Bool: return static_cast<const bool*>(base)[i] ? 1.f : 0.f;
    default: return static_cast<const float*>(base)[i];
  }
}

// n floats from s to d. Tile rows can be short (16 elements: RoPE's halves), so no library call
// per row: fixed-size copies, which the compiler inlines as vector moves.
inline void copy_floats(float* d, const float* s, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) std::memcpy(d + i, s + i, 16 * sizeof(float));
  for (; i + 4 <= n; i += 4) std::memcpy(d + i, s + i, 4 * sizeof(float));
  for (; i < n; ++i) d[i] = s[i];
}

// v (n <= kTile) rounded to dt and widened back: what storing it in a dt tensor and loading it
// gives.
void round_to(const SimdTable& t, DType dt, float* v, int64_t n) {
  if (!is_half(dt)) return;
  uint16_t stored[kTile];
  narrow_run(t, dt, stored, v, n);
  widen_run(t, dt, v, stored, n);
}

// This thread's tile buffers (64-byte aligned), kept between calls; null when out of memory (no
// exception may leave an OpenMP region).
float* scratch() {
  struct Scratch {
    float* p = nullptr;
    ~Scratch() { std::free(p); }
  };
  thread_local Scratch s;
  if (!s.p) s.p = static_cast<float*>(std::aligned_alloc(64, size_t(kMaxBuffers) * kTile * sizeof(float)));
  return s.p;
}

class Interpreter {
 public:
  explicit Interpreter(const FusedProgram& p) : p_(p), w_(walk_of(p)), t_(simd()) {
    if (w_.inner >= kTile) {
      chunks_ = (w_.inner + kTile - 1) / kTile;
      chunk_ = ((w_.inner + chunks_ - 1) / chunks_ + 15) / 16 * 16;  // <= kTile
      rows_per_tile_ = 1;
    } else {
      chunks_ = 1;
      chunk_ = w_.inner;
      rows_per_tile_ = kTile / w_.inner;
    }
    tiles_ = (w_.rows + rows_per_tile_ - 1) / rows_per_tile_ * chunks_;
    // The last instruction reading each register and input; which output stores each register.
    for (int g = 0; g < p.ninstrs; ++g) {
      last_reg_use_[g] = -1;
      store_of_[g] = -1;
    }
    for (int k = 0; k < p.ninputs; ++k) last_input_use_[k] = -1;
    for (int g = 0; g < p.ninstrs; ++g) {
      const FusedInstr& ins = p.instrs[g];
      const int nin = ins.kind == FusedInstr::Binary ? 2 : 1;
      for (int j = 0; j < nin; ++j) {
        const int x = j ? ins.b : ins.a;
        if (x >= 0) last_reg_use_[x] = g;
        else last_input_use_[-x - 1] = g;
      }
    }
    for (int o = 0; o < p.noutputs; ++o) store_of_[p.output_reg[o]] = o;
  }
  int64_t tiles() const { return tiles_; }
  int64_t numel() const { return w_.rows * w_.inner; }

  void run_tile(int64_t tile, float* buffers) {
    row0_ = tile / chunks_ * rows_per_tile_;
    nrows_ = std::min(rows_per_tile_, w_.rows - row0_);
    col0_ = tile % chunks_ * chunk_;
    ncols_ = std::min(chunk_, w_.inner - col0_);
    const int64_t m = nrows_ * ncols_;
    // Free buffers, a stack (the most recently freed, still in L1, is reused first).
    int free_list[kMaxBuffers], nfree = 0;
    for (int b = kMaxBuffers - 1; b >= 0; --b) free_list[nfree++] = b;
    int owner_input[kFuseMaxInputs], owner_reg[kFuseMaxInstrs];  // buffer index, or -1
    const float* input[kFuseMaxInputs] = {};
    const float* reg[kFuseMaxInstrs] = {};
    for (int k = 0; k < p_.ninputs; ++k) owner_input[k] = -1;
    for (int g = 0; g < p_.ninstrs; ++g) owner_reg[g] = -1;
    auto operand = [&](int8_t x) -> const float* {
      if (x >= 0) return reg[x];
      const int k = -x - 1;
      if (!input[k]) {  // first use: the tile's values (no instruction has written them yet)
        if (const float* direct = direct_pointer(k, p_.inputs[k])) {
          input[k] = direct;
        } else {
          owner_input[k] = free_list[--nfree];
          float* buf = buffers + owner_input[k] * kTile;
          gather(k, p_.inputs[k], buf);
          input[k] = buf;
        }
      }
      return input[k];
    };
    for (int g = 0; g < p_.ninstrs; ++g) {
      const FusedInstr& ins = p_.instrs[g];
      const float* a = operand(ins.a);
      const float* b = ins.kind == FusedInstr::Binary ? operand(ins.b) : nullptr;
      const int o = store_of_[g];
      float* out = o >= 0 && ins.dtype == DType::F32
                       ? const_cast<float*>(direct_pointer(p_.ninputs + o, p_.outputs[o]))
                       : nullptr;
      const bool direct_out = out != nullptr;
      if (!out) {
        owner_reg[g] = free_list[--nfree];
        out = buffers + owner_reg[g] * kTile;
      }
      switch (ins.kind) {
        case FusedInstr::Unary: t_.unary_f32(UnaryOp(ins.op), out, a, 1, m, ins.p0, ins.p1); break;
        case FusedInstr::Binary: t_.binary_f32(BinaryOp(ins.op), out, a, 1, b, 1, m); break;
        case FusedInstr::Copy:
          if (out != a) copy_floats(out, a, m);
          break;
      }
      round_to(t_, ins.dtype, out, m);
      reg[g] = out;
      if (o >= 0 && !direct_out) scatter(p_.ninputs + o, p_.outputs[o], out);
      // Buffers whose last reader this was go back to the free list.
      const int nin = ins.kind == FusedInstr::Binary ? 2 : 1;
      for (int j = 0; j < nin; ++j) {
        const int x = j ? ins.b : ins.a;
        int* owner = x >= 0 ? &owner_reg[x] : &owner_input[-x - 1];
        const int last = x >= 0 ? last_reg_use_[x] : last_input_use_[-x - 1];
        if (last == g && *owner >= 0) {
          free_list[nfree++] = *owner;
          *owner = -1;
        }
      }
      if (last_reg_use_[g] < 0 && owner_reg[g] >= 0) {  // stored only
        free_list[nfree++] = owner_reg[g];
        owner_reg[g] = -1;
      }
    }
  }

 private:
  // Operand k read or written in place: f32, contiguous along the row, the tile inside one row.
  const float* direct_pointer(int k, const FusedOperand& op) const {
    if (op.dtype != DType::F32 || w_.inner_stride[k] != 1 || nrows_ != 1) return nullptr;
    const float* p = nullptr;
    for_rows(w_, k, row0_, 1, [&](int64_t off, int64_t) { p = static_cast<const float*>(op.data) + off + col0_; });
    return p;
  }
  void gather(int k, const FusedOperand& op, float* buf) const {
    const int64_t s = w_.inner_stride[k];
    for_rows(w_, k, row0_, nrows_, [&](int64_t off, int64_t r) {
      float* d = buf + r * ncols_;
      const int64_t start = off + col0_ * s;
      if (s == 0) {
        std::fill(d, d + ncols_, widen(op.dtype, op.data, start));
        return;
      }
      switch (op.dtype) {
        case DType::F16: case DType::BF16: {  // a contiguous row through the table's run conversion
          const uint16_t* x = static_cast<const uint16_t*>(op.data) + start;
          if (s == 1) widen_run(t_, op.dtype, d, x, ncols_);
          else if (op.dtype == DType::F16) for (int64_t i = 0; i < ncols_; ++i) d[i] = f16_to_f32(x[i * s]);
          else for (int64_t i = 0; i < ncols_; ++i) d[i] = bf16_to_f32(x[i * s]);
          break;
        }
        case DType::Bool: {  // a mask cast to a float type (CPU plans only; compile/fuse.cpp)
          const bool* x = static_cast<const bool*>(op.data) + start;
          for (int64_t i = 0; i < ncols_; ++i) d[i] = x[i * s] ? 1.f : 0.f;
          break;
        }
        default: {
          const float* x = static_cast<const float*>(op.data) + start;
          if (s == 1) copy_floats(d, x, ncols_);
          else for (int64_t i = 0; i < ncols_; ++i) d[i] = x[i * s];
        }
      }
    });
  }
  void scatter(int k, const FusedOperand& op, const float* buf) const {
    const int64_t s = w_.inner_stride[k];
    for_rows(w_, k, row0_, nrows_, [&](int64_t off, int64_t r) {
      const float* v = buf + r * ncols_;
      const int64_t start = off + col0_ * s;
      switch (op.dtype) {
        case DType::F16: case DType::BF16: {
          uint16_t* d = static_cast<uint16_t*>(op.data) + start;
          if (s == 1) narrow_run(t_, op.dtype, d, v, ncols_);
          else if (op.dtype == DType::F16) for (int64_t i = 0; i < ncols_; ++i) d[i * s] = f32_to_f16(v[i]);
          else for (int64_t i = 0; i < ncols_; ++i) d[i * s] = f32_to_bf16(v[i]);
          break;
        }
        default: {
          float* d = static_cast<float*>(op.data) + start;
          if (s == 1) copy_floats(d, v, ncols_);
          else for (int64_t i = 0; i < ncols_; ++i) d[i * s] = v[i];
        }
      }
    });
  }

  const FusedProgram& p_;
  const Walk w_;
  const SimdTable& t_;
  int64_t chunks_, chunk_, rows_per_tile_, tiles_;
  int last_reg_use_[kFuseMaxInstrs], store_of_[kFuseMaxInstrs], last_input_use_[kFuseMaxInputs];
  // The tile being run (one per thread: each thread has its own Interpreter copy).
  int64_t row0_ = 0, nrows_ = 0, col0_ = 0, ncols_ = 0;
};

void check_dtypes(const FusedProgram& p) {
  auto check = [](DType dt) {
    if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16)
      fail(NX_ERR_DTYPE, current_api(), ": a fused elementwise chain on ", dtype_name(dt), " (f32, f16, bf16 only)");
  };
  for (int k = 0; k < p.ninputs; ++k)
    if (p.inputs[k].dtype != DType::Bool) check(p.inputs[k].dtype);  // bool: a mask read as 0 / 1
  for (int k = 0; k < p.noutputs; ++k) check(p.outputs[k].dtype);
  for (int g = 0; g < p.ninstrs; ++g) check(p.instrs[g].dtype);
}

}  // namespace

// reduce.cpp
void reduce_rows_produced_cpu(ReduceOp op, const View& dst, DType src_dtype, int64_t rows, int64_t cols,
                              const std::function<bool(int64_t, int64_t, void*)>& produce);

void fused_reduce_rows_cpu(const FusedProgram& p, int reg, ReduceOp op, const View& dst, int64_t rows,
                           int64_t cols) {
  check_dtypes(p);
  if (!p.contiguous || p.noutputs >= kFuseMaxOutputs || reg < 0 || reg >= p.ninstrs || rows * cols != p.numel)
    fail(NX_ERR_INTERNAL, current_api(), ": a fused reduction needs a contiguous chain with room for one more output (contiguous ",
         p.contiguous, ", outputs ", p.noutputs, " of ", kFuseMaxOutputs, ", register ", reg, " of ", p.ninstrs, ", rows ",
         rows, " x cols ", cols, " for ", p.numel, " elements)");
  if (p.numel == 0) return;
  const DType dt = p.instrs[reg].dtype;
  // Elements [first, first + n) of the chain, contiguous in every operand, as a one-dimensional
  // program whose extra output is register reg, into buf.
  auto produce = [&](int64_t first, int64_t n, void* buf) {
    FusedProgram q = p;
    q.rank = 1;
    q.shape[0] = q.numel = n;
    for (int k = 0; k < q.ninputs; ++k) {
      q.inputs[k].data = static_cast<char*>(p.inputs[k].data) + first * int64_t(dtype_size(p.inputs[k].dtype));
      q.inputs[k].strides[0] = 1;
    }
    for (int k = 0; k < q.noutputs; ++k) {
      q.outputs[k].data = static_cast<char*>(p.outputs[k].data) + first * int64_t(dtype_size(p.outputs[k].dtype));
      q.outputs[k].strides[0] = 1;
    }
    q.outputs[q.noutputs] = FusedOperand{};
    q.outputs[q.noutputs].data = buf;
    q.outputs[q.noutputs].dtype = dt;
    q.outputs[q.noutputs].strides[0] = 1;
    q.output_reg[q.noutputs] = int8_t(reg);
    ++q.noutputs;
    float* buffers = scratch();
    if (!buffers) return false;
    Interpreter it(q);
    for (int64_t t = 0; t < it.tiles(); ++t) it.run_tile(t, buffers);
    return true;
  };
  reduce_rows_produced_cpu(op, dst, dt, rows, cols, produce);
}

void fused_elementwise_cpu(const FusedProgram& p) {
  if (p.numel == 0) return;
  check_dtypes(p);
  const Interpreter shared(p);
  const int64_t tiles = shared.tiles();
  bool no_memory = false;
#pragma omp parallel if (shared.numel() >= kParallelGrain && tiles > 1)
  {
    Interpreter it = shared;  // the tile being run is per thread
    float* buffers = scratch();
    if (!buffers) {
#pragma omp atomic write
      no_memory = true;
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; ++t)
      if (buffers) it.run_tile(t, buffers);
  }
  if (no_memory) fail(NX_ERR_OUT_OF_MEMORY, current_api(), ": no memory for the fused kernel's tiles");
}

}  // namespace nx::cpu
