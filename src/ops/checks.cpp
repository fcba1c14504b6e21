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

void check_in_place_layout(const Tensor& dst, const char* what) {
  for (size_t d = 0; d < dst.shape().size(); ++d)
    if (dst.strides()[d] == 0 && dst.shape()[d] > 1)
      fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " of shape ", shape_str(dst.shape()), " and strides ",
           shape_str(dst.strides()), " has several elements at one memory location (dimension ", d,
           " has stride 0, an expanded view); write into a contiguous copy (nx_contiguous) instead");
}

void check_in_place_dtype(DType result, const Tensor& dst, const char* what) {
  const bool narrowing = (is_floating(result) && !is_floating(dst.dtype())) ||
                         (result != DType::Bool && dst.dtype() == DType::Bool);
  if (narrowing)
    fail(NX_ERR_DTYPE, current_api(), ": the result of dtype ", dtype_name(result), " cannot be stored in place in ",
         what, " of dtype ", dtype_name(dst.dtype()), " (use the out-of-place op, or nx_copy_ to convert)");
}

}  // namespace nx
