// Tensor collectives over a Comm: argument checks shared by the C API and data parallelism,
// then the raw NCCL call. None is recorded by autodiff (they move data, like nx_copy_).
#include "comm/comm.hpp"
#include "ops/ops.hpp"

namespace nx::dist {
namespace {

void check_tensor(const Comm& c, const Tensor& t, const char* what) {
  // NCCL calls are not backend calls, so a plan's replay would skip them: refused by name.
  if (capture_hooks())
    fail(NX_ERR_NOT_IMPLEMENTED, current_api(), ": collectives (and DDP's gradient buckets) inside a step ",
         "captured by nx_plan_run are not supported; run the plan on each rank without them");
  if (t.device() != c.device)
    fail(NX_ERR_DEVICE, current_api(), ": ", what, " is on ", device_str(t.device()), " but the communicator is on ",
         device_str(c.device));
}
void check_in_place(const Comm& c, const Tensor& t, const char* what) {
  check_tensor(c, t, what);
  if (!t.is_contiguous())
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": ", what, " of shape ", shape_str(t.shape()),
         " is a non-contiguous view; collectives work in place on contiguous tensors (nx_contiguous)");
}
void check_reducible(const Tensor& t, const char* what) {
  if (t.dtype() == DType::Bool)
    fail(NX_ERR_DTYPE, current_api(), ": ", what, " is bool, which cannot be reduced (cast it to an integer dtype)");
}
void check_blocks(const Comm& c, const Tensor& x) {
  if (x.dim() == 0 || x.shape()[0] % c.size)
    fail(NX_ERR_SHAPE, current_api(), ": x has shape ", shape_str(x.shape()), "; its first dimension must be a "
         "multiple of the communicator size ", c.size);
}

}  // namespace

void all_reduce(Comm& c, const Tensor& t, Reduce op) {
  check_in_place(c, t, "t");
  check_reducible(t, "t");
  nccl_all_reduce(c, t.data(), t.data(), size_t(t.numel()), t.dtype(), op);
  t.impl()->storage->version++;
}

void broadcast(Comm& c, const Tensor& t, int root) {
  check_in_place(c, t, "t");
  if (root < 0 || root >= c.size)
    fail(NX_ERR_INVALID_ARGUMENT, current_api(), ": root ", root, " is not a rank of a communicator of size ", c.size);
  nccl_broadcast(c, t.data(), size_t(t.numel()), t.dtype(), root);
  t.impl()->storage->version++;
}

Tensor reduce_scatter(Comm& c, const Tensor& x, Reduce op) {
  check_tensor(c, x, "x");
  check_reducible(x, "x");
  check_blocks(c, x);
  Tensor in = contiguous(detach(x));
  Shape shape = x.shape();
  shape[0] /= c.size;
  Tensor out = Tensor::empty(shape, x.dtype(), c.device);
  nccl_reduce_scatter(c, in.data(), out.data(), size_t(out.numel()), x.dtype(), op);
  return out;
}

Tensor all_gather(Comm& c, const Tensor& x) {
  check_tensor(c, x, "x");
  if (x.dim() == 0) fail(NX_ERR_SHAPE, current_api(), ": x is a scalar; all_gather concatenates along axis 0");
  Tensor in = contiguous(detach(x));
  Shape shape = x.shape();
  shape[0] *= c.size;
  Tensor out = Tensor::empty(shape, x.dtype(), c.device);
  nccl_all_gather(c, in.data(), out.data(), size_t(in.numel()), x.dtype());
  return out;
}

}  // namespace nx::dist
