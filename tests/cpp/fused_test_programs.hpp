// Fused programs over every floating elementwise op, for the tests of the generated fused kernels
// (tests/cpp/test_fused_codegen.cpp compiles them with NVRTC, tests/gpu/test_cuda_fused.cpp runs
// them against the interpreter kernel).
#pragma once
#include <vector>

#include "core/backend.hpp"
#include "core/fused_program.hpp"

namespace nx::fusetest {

// Parameters that keep each unary op in its interesting range.
inline void unary_params(UnaryOp op, float* p0, float* p1) {
  *p0 = 0.f, *p1 = 0.f;
  switch (op) {
    case UnaryOp::LeakyRelu: *p0 = 0.125f; break;
    case UnaryOp::Clamp: *p0 = -1.25f, *p1 = 0.75f; break;
    case UnaryOp::AddScalar: *p0 = 0.3f; break;
    case UnaryOp::MulScalar: *p0 = -1.7f; break;
    case UnaryOp::PowScalar: *p0 = 2.5f; break;
    case UnaryOp::ParCon: *p0 = 1.5f; break;
    default: break;
  }
}

struct OpRef {
  FusedInstr::Kind kind;
  int op;
};

// Every op a fused program may hold: the floating unary ops and the non-comparison binary ops.
inline std::vector<OpRef> every_fusible_op() {
  std::vector<OpRef> ops;
  for (int u = 0; u < kUnaryOpCount; ++u) ops.push_back({FusedInstr::Unary, u});
  for (int b = 0; b < kBinaryOpCount; ++b)
    if (!is_comparison(BinaryOp(b))) ops.push_back({FusedInstr::Binary, b});
  return ops;
}

// A program of ops over a shape, ninputs inputs and two outputs (the last result and one from the
// middle). Instruction k reads an input or (every chain-th) the previous result, a binary op's
// second operand is an input; instruction dtypes cycle through dtypes, a copy is placed after the
// first op, and input k has dtypes[k % size]. Strides are left 0: the caller lays the operands out.
inline FusedProgram make_program(const std::vector<OpRef>& ops, int ninputs, const std::vector<DType>& dtypes,
                                 const std::vector<int64_t>& shape, int chain = 3) {
  FusedProgram p;
  p.rank = int(shape.size());
  p.numel = 1;
  for (int d = 0; d < p.rank; ++d) p.shape[d] = shape[size_t(d)], p.numel *= shape[size_t(d)];
  p.ninputs = ninputs;
  for (int k = 0; k < ninputs; ++k) p.inputs[k].dtype = dtypes[size_t(k) % dtypes.size()];
  int n = 0;
  auto add = [&](FusedInstr::Kind kind, int op, int8_t a, int8_t b) {
    FusedInstr& in = p.instrs[n];
    in.kind = kind, in.op = int16_t(op), in.a = a, in.b = b;
    in.dtype = dtypes[size_t(n) % dtypes.size()];
    in.p0 = in.p1 = 0.f;
    if (kind == FusedInstr::Unary) unary_params(UnaryOp(op), &in.p0, &in.p1);
    ++n;
  };
  for (size_t k = 0; k < ops.size() && n < kFuseMaxInstrs; ++k) {
    const int8_t input = int8_t(-1 - int(k % size_t(ninputs)));
    const int8_t a = (n > 0 && k % size_t(chain) == size_t(chain - 1)) ? int8_t(n - 1) : input;
    add(ops[k].kind, ops[k].op, a, int8_t(-1 - int((k + 1) % size_t(ninputs))));
    if (n == 1 && n < kFuseMaxInstrs) add(FusedInstr::Copy, 0, 0, 0);
  }
  p.ninstrs = n;
  p.noutputs = n > 1 ? 2 : 1;
  p.output_reg[0] = int8_t(n - 1);
  p.output_reg[1] = int8_t(n / 2);
  for (int o = 0; o < p.noutputs; ++o) p.outputs[o].dtype = p.instrs[p.output_reg[o]].dtype;
  return p;
}

// RoPE's rotation of a pair, as a compiled GPT step fuses it: (x0 * c - x1 * s, x1 * c + x0 * s).
// A product feeding a sum in the next op is where an FMA across two ops would change the bits.
inline FusedProgram rotation_program(DType dtype, const std::vector<int64_t>& shape) {
  const OpRef mul{FusedInstr::Binary, int(BinaryOp::Mul)}, sub{FusedInstr::Binary, int(BinaryOp::Sub)},
      add{FusedInstr::Binary, int(BinaryOp::Add)};
  FusedProgram p = make_program({mul, mul, mul, mul}, 4, {dtype}, shape);
  auto set = [&](int k, OpRef op, int8_t a, int8_t b) {
    p.instrs[k].kind = op.kind, p.instrs[k].op = int16_t(op.op), p.instrs[k].a = a, p.instrs[k].b = b;
  };
  p.ninstrs = 6;
  set(0, mul, -1, -3), set(1, mul, -2, -4), set(2, sub, 0, 1);  // x0 * c - x1 * s
  set(3, mul, -2, -3), set(4, mul, -1, -4), set(5, add, 3, 4);  // x1 * c + x0 * s
  for (int k = 0; k < 6; ++k) p.instrs[k].dtype = dtype;
  p.noutputs = 2, p.output_reg[0] = 2, p.output_reg[1] = 5;
  p.outputs[0].dtype = p.outputs[1].dtype = dtype;
  return p;
}

// The ops split into programs of at most kFuseMaxInstrs - 1 instructions (room for the copy).
inline std::vector<std::vector<OpRef>> op_batches() {
  std::vector<std::vector<OpRef>> batches;
  for (const OpRef& op : every_fusible_op()) {
    if (batches.empty() || batches.back().size() == size_t(kFuseMaxInstrs - 1)) batches.emplace_back();
    batches.back().push_back(op);
  }
  return batches;
}

}  // namespace nx::fusetest
