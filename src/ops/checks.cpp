#include "ops/ops.hpp"

namespace nx {

void check_same_device(const Tensor& a, const Tensor& b, const char* what_a, const char* what_b) {
  if (a.device() != b.device())
    fail(NX_ERR_DEVICE, current_api(), ": ", what_a, " is on ", device_str(a.device()), " but ",
         what_b, " is on ", device_str(b.device()), "; move one with nx_tensor_to");
}

void check_floating(const Tensor& x, const char* what) {
  if (!is_floating(x.dtype()))
    fail(NX_ERR_DTYPE, current_api(), ": ", what, " must have a floating dtype (f32, f64, f16, bf16), got ",
         dtype_name(x.dtype()));
}

void check_integer(const Tensor& x, const char* what) {
  if (x.dtype() != DType::I32 && x.dtype() != DType::I64)
    fail(NX_ERR_DTYPE, current_api(), ": ", what, " must have an integer dtype (i32 or i64), got ",
         dtype_name(x.dtype()));
}

}  // namespace nx
