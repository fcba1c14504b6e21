// A chain of elementwise ops fused into one pass (src/compile/fuse.cpp builds it, the CUDA
// backend runs it: cuda::fused_elementwise, through a kernel generated for the program, or an
// interpreter). Every element of the iteration shape loads its
// inputs (strided views, broadcast by stride 0), runs the instructions in registers and stores the
// outputs; intermediates that nothing else reads are never written to memory. Each instruction
// is the eager kernel's own per-element function, and its result is rounded to its tensor's
// dtype, so a fused chain gives the bits the unfused ops give. Floating dtypes of the f32 family
// (f32, f16, bf16) only. A plain struct: it is passed to the kernel by value.
#pragma once
#include <cstdint>

#include "core/dtype.hpp"
#include "core/fused_args.hpp"

namespace nx {

struct FusedOperand {
  void* data;
  DType dtype;
  int64_t strides[kFuseMaxRank];  // elements, over the iteration shape
};
struct FusedInstr {
  enum Kind : uint8_t { Unary, Binary, Copy } kind;
  int16_t op;      // UnaryOp or BinaryOp
  int8_t a, b;     // operands: register r >= 0, or input k as -(k + 1)
  DType dtype;     // of the op's output tensor: the result is rounded to it
  float p0, p1;    // a unary op's parameters, in its compute type
};
struct FusedProgram {
  int rank = 0, ninputs = 0, noutputs = 0, ninstrs = 0;
  bool contiguous = false;  // every operand contiguous over the shape: element e is at offset e
  int64_t shape[kFuseMaxRank] = {};
  int64_t numel = 0;
  FusedOperand inputs[kFuseMaxInputs];
  FusedOperand outputs[kFuseMaxOutputs];
  int8_t output_reg[kFuseMaxOutputs] = {};  // the register each output stores
  FusedInstr instrs[kFuseMaxInstrs];
};

}  // namespace nx
