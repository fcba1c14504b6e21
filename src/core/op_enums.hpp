// The elementwise op codes as enums, generated from the op registry (src/ops/ops.yaml, through
// op_enums.inc). Self-contained (no standard headers), because the fused kernels generated at run
// time (src/cuda/fused_codegen.cpp) are compiled by NVRTC with this very text.
#pragma once
#include "core/op_enums.inc"

namespace nx {

#define NX_ENUM_ENTRY(Enum, ...) Enum,
enum class UnaryOp { NX_UNARY_OPS(NX_ENUM_ENTRY) };
#define NX_COUNT_ENTRY(...) +1
constexpr int kUnaryOpCount = 0 NX_UNARY_OPS(NX_COUNT_ENTRY);
constexpr int kBinaryOpCount = 0 NX_BINARY_OPS(NX_COUNT_ENTRY);
#undef NX_COUNT_ENTRY
enum class BinaryOp { NX_BINARY_OPS(NX_ENUM_ENTRY) };
#undef NX_ENUM_ENTRY

}  // namespace nx
