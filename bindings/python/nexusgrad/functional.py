"""Every op of nexus.h as a function named like PyTorch's (nexusgrad.exp, nexusgrad.softmax...).

Arguments that PyTorch calls ``dim`` map to the C API's ``axis``; tensor arguments also accept
Python scalars (a 0-d tensor of PyTorch's dtype is made on the other operand's device). Every
function is differentiable where the engine records the op (floating-point inputs).
"""
from __future__ import annotations

import math
import operator
import os
from collections import namedtuple
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _nexus as _C
from ._dtypes import BY_VALUE, DType, DTypeLike, DeviceLike, int64, to_dtype, to_device
from .tensor import Tensor, _as_tensor, _backward_options, _options, _wrap, no_grad as _no_grad, ones_like
from . import _ops_gen
from ._ops_gen import *  # noqa: F401,F403  (the ops whose wrappers src/ops/ops.yaml declares)
from ._opargs import _S, _as_tensor_index, _axes, _pair, _reduction, _t

__all__ = [
    # elementwise
    "subtract", "multiply", "divide", "true_divide", "pow",
    "where", "negative",
    "gelu",
    "clamp", "clip", "square", "bias_gelu", "add_", "mul_", "copy_",
    # reductions
    "max", "min", "var", "std", "argmax", "argmin",
    # linear algebra, softmax
    "mm", "bmm", "flash_attention", "scaled_dot_product_attention",
    "quantize_8bit", "kv_cache_append_8bit", "attention_decode_8bit", "flash_attention_fp8",
    # shape
    "reshape", "view", "swapaxes", "permute", "narrow", "slice", "expand", "squeeze",
    "cast", "cat", "concat", "concatenate", "stack", "split", "chunk",
    "detach", "to",
    # indexing
    "embedding", "one_hot",
    # losses
    "cross_entropy", "nll_loss", "binary_cross_entropy_with_logits", "bce_with_logits",
    # autograd
    "backward", "grad", "jvp", "checkpoint", "backward_checked", "Graph",
    # I/O, runtime
    "save_safetensors", "load_safetensors", "SafeTensorsFile", "set_num_threads", "get_num_threads",
    "cpu_simd_level", "set_cpu_simd_level", "live_tensor_count", "version", "abi_version", "cuda",
]
# Not listed, so that `from .functional import *` and the coverage check of test_ops_vs_torch leave
# them alone: sub_, div_ and clamp_ (Tensor methods only, like torch's), save and load (exported
# by the package as nexusgrad.save / nexusgrad.load; tested in test_torch_idioms).
# ... and the generated wrappers (_ops_gen.py), listed once there:
__all__ += [n for n in _ops_gen.__all__ if n not in __all__]












# ---------------------------------------------------------------- elementwise, binary








def pow(input: Any, exponent: Any) -> Tensor:
    """input ** exponent (nx_pow_scalar when exponent is a Python number and input floating)."""
    if type(input) is Tensor and isinstance(exponent, (int, float)) and not isinstance(exponent, bool) \
            and input.is_floating_point():
        return _wrap(_C.nx_pow_scalar(input._h, float(exponent), _S))
    a, b = _pair(input, exponent)
    return _wrap(_C.nx_pow(a, b, _S))


















def where(condition: Tensor, input: Any, other: Any) -> Tensor:
    """condition ? input : other, broadcasting; condition must be a bool tensor."""
    like = input if type(input) is Tensor else other if type(other) is Tensor else condition
    a, b = _pair(input, other) if (type(input) is Tensor or type(other) is Tensor) else \
        (_t(input, like)._h, _t(other, like)._h)
    return _wrap(_C.nx_where(_t(condition)._h, a, b, _S))


subtract, multiply, divide, true_divide = sub, mul, div, div


# ---------------------------------------------------------------- elementwise, unary


negative = neg


def square(input: Tensor) -> Tensor:
    """input ** 2."""
    return _wrap(_C.nx_pow_scalar(input._h, 2.0, _S)) if input.is_floating_point() else mul(input, input)




