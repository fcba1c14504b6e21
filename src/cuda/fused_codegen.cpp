#include "cuda/fused_codegen.hpp"

#include <climits>
#include <fstream>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "core/cuda_iface.hpp"
#include "core/error.hpp"
#include "core/op_enums.hpp"
#include "cuda/nvrtc.hpp"

namespace nx::cuda {
namespace {

#define NX_ENUM_NAME(Enum, ...) #Enum,
const char* const kUnaryEnum[] = {NX_UNARY_OPS(NX_ENUM_NAME)};
const char* const kBinaryEnum[] = {NX_BINARY_OPS(NX_ENUM_NAME)};
#undef NX_ENUM_NAME

// The name fused_gen.cuh's load_/store_/round_ helpers carry for a dtype: its own (dtype_name).
const char* suffix(DType d) {
  if (d != DType::F32 && d != DType::F16 && d != DType::BF16)
    fail(NX_ERR_INTERNAL, "fused codegen: dtype ", dtype_name(d), " is not of the f32 family");
  return dtype_name(d);
}

// 32-bit index arithmetic when every offset fits (a 64-bit division costs several times more).
bool index32(const FusedProgram& p) {
  if (p.numel > INT_MAX) return false;
  auto fits = [&](const int64_t* strides) {
    int64_t reach = 0;
    for (int d = 0; d < p.rank; ++d) reach += (strides[d] < 0 ? -strides[d] : strides[d]) * (p.shape[d] - 1);
    return reach <= INT_MAX;
  };
  for (int k = 0; k < p.ninputs; ++k)
    if (!fits(p.inputs[k].strides)) return false;
  for (int k = 0; k < p.noutputs; ++k)
    if (!fits(p.outputs[k].strides)) return false;
  return true;
}

// What the source depends on, as bytes: the in-memory map's key, cheaper to build than the source.
std::string structure_key(const FusedProgram& p) {
  std::string k;
  auto put = [&k](int64_t v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(p.rank), put(p.contiguous), put(p.contiguous ? 0 : index32(p)), put(p.ninputs), put(p.noutputs), put(p.ninstrs);
  auto operand = [&](const FusedOperand& o) {
    put(int64_t(o.dtype));
    int64_t zero_strides = 0;
    if (!p.contiguous)
      for (int d = 0; d < p.rank; ++d) zero_strides |= int64_t(o.strides[d] == 0) << d;
    put(zero_strides);
  };
  for (int i = 0; i < p.ninputs; ++i) operand(p.inputs[i]);
  for (int i = 0; i < p.noutputs; ++i) operand(p.outputs[i]), put(p.output_reg[i]);
  for (int i = 0; i < p.ninstrs; ++i) {
    const FusedInstr& in = p.instrs[i];
    put(in.kind), put(in.op), put(in.a), put(in.b), put(int64_t(in.dtype));
  }
  return k;
}

std::string operand_name(int8_t x) { return x >= 0 ? cat('r', int(x)) : cat("x[", -x - 1, ']'); }

// Offset of element (i0, .., i{rank-1}) in an operand: its zero strides are left out.
std::string offset_expr(const FusedProgram& p, const char* strides, int k, const int64_t* values) {
  std::string e;
  for (int d = 0; d < p.rank; ++d) {
    if (values[d] == 0) continue;
    e += cat(e.empty() ? "" : " + ", 'i', d, " * I(p.", strides, '[', k, "][", d, "])");
  }
  return e.empty() ? "I(0)" : e;
}

}  // namespace

std::string fused_kernel_source(const FusedProgram& p) {
  const int nin = p.ninputs > 0 ? p.ninputs : 1, nout = p.noutputs > 0 ? p.noutputs : 1;
  std::ostringstream s;
  s << "#include \"cuda/fused_gen.cuh\"\nusing namespace nx;\nusing namespace nx::gen;\n\n";
  s << "__device__ __forceinline__ void body(const FusedKernelArgs& p, const float (&x)[" << nin << "], float (&y)["
    << nout << "]) {\n";
  for (int i = 0; i < p.ninstrs; ++i) {
    const FusedInstr& in = p.instrs[i];
    std::string expr;
    if (in.kind == FusedInstr::Unary)
      expr = cat("float_unary<float>(UnaryOp::", kUnaryEnum[in.op], ", ", operand_name(in.a), ", p.p0[", i, "], p.p1[", i, "])");
    else if (in.kind == FusedInstr::Binary)
      expr = cat("float_binary<float>(BinaryOp::", kBinaryEnum[in.op], ", ", operand_name(in.a), ", ", operand_name(in.b), ")");
    else
      expr = operand_name(in.a);
    s << "  const float r" << i << " = round_" << suffix(in.dtype) << "(" << expr << ");\n";
  }
  for (int o = 0; o < p.noutputs; ++o) s << "  y[" << o << "] = r" << int(p.output_reg[o]) << ";\n";
  s << "}\n\n";
  s << "extern \"C\" __global__ void __launch_bounds__(" << kFusedThreads
    << ") nx_fused(const __grid_constant__ FusedKernelArgs p) {\n";
  s << "  const long long step = (long long)gridDim.x * blockDim.x;\n";
  s << "  long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n";
  s << "  float x[" << nin << "], y[" << nout << "];\n";
  if (p.contiguous) {
    // Four elements per thread and step, in one access per operand, where every address allows.
    s << "  if (p.vectorized) {\n    const long long groups = p.numel / 4;\n";
    s << "    for (long long v = e; v < groups; v += step) {\n";
    s << "      float xv[" << nin << "][4], yv[" << nout << "][4];\n";
    for (int k = 0; k < p.ninputs; ++k)
      s << "      load4_" << suffix(p.inputs[k].dtype) << "(p.in[" << k << "], v, xv[" << k << "]);\n";
    s << "#pragma unroll\n      for (int j = 0; j < 4; ++j) {\n";
    s << "        for (int k = 0; k < " << p.ninputs << "; ++k) x[k] = xv[k][j];\n";
    s << "        body(p, x, y);\n";
    s << "        for (int o = 0; o < " << p.noutputs << "; ++o) yv[o][j] = y[o];\n      }\n";
    for (int o = 0; o < p.noutputs; ++o)
      s << "      store4_" << suffix(p.outputs[o].dtype) << "(p.out[" << o << "], v, yv[" << o << "]);\n";
    s << "    }\n    e += groups * 4;\n  }\n";
    s << "  for (; e < p.numel; e += step) {\n";
    for (int k = 0; k < p.ninputs; ++k)
      s << "    x[" << k << "] = load_" << suffix(p.inputs[k].dtype) << "(p.in[" << k << "], e);\n";
    s << "    body(p, x, y);\n";
    for (int o = 0; o < p.noutputs; ++o)
      s << "    store_" << suffix(p.outputs[o].dtype) << "(p.out[" << o << "], e, y[" << o << "]);\n";
    s << "  }\n}\n";
    return s.str();
  }
  s << "  typedef " << (index32(p) ? "int" : "long long") << " I;\n";
  s << "  for (; e < p.numel; e += step) {\n";
  s << "    I rem = I(e);\n";
  for (int d = p.rank - 1; d >= 1; --d)
    s << "    const I i" << d << " = rem % I(p.shape[" << d << "]);\n    rem /= I(p.shape[" << d << "]);\n";
  s << "    const I i0 = rem;\n";
  for (int k = 0; k < p.ninputs; ++k)
    s << "    x[" << k << "] = load_" << suffix(p.inputs[k].dtype) << "(p.in[" << k << "], "
      << offset_expr(p, "in_strides", k, p.inputs[k].strides) << ");\n";
  s << "    body(p, x, y);\n";
  for (int o = 0; o < p.noutputs; ++o)
    s << "    store_" << suffix(p.outputs[o].dtype) << "(p.out[" << o << "], "
      << offset_expr(p, "out_strides", o, p.outputs[o].strides) << ", y[" << o << "]);\n";
  s << "  }\n}\n";
  return s.str();
}

FusedKernelArgs fused_kernel_args(const FusedProgram& p) {
  FusedKernelArgs a{};
  a.numel = p.numel;
  for (int d = 0; d < p.rank; ++d) a.shape[d] = p.shape[d];
  bool aligned = p.contiguous;
  auto vector_aligned = [](const FusedOperand& o) {
    return reinterpret_cast<uintptr_t>(o.data) % (4 * dtype_size(o.dtype)) == 0;
  };
  for (int k = 0; k < p.ninputs; ++k) {
    a.in[k] = p.inputs[k].data;
    for (int d = 0; d < p.rank; ++d) a.in_strides[k][d] = p.inputs[k].strides[d];
    aligned = aligned && vector_aligned(p.inputs[k]);
  }
  for (int k = 0; k < p.noutputs; ++k) {
    a.out[k] = p.outputs[k].data;
    for (int d = 0; d < p.rank; ++d) a.out_strides[k][d] = p.outputs[k].strides[d];
    aligned = aligned && vector_aligned(p.outputs[k]);
  }
  for (int i = 0; i < p.ninstrs; ++i) a.p0[i] = p.instrs[i].p0, a.p1[i] = p.instrs[i].p1;
  a.vectorized = aligned;
  return a;
}

bool fused_codegen_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("NEXUS_FUSE_CODEGEN");
    return !(env && std::string(env) == "0") && nvrtc_available();
  }();
  return enabled;
}

