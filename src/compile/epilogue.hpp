// Casts folded into the norms before them (docs/compiler.md, "Norm epilogues"): under autocast a
// norm computes in f32 and each linear after it casts the f32 output to bf16 (or f16). When that
// cast is the output's only reader, the norm writes the bf16 result itself, and the cast and the
// f32 buffer disappear from the step: the first elementwise-into-norm fusion of the compiler.
// Bit-identical: the norm kernels compute the f32 value as before and round it once to the
// narrow dtype, which is what the cast did to the stored f32 value.
#pragma once
#include <vector>

#include "compile/trace.hpp"

namespace nx::compile {

// Rewrites list (the kept calls, in order): each folded norm writes its cast's output, and the
// cast is dropped. Returns how many casts were folded.
size_t fold_casts_into_norms(Trace& trace, std::vector<Call*>& list);

}  // namespace nx::compile
