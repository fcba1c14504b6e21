// Repeated-call elimination in a compiled step's kernel list (docs/compiler.md): an elementwise
// call (unary, binary or copy: pure functions of their inputs) identical to an earlier one of the
// list, reading the same views of buffers no call has written in between, is dropped, and every
// later read of its result reads the earlier call's result instead. Under autocast each linear
// casts its own input, so a norm output feeding q, k and v was cast three times per layer.
#pragma once
#include <vector>

#include "compile/trace.hpp"

namespace nx::compile {

// Rewrites list (the kept calls, in order) and the refs of the calls after each dropped one;
// returns how many calls were dropped.
size_t drop_repeated_calls(Trace& trace, std::vector<Call*>& list);

}  // namespace nx::compile