// Two knobs for finding a kernel that misbehaves (docs/compiler.md): NEXUS_FUSE_CODEGEN_LIMIT=n
// gives only the first n structures of the process generated kernels (the rest run the
// interpreter), so a bisection over n names the first wrong one; NEXUS_FUSE_DUMP=dir writes the
// source of structure k to dir/k.cu.
const void* generated_kernel(int device, const FusedProgram& p) {
  if (!fused_codegen_enabled()) return nullptr;
  static const long long limit = [] {
    const char* env = std::getenv("NEXUS_FUSE_CODEGEN_LIMIT");
    return env && *env ? std::atoll(env) : -1;
  }();
  static const char* dump = std::getenv("NEXUS_FUSE_DUMP");
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, const void*> kernels;  // by structure
  std::pair<int, std::string> key{device, structure_key(p)};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = kernels.find(key);
  if (it != kernels.end()) return it->second;
  const long long index = static_cast<long long>(kernels.size());
  const std::string source = fused_kernel_source(p);
  if (dump && *dump) std::ofstream(cat(dump, '/', index, ".cu")) << source;
  const bool allowed = limit < 0 || index < limit;
  return kernels[std::move(key)] = allowed ? runtime_kernel(device, source, "nx_fused") : nullptr;
}

bool fused_prepare(int device, const FusedProgram& p) { return generated_kernel(device, p) != nullptr; }


}  // namespace nx::cuda