def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (approximate='none', erf) or its tanh approximation (approximate='tanh')."""
    if approximate not in ("none", "tanh"):
        raise _C.InvalidArgumentError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return _wrap(_C.nx_gelu(input._h, approximate == "tanh", _S))


def clamp(input: Tensor, min: Optional[float] = None, max: Optional[float] = None) -> Tensor:
    """min(max(input, min), max); either bound may be None."""
    lo = -math.inf if min is None else float(min)
    hi = math.inf if max is None else float(max)
    return _wrap(_C.nx_clamp(input._h, lo, hi, _S))


clip = clamp




def bias_gelu(input: Tensor, bias: Any, approximate: str = "none") -> Tensor:
    """gelu(input + bias) in one fused kernel (approximate 'none' or 'tanh')."""
    a, b = _pair(input, bias)
    return _wrap(_C.nx_bias_gelu(a, b, approximate == "tanh", _S))




def add_(input: Tensor, other: Any, alpha: Any = 1) -> Tensor:
    """In place: input += alpha * other (broadcast to input's shape). Refused on tensors that
    require grad while grad mode is on (autodiff does not record in-place ops), and detected by
    backward when input was saved (StateError)."""
    if alpha != 1:
        other = other * alpha
    _C.nx_add_(input._h, _t(other, input)._h, _S)
    return input


def sub_(input: Tensor, other: Any, alpha: Any = 1) -> Tensor:
    """In place: input -= alpha * other."""
    return add_(input, other, -alpha)


def mul_(input: Tensor, other: Any) -> Tensor:
    """In place: input *= other."""
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        _C.nx_mul_scalar_(input._h, float(other), _S)
    else:
        _C.nx_mul_(input._h, _t(other, input)._h, _S)
    return input


def div_(input: Tensor, other: Any) -> Tensor:
    """In place: input /= other (floating input; true division, as torch refuses it on integers)."""
    input /= other
    return input


def clamp_(input: Tensor, min: Optional[float] = None, max: Optional[float] = None) -> Tensor:
    """In place: input = clamp(input, min, max)."""
    return copy_(input, clamp(input, min, max))


def copy_(input: Tensor, src: Any) -> Tensor:
    """In place: copies src (broadcast, cast) into input."""
    _C.nx_copy_(input._h, _t(src, input)._h, _S)
    return input


# ---------------------------------------------------------------- reductions
MaxResult = namedtuple("MaxResult", ["values", "indices"])










def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """max(t): the maximum; max(t, dim): (values, indices) like PyTorch; max(a, b): maximum(a, b)."""
    if type(dim) is Tensor:
        return maximum(input, dim)
    if dim is None:
        return amax(input)
    return MaxResult(amax(input, dim, keepdim), argmax(input, dim, keepdim))


def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """min(t): the minimum; min(t, dim): (values, indices); min(a, b): minimum(a, b)."""
    if type(dim) is Tensor:
        return minimum(input, dim)
    if dim is None:
        return amin(input)
    return MaxResult(amin(input, dim, keepdim), argmin(input, dim, keepdim))


def var(input: Tensor, dim: Any = None, correction: Optional[int] = None, keepdim: bool = False,
        unbiased: Optional[bool] = None) -> Tensor:
    """Variance over dim with `correction` subtracted from the count (default 1, unbiased)."""
    if correction is None:
        correction = 0 if unbiased is False else 1
    return _wrap(_C.nx_var(input._h, _axes(dim), int(correction), bool(keepdim), _S))


def std(input: Tensor, dim: Any = None, correction: Optional[int] = None, keepdim: bool = False,
        unbiased: Optional[bool] = None) -> Tensor:
    """sqrt(var(...))."""
    return sqrt(var(input, dim, correction, keepdim, unbiased))


def argmax(input: Tensor, dim: Optional[int] = None, keepdim: bool = False) -> Tensor:
    """Index (int64) of the first maximum along dim (None: of the flattened tensor)."""
    if dim is None:
        return _wrap(_C.nx_argmax(_C.nx_reshape(input._h, [-1], _S), 0, False, _S))
    return _wrap(_C.nx_argmax(input._h, int(dim), bool(keepdim), _S))


def argmin(input: Tensor, dim: Optional[int] = None, keepdim: bool = False) -> Tensor:
    """Index (int64) of the first minimum along dim (computed as argmax of -input)."""
    with _no_grad():
        n = neg(input) if input.dtype is not BY_VALUE[_C.NX_BOOL] else eq(input, False)
        return argmax(n, dim, keepdim)


# ---------------------------------------------------------------- linear algebra, softmax


mm = bmm = matmul








# ---------------------------------------------------------------- attention
def flash_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, alibi: bool = False,
                    scale: Optional[float] = None) -> Tensor:
    """softmax(q k^T * scale + bias) v without materializing the scores. q [B, H, Tq, D], k and v
    [B, Hkv, Tk, D] with H a multiple of Hkv (grouped-query). Query i sits at position Tk - Tq + i
    (so causal with Tq < Tk is a prefill after a KV cache); alibi adds the standard ALiBi bias;
    scale None means 1/sqrt(D)."""
    return _wrap(_C.nx_flash_attention(q._h, k._h, v._h, bool(causal), bool(alibi),
                                       0.0 if scale is None else float(scale), _S))


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, is_causal: bool = False,
                                 scale: Optional[float] = None) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention without a mask or dropout (flash_attention).
    With is_causal and fewer queries than keys, queries are aligned to the last keys (KV cache)."""
    return flash_attention(query, key, value, causal=is_causal, scale=scale)


# ---------------------------------------------------------------- 8-bit KV cache (inference only)
def quantize_8bit(input: Tensor, dtype: Any, keep_dims: int) -> Tuple[Tensor, Tensor]:
    """(codes, scale): input quantized to int8, float8_e4m3fn or float8_e5m2 with one f32 absmax
    scale per index of its first keep_dims dimensions (scale shape input.shape[:keep_dims], [1] for
    0); codes * scale approximates input (nx_quantize_8bit)."""
    out, scale = _C.nx_quantize_8bit(input._h, to_dtype(dtype).value, int(keep_dims), _S)
    return _wrap(out), _wrap(scale)


def kv_cache_append_8bit(cache: Tensor, scale: Tensor, x: Tensor, pos: Tensor) -> None:
    """Writes x [B, Hkv, T, D] into rows pos[b] .. pos[b] + T of the 8-bit cache [B, Hkv, Tmax, D]
    and its per-row scales [B, Hkv, Tmax], in place (pos: int32 [B]; rows past Tmax are dropped)."""
    _C.nx_kv_cache_append_8bit(cache._h, scale._h, x._h, pos._h, _S)


def attention_decode_8bit(q: Tensor, k_cache: Tensor, k_scale: Tensor, v_cache: Tensor, v_scale: Tensor,
                          lengths: Tensor, causal: bool = False, alibi: bool = False,
                          scale: Optional[float] = None) -> Tensor:
    """flash_attention of q [B, H, Tq, D] against an 8-bit cache with per-row scales; lengths
    (int32 [B]) gives each sequence's valid rows, and query i of sequence b sits at position
    lengths[b] - Tq + i (nx_attention_decode_8bit)."""
    return _wrap(_C.nx_attention_decode_8bit(q._h, k_cache._h, k_scale._h, v_cache._h, v_scale._h, lengths._h,
                                             bool(causal), bool(alibi), 0.0 if scale is None else float(scale), _S))


def flash_attention_fp8(q: Tensor, q_scale: Tensor, k: Tensor, k_scale: Tensor, v: Tensor, v_scale: Tensor,
                        causal: bool = False, alibi: bool = False, scale: Optional[float] = None,
                        out_dtype: Any = "bfloat16") -> Tensor:
    """Inference attention on float8_e4m3fn q [B, H, Tq, D], k, v [B, Hkv, Tk, D], each worth codes *
    its f32 scale ([1], per head [B, heads], or per row [B, heads, T]; v: [1] or per head), with the
    probabilities rounded to e4m3 as an FP8 P V product takes them (nx_flash_attention_fp8)."""
    return _wrap(_C.nx_flash_attention_fp8(q._h, q_scale._h, k._h, k_scale._h, v._h, v_scale._h, bool(causal),
                                           bool(alibi), 0.0 if scale is None else float(scale),
                                           to_dtype(out_dtype).value, _S))


# ---------------------------------------------------------------- shape
def _size_args(shape: Tuple[Any, ...]) -> List[int]:
    """f(x, 2, 3) and f(x, [2, 3]) / f(x, (2, 3)) alike."""
    if len(shape) == 1 and not isinstance(shape[0], int) and not hasattr(shape[0], "__index__"):
        if isinstance(shape[0], (str, bytes)):
            raise TypeError(f"a shape must be a sequence of ints, not {type(shape[0]).__name__}")
        return [operator.index(s) for s in shape[0]]
    return [operator.index(s) for s in shape]


def reshape(input: Tensor, *shape: Any) -> Tensor:
    """A view when the strides allow, else a copy; one dimension may be -1."""
    return _wrap(_C.nx_reshape(input._h, _size_args(shape), _S))


def view(input: Tensor, *shape: Any) -> Tensor:
    """Like reshape but never copies (ShapeError instead)."""
    return _wrap(_C.nx_view(input._h, _size_args(shape), _S))




swapaxes = transpose


def permute(input: Tensor, *dims: Any) -> Tensor:
    """Reorders the axes (a view)."""
    return _wrap(_C.nx_permute(input._h, _size_args(dims), _S))


def slice(input: Tensor, dim: int, start: int = 0, end: Optional[int] = None, step: int = 1) -> Tensor:
    """Elements start, start+step, ... < end along dim (Python slice semantics, step > 0; a view)."""
    return _wrap(_C.nx_slice(input._h, int(dim), int(start), (1 << 63) - 1 if end is None else int(end),
                             int(step), _S))


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    """input along dim from start for length elements (a view)."""
    return _wrap(_C.nx_slice(input._h, int(dim), int(start), int(start) + int(length), 1, _S))


def expand(input: Tensor, *sizes: Any) -> Tensor:
    """Broadcasts size-1 dimensions to sizes (-1 keeps one), a stride-0 view."""
    return _wrap(_C.nx_expand(input._h, _size_args(sizes), _S))


def squeeze(input: Tensor, dim: Any = None) -> Tensor:
    """Removes dim (which must have size 1), or every size-1 axis when dim is None."""
    if dim is not None:
        return _wrap(_C.nx_squeeze(input._h, int(dim), _S))
    h = input._h
    shape = _C.nx_tensor_shape(h)
    for axis in range(len(shape) - 1, -1, -1):
        if shape[axis] == 1:
            h = _C.nx_squeeze(h, axis, _S)
    return input if h is input._h else _wrap(h)










def cast(input: Tensor, dtype: DTypeLike) -> Tensor:
    """input's values in dtype (always a new tensor)."""
    return _wrap(_C.nx_cast(input._h, to_dtype(dtype).value, _S))


def to(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """Same as input.to(...)."""
    return input.to(*args, **kwargs)


def detach(input: Tensor) -> Tensor:
    """A view of input outside the graph."""
    return input.detach()


def _handles(tensors: Sequence[Any]) -> List[Any]:
    if not tensors:
        return []
    like = next((t for t in tensors if type(t) is Tensor), None)
    return [_t(t, like)._h for t in tensors]


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Joins tensors along an existing axis."""
    return _wrap(_C.nx_cat(_handles(tensors), int(dim), _S))


concat = concatenate = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Joins tensors along a new axis."""
    return _wrap(_C.nx_stack(_handles(tensors), int(dim), _S))


def split(tensor: Tensor, split_size_or_sections: Union[int, Sequence[int]], dim: int = 0) -> Tuple[Tensor, ...]:
    """Views of tensor along dim: chunks of split_size_or_sections elements (the last may be smaller),
    or pieces of the listed sizes (which must sum to the axis size)."""
    if isinstance(split_size_or_sections, int):
        n = tensor.shape[dim]
        k = split_size_or_sections
        if k <= 0:
            raise _C.InvalidArgumentError(f"split size must be positive, got {k}")
        sizes = [k] * (n // k) + ([n % k] if n % k else [])
        if not sizes:
            sizes = [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
    return tuple(_wrap(h) for h in _C.nx_split(tensor._h, sizes, int(dim), _S))


def chunk(input: Tensor, chunks: int, dim: int = 0) -> Tuple[Tensor, ...]:
    """Splits into `chunks` pieces of ceil(size / chunks) elements (PyTorch's rule)."""
    n = input.shape[dim]
    k = -(-n // chunks) if n else 1
    return split(input, k, dim)


# ---------------------------------------------------------------- indexing




def embedding(input: Any, weight: Tensor) -> Tensor:
    """Rows of weight [num, dim] at the integer indices input (any shape): shape input.shape + [dim].
    (PyTorch's argument order: torch.nn.functional.embedding(input, weight).)"""
    idx = input if type(input) is Tensor else _as_tensor_index(input, weight)
    return _wrap(_C.nx_embedding(weight._h, idx._h, _S))


def one_hot(tensor: Tensor, num_classes: int = -1, dtype: DTypeLike = int64) -> Tensor:
    """indices -> indices.shape + [num_classes] (num_classes -1: max index + 1). int64 by default."""
    if num_classes < 0:
        num_classes = int(amax(tensor).item()) + 1 if tensor.numel() else 0
    return _wrap(_C.nx_one_hot(tensor._h, int(num_classes), to_dtype(dtype).value, _S))




# ---------------------------------------------------------------- losses
def cross_entropy(input: Tensor, target: Tensor, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits [N, C] against integer classes [N] (PyTorch's defaults)."""
    return _wrap(_C.nx_cross_entropy(input._h, target._h, int(ignore_index), float(label_smoothing),
                                     _reduction(reduction), _S))


def nll_loss(input: Tensor, target: Tensor, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities [N, C] against integer classes [N]."""
    return _wrap(_C.nx_nll_loss(input._h, target._h, int(ignore_index), _reduction(reduction), _S))




def binary_cross_entropy_with_logits(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:
    """Binary cross-entropy on logits (stable)."""
    return _wrap(_C.nx_bce_with_logits(input._h, _t(target, input)._h, _reduction(reduction), _S))


bce_with_logits = binary_cross_entropy_with_logits


# ---------------------------------------------------------------- autograd
def backward(tensor: Tensor, grad_tensor: Optional[Any] = None, retain_graph: bool = False,
             create_graph: bool = False) -> None:
    """Backpropagates from tensor into the .grad of every leaf that requires grad. grad_tensor None
    means ones (tensor must then have one element). retain_graph keeps the saved tensors for another
    backward; create_graph records the backward pass so gradients can be differentiated again."""
    g = None if grad_tensor is None else _t(grad_tensor, tensor)._h
    _C.nx_backward(tensor._h, g, _backward_options(retain_graph, create_graph), _S)


def grad(outputs: Tensor, inputs: Union[Tensor, Sequence[Tensor]], grad_outputs: Optional[Any] = None,
         retain_graph: Optional[bool] = None, create_graph: bool = False,
         allow_unused: bool = False) -> Tuple[Optional[Tensor], ...]:
    """torch.autograd.grad: d outputs / d inputs (a tuple, one per input) without touching .grad.
    Inputs that do not reach outputs give None when allow_unused, else an InvalidArgumentError."""
    single = type(inputs) is Tensor
    ins = [inputs] if single else list(inputs)
    if isinstance(outputs, (list, tuple)):
        if len(outputs) != 1:
            raise _C.NotSupportedError("grad takes one output tensor (sum several outputs first)")
        outputs = outputs[0]
    if isinstance(grad_outputs, (list, tuple)):
        grad_outputs = grad_outputs[0] if grad_outputs else None
    g = None if grad_outputs is None else _t(grad_outputs, outputs)._h
    retain = create_graph if retain_graph is None else bool(retain_graph)
    hs = _C.nx_autograd_grad(outputs._h, g, [t._h for t in ins], _backward_options(retain, create_graph), _S)
    res = tuple(None if h is None else _wrap(h) for h in hs)
    if not allow_unused and any(r is None for r in res):
        i = next(i for i, r in enumerate(res) if r is None)
        raise _C.InvalidArgumentError(f"grad: input {i} does not reach the output (pass allow_unused=True)")
    return res


def jvp(output: Tensor, inputs: Union[Tensor, Sequence[Tensor]], tangents: Union[Tensor, Sequence[Tensor]]) -> Tensor:
    """Forward-mode directional derivative J v of output = f(inputs), already computed with grad
    recording, for the tangents v (one per input, same shapes)."""
    ins = [inputs] if type(inputs) is Tensor else list(inputs)
    tans = [tangents] if type(tangents) is Tensor else list(tangents)
    return _wrap(_C.nx_jvp(output._h, [t._h for t in ins], [_t(v, ins[0])._h for v in tans], _S))


def _handle_function(function: Callable[..., Any], what: str) -> Callable[[List[Any]], List[Any]]:
    """function(*Tensors) -> a Tensor or a sequence of Tensors, as the callable that the C API's
    callbacks (nx_checkpoint_fn, nx_plan_fn) run through the low-level layer: it takes a list of
    tensor handles and returns a list of handles. what names the caller in the errors."""
    def trampoline(handles: List[Any]) -> List[Any]:
        res = function(*[_wrap(h) for h in handles])
        outs = [res] if isinstance(res, Tensor) else list(res) if isinstance(res, (tuple, list)) else [res]
        for o in outs:
            if not isinstance(o, Tensor):
                raise TypeError(f"{what}: the function must return Tensors, got {type(o).__name__}")
        return [o._h for o in outs]

    return trampoline


def checkpoint(function: Callable[..., Any], *inputs: Tensor, num_outputs: int = 1) -> Any:
    """Gradient checkpointing: function(*inputs) runs now without recording, and again inside
    backward to rebuild its graph, so the activations inside are not kept. function must be
    deterministic and return num_outputs tensors (one Tensor when num_outputs == 1). Note: the C API
    cannot tell when the graph dies, so `function` is kept alive for the life of the process."""
    trampoline = _handle_function(function, "checkpoint")
    hs = _C.nx_checkpoint(int(num_outputs), [t._h for t in inputs], trampoline, _S)
    outs = tuple(_wrap(h) for h in hs)
    return outs[0] if num_outputs == 1 else outs


def backward_checked(tensor: Tensor, grad_tensor: Optional[Any] = None) -> None:
    """backward() that checks every gradient for NaN/Inf and raises StateError naming the first node
    whose output gradient is not finite."""
    g = None if grad_tensor is None else _t(grad_tensor, tensor)._h
    _C.nx_backward(tensor._h, g, _backward_options(check_finite=True), _S)


class Graph:
    """A snapshot of the graph that produced a tensor (nodes in topological order, root first)."""

    def __init__(self, root: Tensor) -> None:
        self._g = _C.nx_graph_create(root._h)
        self._named = False

    def __len__(self) -> int:
        return _C.nx_graph_node_count(self._g)

    @property
    def nodes(self) -> List[str]:
        """Node names ('MatmulBackward'...)."""
        return [_C.nx_graph_node_name(self._g, i) for i in range(len(self))]

    @property
    def saved_bytes(self) -> int:
        """Bytes held by tensors the nodes saved for backward."""
        return _C.nx_graph_saved_bytes(self._g)

    def to_dot(self, values: bool = False, saved_bytes: bool = False) -> str:
        """Graphviz DOT text of the graph: with values, each leaf's, saved tensor's and the output's
        min / max / mean and NaN / Inf counts; with saved_bytes, each op's saved bytes. Leaves are
        named after the parameters of the modules given to name_parameters."""
        if not values and not saved_bytes and not self._named:
            return _C.nx_graph_to_dot(self._g)
        return _C.nx_graph_dump(self._g, _options(_C.nx_graph_dump_options, values=bool(values),
                                                  saved_bytes=bool(saved_bytes)))

    def node_saved_bytes(self, i: int) -> int:
        """Bytes held by the tensors node i saved for backward."""
        return _C.nx_graph_node_saved_bytes(self._g, operator.index(i))

    def name_parameters(self, module: Any) -> "Graph":
        """Labels the leaves that are module's parameters with their names in to_dot(). module must
        be a layer of nexusgrad.nn (the engine names its parameters), not a Python subclass of Module."""
        if getattr(module, "_m", None) is None:
            raise _C.NotSupportedError("Graph.name_parameters: names come from an engine layer (nn.Linear, "
                                       "nn.GPT...); a Python nn.Module subclass has no engine handle")
        _C.nx_graph_name_parameters(self._g, module._m)
        self._named = True
        return self

    def __repr__(self) -> str:
        return f"Graph({self.nodes})"


# ---------------------------------------------------------------- SafeTensors
class SafeTensorsFile:
    """A validated .safetensors file: keys(), get(name, device), metadata(key), dict-like access."""

    def __init__(self, path: str) -> None:
        self._st = _C.nx_safetensors_open(str(path))

    def keys(self) -> List[str]:
        return [_C.nx_safetensors_name(self._st, i) for i in range(_C.nx_safetensors_count(self._st))]

    def get(self, name: str, device: DeviceLike = "cpu") -> Tensor:
        return _wrap(_C.nx_safetensors_get(self._st, name, to_device(device), _S))

    def __getitem__(self, name: str) -> Tensor:
        return self.get(name)

    def __len__(self) -> int:
        return _C.nx_safetensors_count(self._st)

    def __iter__(self) -> Any:
        return iter(self.keys())

    def metadata(self, key: str) -> Optional[str]:
        return _C.nx_safetensors_metadata(self._st, key)

    def __enter__(self) -> "SafeTensorsFile":
        return self

    def __exit__(self, *a: Any) -> None:
        pass


def save(obj: Dict[str, Tensor], f: Any) -> None:
    """torch.save for what training scripts save most: a dict of name -> Tensor (a state_dict),
    written to the path f as SafeTensors. Other objects raise TypeError: SafeTensors holds tensors
    only, and unlike a pickle it cannot run code when loaded (Tensors also pickle, for other
    objects). File objects are not accepted, only paths."""
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()):
        raise TypeError(f"nexusgrad.save writes a dict of str -> Tensor (a state_dict) as SafeTensors, not "
                        f"{type(obj).__name__}; pickle other objects (Tensors pickle)")
    save_safetensors(os.fspath(f), obj)


def load(f: Any, map_location: DeviceLike = None) -> Dict[str, Tensor]:
    """torch.load of a file written by :func:`save` (or any .safetensors file): a dict of name ->
    Tensor on map_location (a device; default the CPU). The keys come in the file's order, which
    SafeTensors sorts by name, not in the order they were saved."""
    return load_safetensors(os.fspath(f), "cpu" if map_location is None else map_location)


def load_safetensors(path: str, device: DeviceLike = "cpu") -> Dict[str, Tensor]:
    """All tensors of a .safetensors file (malformed files raise FileError, an OSError)."""
    f = SafeTensorsFile(path)
    return {k: f.get(k, device) for k in f.keys()}


def save_safetensors(path: str, tensors: Dict[str, Tensor]) -> None:
    """Writes named tensors to path."""
    names = list(tensors.keys())
    _C.nx_safetensors_save(str(path), names, [tensors[n]._h for n in names])


# ---------------------------------------------------------------- runtime
def set_num_threads(n: int) -> None:
    """CPU threads used by kernels (<= 0 restores the default: all cores)."""
    _C.nx_cpu_set_num_threads(int(n))


def get_num_threads() -> int:
    return _C.nx_cpu_get_num_threads()


def cpu_simd_level() -> str:
    """'avx512', 'avx2' or 'scalar': the CPU kernels chosen at run time."""
    return _C.nx_cpu_get_simd_level()


def set_cpu_simd_level(level: str) -> None:
    """Forces a SIMD level (NotSupportedError if the processor lacks it)."""
    _C.nx_cpu_set_simd_level(level)


def live_tensor_count() -> int:
    """Number of tensor handles alive in the engine (for leak checks)."""
    return _C.nx_live_handle_count(_C.NX_HANDLE_TENSOR)


def version() -> str:
    return _C.nx_version_string()


def abi_version() -> int:
    return _C.nx_abi_version()


class _Cuda:
    """nexusgrad.cuda: device count, synchronization, allocator statistics, TF32."""

    @staticmethod
    def is_available() -> bool:
        return _C.nx_cuda_device_count() > 0

    @staticmethod
    def device_count() -> int:
        return _C.nx_cuda_device_count()

    @staticmethod
    def synchronize() -> None:
        """Waits for all work on every device's default stream."""
        _C.nx_stream_synchronize(None)

    @staticmethod
    def memory_stats(device: int = 0) -> Dict[str, int]:
        return _C.nx_cuda_get_memory_stats(int(device))

    @staticmethod
    def memory_allocated(device: int = 0) -> int:
        return _C.nx_cuda_get_memory_stats(int(device))["allocated_bytes"]

    @staticmethod
    def reset_peak_memory_stats(device: int = 0) -> None:
        _C.nx_cuda_reset_peak_memory(int(device))

    @staticmethod
    def empty_cache(device: int = 0) -> None:
        _C.nx_cuda_empty_cache(int(device))

    @staticmethod
    def set_tf32(enabled: bool) -> None:
        """TF32 tensor cores for f32 matmul and flash attention (head_dim 64/128) on CUDA, like
        torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 together."""
        _C.nx_cuda_set_tf32(bool(enabled))

    @staticmethod
    def tf32_enabled() -> bool:
        return _C.nx_cuda_get_tf32()


cuda = _Cuda()


# ---------------------------------------------------------------- Tensor methods
def _install_methods() -> None:
    def method(fn: Callable[..., Any]) -> Callable[..., Any]:
        def m(self: Tensor, *args: Any, **kwargs: Any) -> Any:
            return fn(self, *args, **kwargs)

        m.__name__ = m.__qualname__ = fn.__name__
        m.__doc__ = fn.__doc__
        return m

    names = ["pow", "gelu", "clamp", "clip", "square", "add_", "sub_", "mul_", "div_", "clamp_", "copy_", "max",
             "min", "var",
             "std", "argmax", "argmin", "reshape", "view", "permute", "narrow", "expand", "squeeze",
             "split", "chunk"]
    g = globals()
    for name in dict.fromkeys(names + _ops_gen.METHODS):
        setattr(Tensor, name, method(g[name]))

    def fill_(self: Tensor, value: float) -> Tensor:
        """Sets every element to value, in place."""
        _C.nx_copy_(self._h, _as_tensor(value, self)._h, _S)
        return self

    def zero_(self: Tensor) -> Tensor:
        """Sets every element to 0, in place."""
        return fill_(self, 0)

    def t(self: Tensor) -> Tensor:
        return transpose(self, 0, 1) if self.ndim == 2 else self

    def expand_as(self: Tensor, other: Tensor) -> Tensor:
        return expand(self, list(other.shape))

    def view_as(self: Tensor, other: Tensor) -> Tensor:
        return view(self, list(other.shape))

    def reshape_as(self: Tensor, other: Tensor) -> Tensor:
        return reshape(self, list(other.shape))

    Tensor.fill_ = fill_
    Tensor.zero_ = zero_
    Tensor.t = t
    Tensor.expand_as = expand_as
    Tensor.view_as = view_as
    Tensor.reshape_as = reshape_as


_install_methods()
