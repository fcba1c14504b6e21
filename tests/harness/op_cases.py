"""The op harness's case table: one Case per op of src/ops/ops.yaml (op_harness.py runs them).

A Case holds, for one op:
  ref       the PyTorch reference, called as ref(**inputs, **attrs) with the same C argument names
            as ops.yaml's `args` (a pointer + count pair is one list argument); it returns a
            tensor or a tuple (several outputs, or the inputs an in-place op writes)
  variants  the inputs and attribute values to run: each Variant maps every C argument name to an
            Arg (a tensor of the tested dtype unless it says otherwise), an Idx (valid integer
            indices), a list of Args (a tensor array), None (an optional tensor left out) or an
            attribute value (dtype attributes as "f32"..., reductions as "mean"/"sum"/"none")
  tol       tolerance overrides {"f16": (atol, rtol), "grad@bf16@cuda": ...}, keys
            [grad@]DTYPE[@DEVICE], with tol_reason (why)
  skip      modes not run, each with its reason: {"gradcheck": "why", "grad@bf16": "why", ...};
            a key is MODE[@DTYPE[@DEVICE]], MODE one of forward, grad, gradcheck, gradgrad, cuda,
            or * (a gradcheck skip also skips gradgrad: both differentiate across the inputs)
            (a Variant has its own tol, skip, ref, and `dtypes`/`devices` it is limited to; a
            gc_step: the finite-difference step, a power of two, for exact steps through an output
            that is not f64). Modes: forward, grad, gradcheck, gradgrad, cuda (op_harness.py)
  errors    error variants (Err, made with E below): arguments that must make nx_<op> fail with a
            given nx_status, its message naming nx_<op> and holding the given substrings (the values
            involved); the harness's errors mode runs them on every device present
  mutates   for ops that write their inputs (outs: none): the C names of the written inputs
  upcast_half  whether f16/bf16 inputs reach torch as float32 (True: torch's CPU half kernels
            are incomplete in 1.13, and float32 is the precision our half ops compute in)
  bench     bench/op_bench.py's larger arguments (bench_fixed, bench_kind, bench_flops: below)

Every optional tensor of an op gets, on top of the listed variants, a variant where it is None
(made by the harness from the first variant). Shapes stay small: a few hundred elements at most,
a few dozen where finite differences run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

TORCH_DTYPES = {
    "f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
    "i32": torch.int32, "i64": torch.int64, "bool": torch.bool,
}
FLOAT_DTYPES = ("f32", "f64", "f16", "bf16")
ALL_DTYPES = ("f32", "f64", "f16", "bf16", "i32", "i64", "bool")


def kind_of(dtype: str) -> str:
    return "float" if dtype in FLOAT_DTYPES else "bool" if dtype == "bool" else "int"


# ---------------------------------------------------------------- value domains
# A domain draws values for a shape and a dtype kind ("float", "int", "bool"). Integer and bool
# tensors get values of the same spirit (positive where the op needs positive inputs...).
Domain = Callable[[np.random.Generator, Tuple[int, ...], str], np.ndarray]


def U(lo: float, hi: float, ints: Optional[Tuple[int, int]] = None) -> Domain:
    """Uniform on [lo, hi]; integer dtypes get the integers in [ints] (default: those in [lo, hi])."""
    ilo, ihi = ints if ints else (math.ceil(lo), math.floor(hi))

    def draw(rng, shape, kind):
        if kind == "bool":
            return rng.random(shape) < 0.5
        if kind == "int":
            return rng.integers(ilo, ihi + 1, size=shape)
        return rng.uniform(lo, hi, size=shape)
    return draw


def Away(lo: float, hi: float) -> Domain:
    """Uniform on [-hi, -lo] U [lo, hi]: away from a kink or a pole at 0."""
    def draw(rng, shape, kind):
        sign = np.where(rng.random(shape) < 0.5, -1, 1)
        if kind == "bool":
            return np.ones(shape, bool)
        if kind == "int":
            return sign * rng.integers(max(1, math.ceil(lo)), max(1, math.floor(hi)) + 1, size=shape)
        return sign * rng.uniform(lo, hi, size=shape)
    return draw


def Grid(offset: float) -> Domain:
    """0.1 k + offset, k in -10..10: two grids with offsets 0.025 and 0.075 never come within 0.05
    of each other (maximum/minimum without ties, add_relu away from its kink)."""
    def draw(rng, shape, kind):
        if kind != "float":
            return U(-4, 4)(rng, shape, kind)
        return 0.1 * rng.integers(-10, 11, size=shape) + offset
    return draw


def Distinct() -> Domain:
    """Distinct values at least 0.01 apart (amax/amin without ties)."""
    def draw(rng, shape, kind):
        n = int(np.prod(shape, dtype=np.int64))
        if kind == "bool":
            return rng.random(shape) < 0.5
        if kind == "int":
            return (rng.permutation(2 * n + 2)[:n] - (n + 1)).reshape(shape)
        return (0.01 * (rng.permutation(400)[:n] - 200) + 0.003).reshape(shape)
    return draw


def Ties() -> Domain:
    """Small integers: many exact ties (comparisons, maximum/minimum, max/min)."""
    def draw(rng, shape, kind):
        if kind == "bool":
            return rng.random(shape) < 0.5
        return rng.integers(-2, 3, size=shape).astype(np.int64 if kind == "int" else np.float64)
    return draw


def Vals(values: Sequence[float]) -> Domain:
    """Fixed values (edge cases: kinks, thresholds, infinities); the shape must match."""
    arr = np.asarray(values, dtype=np.float64)

    def draw(rng, shape, kind):
        out = arr.reshape(shape)
        return out != 0 if kind == "bool" else np.trunc(out).astype(np.int64) if kind == "int" else out
    return draw


def Dyadic() -> Domain:
    """k / 64, k in -128..128: exact in every floating dtype, and so are x +- 2^-10 in f32 (finite
    differences through an f32 result: Variant.gc_step)."""
    def draw(rng, shape, kind):
        if kind != "float":
            return U(-2, 2)(rng, shape, kind)
        return rng.integers(-128, 129, size=shape) / 64.0
    return draw


STD = U(-2, 2)
POS = U(0.3, 3.0)


@dataclass
class Arg:
    """A tensor argument. shape is the shape the op sees; layout says how it is stored:
    "contig"; "T": a transposed view (the storage holds the last two dimensions swapped);
    "S": a strided view (every other element of the last dimension of a twice-as-wide storage).
    dtype None means the dtype under test; device None the device under test ("cpu" pins the
    tensor to the CPU: device mismatches in error variants)."""
    shape: Tuple[int, ...]
    dom: Domain = STD
    layout: str = "contig"
    dtype: Optional[str] = None
    device: Optional[str] = None


@dataclass
class Idx:
    """An integer index tensor with values in [0, high); ignore=(value, every) replaces every
    `every`-th entry (from the second) by value (ignore_index rows); values fixes them (any
    values: error variants give out-of-range ones). dtype None: the dtype under test (one_hot,
    whose declared dtypes are its indices'). layout as Arg's ("S": the skipped storage elements
    hold out-of-range junk, so that an index read as if contiguous fails)."""
    shape: Tuple[int, ...]
    high: int
    dtype: Optional[str] = "i64"
    ignore: Optional[Tuple[int, int]] = None
    values: Optional[Sequence[int]] = None
    layout: str = "contig"
    device: Optional[str] = None


@dataclass
class Variant:
    name: str
    args: Dict[str, Any]
    dtypes: Optional[Sequence[str]] = None  # run only for these tested dtypes (None: all)
    devices: Optional[Sequence[str]] = None  # run only on these devices (None: all)
    skip: Dict[str, str] = field(default_factory=dict)
    ref: Optional[Callable[..., Any]] = None  # overrides the case's ref
    tol: Dict[str, Tuple[float, float]] = field(default_factory=dict)
    tol_reason: str = ""
    gc_step: Optional[float] = None  # gradcheck's step when not the default (see the module doc)


# nx_status names an error variant expects (the harness reads their values from the bindings)
SHAPE, DTYPE, INVALID, DEVICE = "NX_ERR_SHAPE", "NX_ERR_DTYPE", "NX_ERR_INVALID_ARGUMENT", "NX_ERR_DEVICE"


@dataclass
class Err:
    """An error variant: nx_<op> on these arguments (every C argument, as in a Variant; optional
    tensors may be left out) must fail with `status` and a message that starts with "nx_<op>:"
    and contains every needle. Tensors without a dtype of their own get `dtype`. A failed call
    leaves no new handle behind and, for in-place ops, its inputs unchanged."""
    name: str
    args: Dict[str, Any]
    status: str
    needles: Sequence[str] = ()
    dtype: str = "f32"  # E's option `inputs` (ops have C arguments named dtype)
    devices: Optional[Sequence[str]] = None  # only on these devices (None: every device present)
    # struct_size given to an options struct, by C parameter ({"options": 4}); the bindings
    # otherwise set the struct's own size
    struct_sizes: Dict[str, int] = field(default_factory=dict)


@dataclass
class Case:
    op: str
    ref: Callable[..., Any]
    variants: List[Variant]
    tol: Dict[str, Tuple[float, float]] = field(default_factory=dict)
    tol_reason: str = ""
    skip: Dict[str, str] = field(default_factory=dict)
    mutates: Optional[List[str]] = None
    upcast_half: bool = True
    errors: List[Err] = field(default_factory=list)
    # bench/op_bench.py: larger arguments; --scale multiplies the leading dimension of every
    # tensor of two or more dimensions and of 1-d index tensors, except the bench_fixed ones
    bench: Optional[Dict[str, Any]] = None
    bench_fixed: Tuple[str, ...] = ()
    bench_kind: str = ""  # "", "flops": the benchmark reports FLOP/s (bench_flops computes them)
    bench_flops: Optional[Callable[..., float]] = None


CASES: Dict[str, Case] = {}


def case(op: str, ref: Callable[..., Any], variants: List[Variant], **kw: Any) -> None:
    if op in CASES:
        raise ValueError(f"op_cases.py: two cases for {op}")
    CASES[op] = Case(op, ref, variants, **kw)


def V(name: str, **args: Any) -> Variant:
    """A variant whose keyword arguments are the op's C arguments (dtypes/skip/ref/tol as options)."""
    opts = {k: args.pop(k) for k in ("dtypes", "devices", "skip", "ref", "tol", "tol_reason", "gc_step") if k in args}
    return Variant(name, args, **opts)


def E(name: str, status: str, *needles: str, **args: Any) -> Err:
    """An error variant: E("bad_axis", SHAPE, "axis 2", "rank 2", x=Arg((2, 3)), axis=2); options
    inputs= (Err.dtype: the dtype of tensors without their own), devices= and struct_sizes=."""
    opts = {k: args.pop(k) for k in ("devices", "struct_sizes") if k in args}
    if "inputs" in args:
        opts["dtype"] = args.pop("inputs")
    return Err(name, args, status, needles, **opts)


def add_errors(op: str, *errors: Err) -> None:
    CASES[op].errors.extend(errors)


# ---------------------------------------------------------------- torch helpers
def fl(t: torch.Tensor) -> torch.Tensor:
    """Integer and bool tensors as float32 (what our transcendental ops compute on them)."""
    return t if t.is_floating_point() else t.float()


def pyval(v: float) -> Any:
    """A double attribute as the Python number a caller would pass: integral values as int, so
    that an integer tensor times 3.0 stays integer (the engine's rule, and torch's for x * 3)."""
    return int(v) if float(v).is_integer() else v


def dims_of(x: torch.Tensor, axes: Sequence[int]) -> Tuple[int, ...]:
    """Reduction axes: an empty list means every axis (the C API's convention)."""
    return tuple(axes) if len(axes) else tuple(range(x.dim()))


def reduce_ref(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def ref(x, axes, keepdim):
        if x.dim() == 0:
            return fn(x)
        return fn(x, dim=dims_of(x, axes), keepdim=bool(keepdim))
    return ref


def alibi_slopes(heads: int) -> List[float]:
    """The standard ALiBi slopes, as src/ops/attention.cpp's alibi_slopes computes them."""
    def pow2(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]
    p = 1
    while p * 2 <= heads:
        p *= 2
    s = pow2(p)
    return s + pow2(2 * p)[0::2][: heads - p]


def attention_ref(q, k, v, causal, alibi, scale):
    """softmax(q k^T * scale + bias) v with grouped-query heads; query i sits at position
    Tk - Tq + i; ALiBi subtracts slope_h * (query position - key position)."""
    b, h, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    kk = k.repeat_interleave(h // hkv, dim=1) if hkv else k
    vv = v.repeat_interleave(h // hkv, dim=1) if hkv else v
    s = torch.matmul(q, kk.transpose(-1, -2)) * (scale if scale > 0 else 1.0 / math.sqrt(d))
    qpos = torch.arange(tk - tq, tk, device=q.device).view(tq, 1)
    kpos = torch.arange(tk, device=q.device).view(1, tk)
    if alibi:
        slopes = torch.tensor(alibi_slopes(h), dtype=s.dtype, device=q.device).view(1, h, 1, 1)
        s = s - slopes * (qpos - kpos).to(s.dtype)
    if causal:
        s = s.masked_fill(kpos > qpos, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), vv)


def rms_ref(x, weight, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def layer_norm_ref(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def adam_ref(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1, beta2, eps, weight_decay,
             decoupled_weight_decay):
    """One torch.optim.Adam(W) step from the given state (step - 1 steps already taken)."""
    outs_p, outs_m, outs_v = [], [], []
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        p = p.detach().clone().requires_grad_(True)
        p.grad = g.detach().clone()
        cls = torch.optim.AdamW if decoupled_weight_decay else torch.optim.Adam
        opt = cls([p], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
        opt.state[p] = {"step": torch.tensor(float(step - 1)), "exp_avg": m.detach().clone(),
                        "exp_avg_sq": v.detach().clone()}
        opt.step()
        outs_p.append(p.detach())
        outs_m.append(opt.state[p]["exp_avg"])
        outs_v.append(opt.state[p]["exp_avg_sq"])
    return tuple(outs_p + outs_m + outs_v)


# Skip reasons used more than once.
KINK = "inputs sit on a kink or a tie: finite differences straddle it (forward and grad vs torch cover it)"
NAN_OUT = "the output is NaN/inf by design here: finite differences of it are meaningless"


# ---------------------------------------------------------------- views and shape ops
def view_variants(attr: str, specs: List[Tuple[str, Tuple[int, ...], str, Any]]) -> List[Variant]:
    return [V(name, x=Arg(shape, layout=layout), **{attr: value}) for name, shape, layout, value in specs]


case("reshape", lambda x, shape: x.reshape(shape), view_variants("shape", [
    ("contig", (3, 4), "contig", [2, 6]),
    ("infer", (2, 3, 4), "contig", [4, -1]),
    ("transposed_copy", (4, 3), "T", [12]),
    ("strided_copy", (2, 3), "S", [3, 2]),
    ("scalar", (), "contig", [1]),
    ("empty", (0, 3), "contig", [3, 0]),
]), bench={"x": Arg((512, 1024), layout="T"), "shape": [-1]})

case("view", lambda x, shape: x.view(shape), view_variants("shape", [
    ("contig", (2, 3, 4), "contig", [6, 4]),
    ("transposed_split", (4, 3), "T", [2, 2, 3]),
    ("strided_split", (2, 4), "S", [2, 2, 2]),
    ("empty", (0, 4), "contig", [4, 0]),
]))

case("transpose", lambda x, dim0, dim1: x.transpose(dim0, dim1), [
    V("2d", x=Arg((3, 4)), dim0=0, dim1=1),
    V("negative_axes", x=Arg((2, 3, 4)), dim0=-1, dim1=0),
    V("transposed", x=Arg((2, 4, 3), layout="T"), dim0=0, dim1=2),
    V("empty", x=Arg((0, 3, 2)), dim0=0, dim1=2),
])

case("permute", lambda x, dims: x.permute(dims), [
    V("3d", x=Arg((2, 3, 4)), dims=[2, 0, 1]),
    V("transposed", x=Arg((4, 3, 2), layout="T"), dims=[1, 2, 0]),
    V("strided", x=Arg((2, 3), layout="S"), dims=[1, 0]),
    V("empty", x=Arg((2, 0, 3)), dims=[1, 2, 0]),
])


def slice_ref(x, axis, start, end, step):
    index = [slice(None)] * x.dim()
    index[axis % x.dim()] = slice(start, end, step)
    return x[tuple(index)]


case("slice", slice_ref, [
    V("step", x=Arg((7, 4)), axis=0, start=1, end=6, step=2),
    V("clamped_negative", x=Arg((3, 9)), axis=1, start=-7, end=100, step=3),
    V("last_axis", x=Arg((3, 4, 5)), axis=-1, start=1, end=4, step=1),
    V("transposed", x=Arg((3, 8), layout="T"), axis=1, start=2, end=8, step=3),
    V("strided", x=Arg((3, 6), layout="S"), axis=1, start=1, end=6, step=2),
    V("empty_result", x=Arg((4, 3)), axis=0, start=3, end=1, step=1),
])

case("expand", lambda x, shape: x.expand(shape), [
    V("new_axis", x=Arg((3, 1)), shape=[2, 3, 4]),
    V("keep", x=Arg((1, 4)), shape=[3, -1]),
    V("new_axis_keep", x=Arg((3, 1)), shape=[2, 3, -1]),
    V("transposed", x=Arg((3, 1), layout="T"), shape=[2, 3, 4]),
    V("to_empty", x=Arg((3, 1)), shape=[0, 3, 2]),
])

case("squeeze", lambda x, axis: x.squeeze(axis), [
    V("middle", x=Arg((3, 1, 4)), axis=1),
    V("last", x=Arg((3, 4, 1)), axis=-1),
    V("transposed", x=Arg((1, 3), layout="T"), axis=0),
    V("empty", x=Arg((0, 1, 2)), axis=1),
])

case("unsqueeze", lambda x, axis: x.unsqueeze(axis), [
    V("middle", x=Arg((3, 4)), axis=1),
    V("last", x=Arg((3, 4)), axis=-1),
    V("transposed", x=Arg((4, 3), layout="T"), axis=0),
    V("scalar", x=Arg(()), axis=0),
    V("empty", x=Arg((0, 2)), axis=2),
])

case("flatten", lambda x, start_axis, end_axis: x.flatten(start_axis, end_axis), [
    V("middle", x=Arg((2, 3, 4, 5)), start_axis=1, end_axis=2),
    V("all", x=Arg((2, 3, 4)), start_axis=0, end_axis=-1),
    V("transposed", x=Arg((2, 4, 3), layout="T"), start_axis=1, end_axis=2),
    V("empty", x=Arg((2, 0, 3)), start_axis=0, end_axis=1),
])

copy_variants = [
    V("transposed", x=Arg((4, 3), layout="T")),
    V("transposed_3d", x=Arg((2, 3, 4), layout="T")),
    V("strided", x=Arg((3, 5), layout="S")),
    V("contig", x=Arg((3, 4))),
    V("scalar", x=Arg(())),
    V("empty", x=Arg((0, 3), layout="T")),
]
case("contiguous", lambda x: x.contiguous(), copy_variants,
     bench={"x": Arg((1024, 1024), layout="T")})
case("clone", lambda x: x.clone(), copy_variants, bench={"x": Arg((1024, 1024))})

case("cast", lambda x, dtype: x.to(TORCH_DTYPES[dtype]),
     [V("to_" + d, x=Arg((3, 4), U(-5, 5)), dtype=d) for d in ALL_DTYPES] + [
         V("transposed_to_f64", x=Arg((4, 3), layout="T"), dtype="f64"),
         V("strided_to_f32", x=Arg((2, 3), layout="S"), dtype="f32"),
         V("empty_to_f32", x=Arg((0, 3)), dtype="f32"),
         # f64 -> f32: finite differences with a step f32 holds exactly (the round trip through
         # f32 of test_gradcheck.cpp's Cast, on a transposed input)
         V("dyadic_transposed_to_f32", x=Arg((3, 4), Dyadic(), "T"), dtype="f32", dtypes=("f64",),
           gc_step=2.0 ** -10),
     ],
     # torch casts between every pair on the CPU: the half values go to it as they are
     upcast_half=False, bench={"x": Arg((1024, 1024)), "dtype": "f64"})

case("cat", lambda xs, axis: torch.cat(list(xs), axis), [
    V("axis0_three", xs=[Arg((2, 3)), Arg((4, 3)), Arg((1, 3))], axis=0),
    V("last_axis", xs=[Arg((2, 3, 1)), Arg((2, 3, 4))], axis=-1),
    V("transposed", xs=[Arg((3, 2), layout="T"), Arg((3, 4))], axis=1),
    V("strided", xs=[Arg((2, 3), layout="S"), Arg((2, 2))], axis=1),
    V("with_empty", xs=[Arg((2, 3)), Arg((0, 3))], axis=0),
], bench={"xs": [Arg((512, 1024)), Arg((512, 1024))], "axis": 1})

case("stack", lambda xs, axis: torch.stack(list(xs), axis), [
    V("axis0_three", xs=[Arg((2, 3)), Arg((2, 3)), Arg((2, 3))], axis=0),
    V("last_axis", xs=[Arg((2, 3)), Arg((2, 3))], axis=-1),
    V("transposed", xs=[Arg((2, 3), layout="T"), Arg((2, 3))], axis=1),
    V("empty", xs=[Arg((0, 3)), Arg((0, 3))], axis=1),
], bench={"xs": [Arg((512, 1024)), Arg((512, 1024))], "axis": 1})

case("split", lambda x, sizes, axis: torch.split(x, list(sizes), axis), [
    V("three", x=Arg((6, 3)), sizes=[1, 3, 2], axis=0),
    V("last_axis", x=Arg((2, 3, 5)), sizes=[2, 3], axis=-1),
    V("transposed", x=Arg((4, 5), layout="T"), sizes=[4, 1], axis=1),
    V("zero_size_part", x=Arg((4, 3)), sizes=[0, 4], axis=0),
])


# ---------------------------------------------------------------- elementwise: binary
def binary_variants(da: Domain = STD, db: Domain = STD, **extra: Any) -> List[Variant]:
    """Same shapes, broadcasting both ways, a transposed and a strided operand, a 0-d operand,
    and an empty broadcast."""
    return [
        V("same_shape", a=Arg((3, 4), da), b=Arg((3, 4), db), **extra),
        V("broadcast", a=Arg((3, 1, 4), da), b=Arg((2, 4), db), **extra),
        V("transposed", a=Arg((3, 5), da, "T"), b=Arg((5,), db), **extra),
        V("strided", a=Arg((3, 4), da, "S"), b=Arg((3, 4), db, "T"), **extra),
        V("scalar_operand", a=Arg((), da), b=Arg((2, 3), db), **extra),
        V("empty", a=Arg((0, 4), da), b=Arg((4,), db), **extra),
    ]


BIN_BENCH = {"a": Arg((1024, 1024)), "b": Arg((1024, 1024))}

case("add", lambda a, b: torch.add(a, b), binary_variants(), bench=BIN_BENCH)
case("sub", lambda a, b: torch.sub(a, b), binary_variants(),
     skip={"*@bool": "torch refuses bool - bool: no reference"}, bench=BIN_BENCH)
case("mul", lambda a, b: torch.mul(a, b), binary_variants(), bench=BIN_BENCH)
case("div", lambda a, b: torch.div(a, b), binary_variants(STD, Away(0.5, 2.0)), bench=BIN_BENCH)
# Integer pow: non-negative exponents (torch refuses negative integer powers).
case("pow", lambda a, b: torch.pow(a, b), binary_variants(POS, U(-2, 2, ints=(0, 3))) + [
    V("zero_base_zero_exponent", a=Arg((5,), Vals([0.0, 0.0, 0.0, 1.5, 2.0])),
      b=Arg((5,), Vals([0.0, 2.0, 3.0, 0.0, 1.0])), dtypes=FLOAT_DTYPES,
      skip={"gradcheck": "0^b: finite differences step off the domain (log 0)"}),
], bench={"a": Arg((1024, 1024), POS), "b": Arg((1024, 1024))})

minmax_variants = binary_variants(Grid(0.025), Grid(0.075)) + [
    # exact ties share the gradient half and half, like PyTorch
    V("ties", a=Arg((4, 5), Ties()), b=Arg((4, 5), Ties()), skip={"gradcheck": KINK}),
]
case("maximum", lambda a, b: torch.maximum(a, b), minmax_variants, bench=BIN_BENCH)
case("minimum", lambda a, b: torch.minimum(a, b), minmax_variants, bench=BIN_BENCH)

compare_variants = [
    V("broadcast", a=Arg((3, 1, 5), Ties()), b=Arg((4, 5), Ties())),
    V("transposed", a=Arg((3, 5), Ties(), "T"), b=Arg((3, 5), Ties())),
    V("strided", a=Arg((2, 4), Ties(), "S"), b=Arg((4,), Ties())),
    V("scalar_operand", a=Arg((), Ties()), b=Arg((6,), Ties())),
    V("empty", a=Arg((0, 3), Ties()), b=Arg((3,), Ties())),
]
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    case(_name, lambda a, b, f=getattr(torch, _name): f(a, b), compare_variants, bench=BIN_BENCH)


def scalar_variants(attr: str, values: Sequence[float], dom: Domain = STD) -> List[Variant]:
    out = [V(f"{attr}_{v:g}", x=Arg((3, 4), dom), **{attr: v}) for v in values]
    return out + [
        V("transposed", x=Arg((5, 3), dom, "T"), **{attr: values[0]}),
        V("strided", x=Arg((2, 3), dom, "S"), **{attr: values[0]}),
        V("scalar", x=Arg((), dom), **{attr: values[0]}),
        V("empty", x=Arg((0, 3), dom), **{attr: values[0]}),
    ]


case("add_scalar", lambda x, value: x + pyval(value), scalar_variants("value", [2.5, -0.75, 3.0]),
     bench={"x": Arg((1024, 1024)), "value": 2.5})
case("mul_scalar", lambda x, value: x * pyval(value), scalar_variants("value", [2.5, -0.75, 3.0]),
     bench={"x": Arg((1024, 1024)), "value": 2.5})
case("pow_scalar", lambda x, exponent: torch.pow(x, pyval(exponent)),
     scalar_variants("exponent", [2.5, 2.0, -1.5, 0.5, 0.0], POS) + [
         V("negative_base_cube", x=Arg((3, 4)), exponent=3.0),
     ], bench={"x": Arg((1024, 1024), POS), "exponent": 2.5})

case("where", lambda cond, a, b: torch.where(cond, a, b), [
    V("broadcast_all", cond=Arg((4, 5), dtype="bool"), a=Arg((3, 1, 5)), b=Arg((5,))),
    V("transposed", cond=Arg((3, 4), dtype="bool"), a=Arg((3, 4), layout="T"), b=Arg((3, 4))),
    V("strided", cond=Arg((2, 3), dtype="bool", layout="S"), a=Arg((2, 3), layout="S"), b=Arg(())),
    V("empty", cond=Arg((0, 3), dtype="bool"), a=Arg((0, 3)), b=Arg((3,))),
], bench={"cond": Arg((1024, 1024), dtype="bool"), "a": Arg((1024, 1024)), "b": Arg((1024, 1024))})


# ---------------------------------------------------------------- elementwise: unary
def unary_variants(dom: Domain = STD, **attrs: Any) -> List[Variant]:
    return [
        V("contig", x=Arg((3, 4), dom), **attrs),
        V("transposed", x=Arg((4, 5), dom, "T"), **attrs),
        V("strided", x=Arg((2, 3), dom, "S"), **attrs),
        V("scalar", x=Arg((), dom), **attrs),
        V("empty", x=Arg((0, 3), dom), **attrs),
    ]


def unary_case(op: str, ref: Callable[..., Any], dom: Domain = STD, extra: Sequence[Variant] = (),
               **kw: Any) -> None:
    attrs = kw.pop("attrs", {})
    case(op, ref, unary_variants(dom, **attrs) + list(extra),
         bench=dict({"x": Arg((1024, 1024), dom)}, **attrs), **kw)


ZERO_KINKS = Vals([-1.5, 0.0, 2.0, 0.0, 3.0, -0.25])  # x = 0 exactly: d relu = d |x| = 0 there

unary_case("neg", lambda x: torch.neg(x), skip={"*@bool": "torch refuses -bool: no reference"})
unary_case("abs", lambda x: torch.abs(x), Away(0.1, 2.0), skip={"*@bool": "torch has no abs for bool: no reference"},
           extra=[
    V("zero", x=Arg((6,), ZERO_KINKS), dtypes=FLOAT_DTYPES, skip={"gradcheck": KINK})])
unary_case("exp", lambda x: torch.exp(fl(x)))
unary_case("log", lambda x: torch.log(fl(x)), POS)
unary_case("sqrt", lambda x: torch.sqrt(fl(x)), POS)
unary_case("rsqrt", lambda x: torch.rsqrt(fl(x)), POS)
unary_case("sin", lambda x: torch.sin(fl(x)), U(-3, 3))
unary_case("cos", lambda x: torch.cos(fl(x)), U(-3, 3))
unary_case("tanh", lambda x: torch.tanh(fl(x)))
unary_case("sinh", lambda x: torch.sinh(fl(x)))
unary_case("cosh", lambda x: torch.cosh(fl(x)))
unary_case("sigmoid", lambda x: torch.sigmoid(fl(x)), U(-4, 4))
unary_case("relu", lambda x: torch.relu(x), Away(0.05, 2.0), extra=[
    V("zero", x=Arg((6,), ZERO_KINKS), dtypes=FLOAT_DTYPES, skip={"gradcheck": KINK})],
    skip={"*@bool": "torch has no relu for bool: no reference"})
unary_case("leaky_relu", lambda x, negative_slope: F.leaky_relu(fl(x), negative_slope), Away(0.05, 2.0),
           attrs={"negative_slope": 0.1}, extra=[
               V("slope_0.2", x=Arg((3, 4), Away(0.05, 2.0)), negative_slope=0.2),
               V("slope_0.01", x=Arg((3, 4), Away(0.05, 2.0)), negative_slope=0.01),
               V("negative_slope", x=Arg((6,), Away(0.05, 2.0)), negative_slope=-0.3),
               V("zero", x=Arg((6,), ZERO_KINKS), negative_slope=0.3, dtypes=FLOAT_DTYPES,
                 skip={"gradcheck": KINK})])
unary_case("gelu", lambda x, approximate_tanh: F.gelu(fl(x), approximate="tanh" if approximate_tanh else "none"),
           U(-3, 3), attrs={"approximate_tanh": False},
           extra=[Variant("tanh_" + v.name, v.args) for v in unary_variants(U(-3, 3), approximate_tanh=True)])
unary_case("silu", lambda x: F.silu(fl(x)), U(-4, 4))
unary_case("softplus", lambda x: F.softplus(fl(x)), U(-5, 5), extra=[
    # torch's threshold: x > 20 is the identity (derivative exactly 1)
    V("threshold", x=Arg((6,), Vals([-30.0, -5.0, 0.0, 19.5, 21.0, 40.0]))),
    V("above_threshold", x=Arg((5,), U(20.5, 30.0)), dtypes=FLOAT_DTYPES)])
unary_case("mish", lambda x: F.mish(fl(x)), U(-3, 3))


# The cone family (Noel and Oswal, arXiv 2405.04459; ops.yaml), torch references written out.
def AwayFromOne(lo: float, hi: float) -> Domain:
    """1 + Away(lo, hi): away from the kink of |x - 1| (bool stays bool)."""
    away = Away(lo, hi)

    def draw(rng, shape, kind):
        v = away(rng, shape, kind)
        return v if kind == "bool" else 1 + v
    return draw


# x = 1 exactly, where |x - 1| has its kink (gradient: torch's sign(0) = 0), and the zeros 0 and 2
ONE_KINKS = Vals([1.0, -0.5, 1.0, 0.0, 2.0, 3.5])


def parcon_ref(x: torch.Tensor, beta: float) -> torch.Tensor:
    return 1 - (fl(x) - 1).abs().pow(beta)


unary_case("cone", lambda x: 1 - (fl(x) - 1).abs(), AwayFromOne(0.05, 2.0), extra=[
    V("kink", x=Arg((6,), ONE_KINKS), dtypes=FLOAT_DTYPES, skip={"gradcheck": KINK})])
unary_case("parabolic_cone", lambda x: fl(x) * (2 - fl(x)), U(-3, 3), extra=[
    V("kink_of_cone", x=Arg((6,), ONE_KINKS), dtypes=FLOAT_DTYPES)])  # smooth there: gradcheck runs
unary_case("parcon", parcon_ref, AwayFromOne(0.05, 2.0), attrs={"beta": 1.5}, extra=[
    V(f"beta_{b:g}", x=Arg((3, 4), AwayFromOne(0.05, 2.0)), beta=b) for b in (1.0, 2.0, 3.0, 0.5, 2.7)] + [
    # beta 1: the cone's gradient 0 at x = 1; beta > 1: 0 (|d|^(beta - 1) = 0); beta < 1: NaN (inf * 0), as torch
    V(f"kink_beta_{b:g}", x=Arg((6,), ONE_KINKS), beta=b, dtypes=FLOAT_DTYPES, skip={"gradcheck": KINK})
    for b in (1.0, 1.5, 2.0, 0.5)],
    errors=[E("beta_zero", INVALID, "beta", "beta=0", x=Arg((2, 3)), beta=0.0),
            E("beta_negative", INVALID, "beta", "-1.5", x=Arg((2, 3)), beta=-1.5),
            E("beta_nan", INVALID, "beta", "nan", x=Arg((2, 3)), beta=math.nan),
            E("beta_inf", INVALID, "beta", "inf", x=Arg((2, 3)), beta=math.inf)])

# clamp's gradient is 1 at the bounds, like PyTorch ("edges"); the plain inputs stay 0.05 away.
CLAMP_DOM = Vals([-1.5, -1.2, -0.9, -0.7, -0.3, 0.0, 0.2, 0.45, 0.9, 1.1, 1.3, -0.1])
case("clamp", lambda x, lo, hi: torch.clamp(x, pyval(lo), pyval(hi)) if math.isfinite(hi)
     else torch.clamp(x, min=pyval(lo)), [
    V("contig", x=Arg((3, 4), CLAMP_DOM), lo=-0.5, hi=0.7, dtypes=FLOAT_DTYPES),
    V("transposed", x=Arg((4, 3), CLAMP_DOM, "T"), lo=-0.5, hi=0.7, dtypes=FLOAT_DTYPES),
    V("unbounded_above", x=Arg((12,), CLAMP_DOM), lo=-0.5, hi=math.inf, dtypes=FLOAT_DTYPES),
    V("at_bounds", x=Arg((7,), Vals([-2.0, -0.5, -0.1, 0.0, 0.7, 1.0, 1.5])), lo=-0.5, hi=1.0,
      dtypes=FLOAT_DTYPES, skip={"gradcheck": KINK}),
    V("integer_bounds", x=Arg((3, 4), U(-4, 4)), lo=-1.0, hi=2.0),
    V("lo_equals_hi", x=Arg((3, 4), U(-4, 4)), lo=1.0, hi=1.0, skip={"gradcheck": KINK}),
    V("strided", x=Arg((2, 3), U(-4, 4), "S"), lo=-1.0, hi=2.0),
    V("empty", x=Arg((0, 3)), lo=-1.0, hi=2.0),
], bench={"x": Arg((1024, 1024)), "lo": -0.5, "hi": 0.7})

# fused: relu(a + b), gelu(x + bias), a * tanh(b)
case("add_relu", lambda a, b: torch.relu(a + b), binary_variants(Grid(0.025), Grid(0.0)), bench=BIN_BENCH)
case("bias_gelu", lambda x, bias, approximate_tanh:
     F.gelu(x + bias, approximate="tanh" if approximate_tanh else "none"), [
    V("row_bias", x=Arg((3, 4), U(-3, 3)), bias=Arg((4,), U(-1, 1)), approximate_tanh=False),
    V("full_bias", x=Arg((2, 3), U(-3, 3)), bias=Arg((2, 3), U(-1, 1)), approximate_tanh=False),
    V("transposed", x=Arg((4, 3), U(-3, 3), "T"), bias=Arg((3,), U(-1, 1)), approximate_tanh=False),
    V("tanh_row_bias", x=Arg((3, 4), U(-3, 3)), bias=Arg((4,), U(-1, 1)), approximate_tanh=True),
    V("tanh_column_bias", x=Arg((4, 3), U(-3, 3), "T"), bias=Arg((4, 1), U(-1, 1)), approximate_tanh=True),
    V("strided", x=Arg((2, 3), U(-3, 3), "S"), bias=Arg((3,), U(-1, 1)), approximate_tanh=True),
    V("empty", x=Arg((0, 3)), bias=Arg((3,)), approximate_tanh=False),
], bench={"x": Arg((1024, 1024), U(-3, 3)), "bias": Arg((1024,)), "approximate_tanh": True})
case("mul_tanh", lambda a, b: a * torch.tanh(b), binary_variants(), bench=BIN_BENCH)


# fused activation gradients grad * f'(x) (the backward of gelu, bias_gelu, silu and swiglu)
def gelu_backward_ref(grad, x, approximate_tanh):
    # torch's oneDNN kernel fails on broadcast operands ("could not create a primitive descriptor")
    grad, x = (t.contiguous() for t in torch.broadcast_tensors(grad, x))
    return torch.ops.aten.gelu_backward(grad, x, approximate="tanh" if approximate_tanh else "none")


def silu_backward_ref(grad, x):
    # torch 1.13's aten.silu_backward has no derivative of its own: the formula, differentiable
    s = torch.sigmoid(x)
    return grad * (s * (1 + x * (1 - s)))


def activation_grad_variants(**attrs: Any) -> List[Variant]:
    """grad against x: same shapes, each broadcast against the other, transposed and strided
    operands, a 0-d operand, an empty broadcast."""
    x = U(-4, 4)
    return [
        V("same_shape", grad=Arg((3, 4)), x=Arg((3, 4), x), **attrs),
        V("x_broadcast", grad=Arg((3, 1, 4)), x=Arg((2, 4), x), **attrs),
        V("grad_broadcast", grad=Arg((4,)), x=Arg((3, 4), x), **attrs),
        V("transposed", grad=Arg((3, 5)), x=Arg((3, 5), x, "T"), **attrs),
        V("strided", grad=Arg((3, 4), layout="S"), x=Arg((3, 4), x, "T"), **attrs),
        V("scalar_operand", grad=Arg(()), x=Arg((2, 3), x), **attrs),
        V("empty", grad=Arg((0, 4)), x=Arg((4,), x), **attrs),
    ]


case("gelu_backward", gelu_backward_ref,
     activation_grad_variants(approximate_tanh=False) +
     [Variant("tanh_" + v.name, v.args) for v in activation_grad_variants(approximate_tanh=True)],
     bench={"grad": Arg((1024, 1024)), "x": Arg((1024, 1024)), "approximate_tanh": True})
case("silu_backward", silu_backward_ref, activation_grad_variants(),
     bench={"grad": Arg((1024, 1024)), "x": Arg((1024, 1024))})


# ---------------------------------------------------------------- elementwise: in place
def inplace_variants(other: str, **attrs: Any) -> List[Variant]:
    """x written in place: contiguous, transposed and strided targets, b broadcast into x."""
    def o(shape, layout="contig", dtype=None):
        return {other: Arg(shape, layout=layout, dtype=dtype)} if other else {}
    return [
        V("same_shape", x=Arg((3, 4)), **o((3, 4)), **attrs),
        V("broadcast", x=Arg((3, 4)), **o((4,)), **attrs),
        V("transposed_target", x=Arg((4, 3), layout="T"), **o((4, 3), "T"), **attrs),
        V("strided_target", x=Arg((2, 3), layout="S"), **o((2, 1)), **attrs),
        V("empty", x=Arg((0, 3)), **o((3,)), **attrs),
    ]


def inplace_ref(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, **kw: fn(x.clone(), **kw)


# (the benchmark repeats an in-place op on the same tensor: multipliers of magnitude 1 keep the
# values from drifting into denormals or infinities)
case("add_", inplace_ref(lambda x, b: x.add_(b)), inplace_variants("b"), mutates=["x"],
     bench={"x": Arg((1024, 1024)), "b": Arg((1024, 1024))})
case("mul_", inplace_ref(lambda x, b: x.mul_(b)), inplace_variants("b"), mutates=["x"],
     bench={"x": Arg((1024, 1024)), "b": Arg((1024, 1024), U(-1.0, -1.0, ints=(-1, -1)))})
case("mul_scalar_", inplace_ref(lambda x, value: x.mul_(pyval(value))),
     inplace_variants("", value=3.0) + [V("fraction", x=Arg((3, 4)), value=-0.75, dtypes=FLOAT_DTYPES)],
     mutates=["x"], skip={"*@bool": "torch refuses bool *= 3 in place (its result type is int64): no reference"},
     bench={"x": Arg((1024, 1024)), "value": -1.0})
case("copy_", inplace_ref(lambda x, src: x.copy_(src)), inplace_variants("src") + [
    V("cast_from_f64", x=Arg((3, 4)), src=Arg((3, 4), U(-5, 5), dtype="f64")),
    V("cast_from_i64", x=Arg((3, 4)), src=Arg((4,), dtype="i64")),
    V("cast_from_bool", x=Arg((2, 3)), src=Arg((2, 3), dtype="bool")),
], mutates=["x"], upcast_half=False, bench={"x": Arg((1024, 1024), layout="T"), "src": Arg((1024, 1024))})


# ---------------------------------------------------------------- reductions
def reduction_variants(dom: Domain = STD, **extra: Any) -> List[Variant]:
    layouts = [((), False), ((), True), ((0,), False), ((1,), True), ((-1,), False), ((0, 2), False),
               ((1, 2), True), ((0, 1), False), ((2, 0), True)]
    out = [V(("axes_" + "_".join(map(str, a)) if a else "all") + ("_keep" if k else ""), x=Arg((2, 3, 4), dom),
             axes=list(a), keepdim=k, **extra) for a, k in layouts]
    return out + [
        V("transposed", x=Arg((4, 3), dom, "T"), axes=[1], keepdim=False, **extra),
        V("transposed_3d", x=Arg((2, 5, 3), dom, "T"), axes=[0, 1], keepdim=True, **extra),
        V("strided", x=Arg((3, 4), dom, "S"), axes=[1], keepdim=False, **extra),
        V("scalar", x=Arg((), dom), axes=[], keepdim=False, **extra),
    ]


EMPTY_REDUCE = V("empty_reduced", x=Arg((0, 3)), axes=[0], keepdim=False)  # sum over nothing: 0
EMPTY_KEPT = V("empty_kept", x=Arg((0, 3)), axes=[1], keepdim=True)       # no rows to reduce

case("sum", reduce_ref(torch.sum), reduction_variants() + [EMPTY_REDUCE, EMPTY_KEPT],
     bench={"x": Arg((1024, 1024)), "axes": [1], "keepdim": False})
case("mean", reduce_ref(lambda x, **kw: torch.mean(fl(x), **kw)), reduction_variants() + [
    V("empty_reduced_nan", x=Arg((0, 3)), axes=[0], keepdim=False), EMPTY_KEPT],
     bench={"x": Arg((1024, 1024)), "axes": [1], "keepdim": False})
ties_reductions = [
    V("ties_row", x=Arg((4, 6), Ties()), axes=[1], keepdim=False, skip={"gradcheck": KINK}),
    V("ties_all", x=Arg((3, 4, 2), Ties()), axes=[], keepdim=False, skip={"gradcheck": KINK}),
    V("ties_keep", x=Arg((3, 4, 5), Ties()), axes=[0, 2], keepdim=True, skip={"gradcheck": KINK}),
]
case("max", reduce_ref(torch.amax), reduction_variants(Distinct()) + ties_reductions + [EMPTY_KEPT],
     bench={"x": Arg((1024, 1024)), "axes": [1], "keepdim": False})
case("min", reduce_ref(torch.amin), reduction_variants(Distinct()) + ties_reductions + [EMPTY_KEPT],
     bench={"x": Arg((1024, 1024)), "axes": [1], "keepdim": False})


def var_ref(x, axes, correction, keepdim):
    dims = dims_of(x, axes)
    mean = x.mean(dim=dims, keepdim=True) if x.dim() else x
    count = 1
    for d in dims:
        count *= x.shape[d]
    sq = (x - mean).pow(2)
    total = sq.sum(dim=dims, keepdim=bool(keepdim)) if x.dim() else sq
    return total / max(count - correction, 0)


case("var", var_ref, [
    V(f"c{c}_{name}", x=Arg(shape, layout=layout), axes=axes, correction=c, keepdim=k)
    for c in (0, 1)
    for name, shape, layout, axes, k in [
        ("all", (2, 3, 4), "contig", [], False), ("axis0", (2, 3, 4), "contig", [0], False),
        ("axis1_keep", (2, 3, 4), "contig", [1], True), ("last", (3, 5), "contig", [-1], False),
        ("axes02_keep", (2, 3, 4), "contig", [0, 2], True), ("transposed", (4, 3), "T", [0], False),
        ("strided", (3, 4), "S", [1], True)]
] + [
    V("correction2", x=Arg((3, 5)), axes=[1], correction=2, keepdim=False),
    # one element with correction 1: 0/0 = NaN in the value and the gradient, like torch
    V("single_element_nan", x=Arg((3, 1)), axes=[1], correction=1, keepdim=False, skip={"gradcheck": NAN_OUT}),
    V("empty_kept", x=Arg((0, 3)), axes=[1], correction=0, keepdim=True),
], bench={"x": Arg((1024, 1024)), "axes": [1], "correction": 1, "keepdim": False})

case("argmax", lambda x, axis, keepdim: torch.argmax(x, dim=axis, keepdim=bool(keepdim)), [
    V("axis0", x=Arg((3, 4, 5)), axis=0, keepdim=False),
    V("axis1_keep", x=Arg((3, 4, 5)), axis=1, keepdim=True),
    V("last", x=Arg((3, 4, 5)), axis=-1, keepdim=False),
    V("ties_first", x=Arg((4, 6), Ties()), axis=1, keepdim=False),
    V("transposed", x=Arg((4, 6), layout="T"), axis=1, keepdim=False),
    V("strided", x=Arg((3, 4), layout="S"), axis=0, keepdim=True),
    V("empty_rows", x=Arg((0, 3)), axis=1, keepdim=False),
], bench={"x": Arg((1024, 1024)), "axis": 1, "keepdim": False})

# Tall reductions over a leading or middle axis (few outputs, many rows: a bias gradient). CUDA
# splits the rows into chunks combined by a second kernel; widths that are and are not a multiple
# of a 16-byte pack, several outer slices, one chunk and many.
def tall_reductions(**opts: Any) -> List[Variant]:
    return [
        V("tall_axis0", x=Arg((4096, 96)), axes=[0], keepdim=False, **opts),
        V("tall_axis0_odd_width_keep", x=Arg((1500, 7)), axes=[0], keepdim=True, **opts),
        V("tall_middle_keep", x=Arg((3, 2000, 5)), axes=[1], keepdim=True, **opts),
        V("tall_leading_two", x=Arg((16, 128, 24)), axes=[0, 1], keepdim=False, **opts),
        V("tall_short_rows", x=Arg((40, 3, 200)), axes=[1], keepdim=False, **opts),
    ]


for _op in ("sum", "mean", "max", "min"):
    # max/min: thousands of uniform values, some within a finite-difference step of each other
    _opts = {"skip": {"gradcheck": KINK}} if _op in ("max", "min") else {}
    CASES[_op].variants = CASES[_op].variants + tall_reductions(**_opts)  # (cases share their first list)


# ---------------------------------------------------------------- linear algebra, softmax
MM = U(-1, 1)


def mm_variants() -> List[Variant]:
    specs = [
        ("2d", (3, 4), "contig", (4, 5), "contig"), ("vec_mat", (4,), "contig", (4, 5), "contig"),
        ("mat_vec", (3, 4), "T", (4,), "contig"), ("dot", (6,), "contig", (6,), "contig"),
        ("broadcast_batch", (2, 1, 3, 4), "contig", (5, 4, 2), "contig"),
        ("batched_2d", (2, 3, 4), "contig", (4, 2), "contig"),
        ("vec_batched", (4,), "contig", (2, 4, 3), "contig"), ("batched_vec", (2, 3, 4), "contig", (4,), "contig"),
        ("both_transposed", (3, 4), "T", (4, 5), "T"),
        ("batched_transposed", (2, 3, 4), "T", (2, 4, 5), "contig"), ("strided", (3, 4), "S", (4, 2), "S"),
        ("packed_path", (33, 34), "contig", (34, 32), "T"), ("empty_m", (0, 4), "contig", (4, 3), "contig"),
        ("empty_k", (3, 0), "contig", (0, 2), "contig"),
    ]
    return [V(name, a=Arg(sa, MM, la), b=Arg(sb, MM, lb)) for name, sa, la, sb, lb in specs]


def matmul_flops(a, b, **_):
    return 2.0 * np.prod(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])) * a.shape[-2] * a.shape[-1] * b.shape[-1]


case("matmul", lambda a, b: torch.matmul(a, b), mm_variants(),
     bench={"a": Arg((512, 512), MM), "b": Arg((512, 512), MM)}, bench_fixed=("b",), bench_kind="flops",
     bench_flops=matmul_flops)
case("linear", lambda x, weight, bias: F.linear(x, weight, bias), [
    V("2d", x=Arg((4, 5), MM), weight=Arg((3, 5), MM), bias=Arg((3,), MM)),
    V("batched", x=Arg((2, 4, 5), MM), weight=Arg((3, 5), MM), bias=Arg((3,), MM)),
    V("vector", x=Arg((4,), MM), weight=Arg((3, 4), MM), bias=Arg((3,), MM)),
    V("transposed", x=Arg((5, 4), MM, "T"), weight=Arg((3, 4), MM, "T"), bias=Arg((3,), MM)),
    V("strided", x=Arg((3, 4), MM, "S"), weight=Arg((2, 4), MM), bias=Arg((2,), MM, "S")),
    V("empty_rows", x=Arg((0, 4), MM), weight=Arg((3, 4), MM), bias=Arg((3,), MM)),
], bench={"x": Arg((512, 512), MM), "weight": Arg((512, 512), MM), "bias": Arg((512,), MM)},
    bench_fixed=("weight",), bench_kind="flops", bench_flops=lambda x, weight, **_: 2.0 * x.numel() * weight.shape[0])

MINF = Vals([0.5, -math.inf, 1.0, -2.0, 2.0, 3.0, -math.inf, -math.inf, 1.0, -1.0, 0.0, 0.25])


def softmax_variants() -> List[Variant]:
    return [V(f"axis{a}", x=Arg((3, 4, 5), U(-3, 3)), axis=a) for a in (0, 1, -1)] + [
        V("vector", x=Arg((7,)), axis=0),
        V("transposed", x=Arg((6, 4), U(-3, 3), "T"), axis=1),
        V("transposed_3d", x=Arg((2, 5, 3), U(-3, 3), "T"), axis=1),
        V("strided", x=Arg((3, 4), U(-3, 3), "S"), axis=-1),
        V("large_logits", x=Arg((2, 4), U(50, 53)), axis=-1, dtypes=("f32", "f64")),
        # masked entries: softmax gives 0, log_softmax -inf, and finite gradients elsewhere
        V("minus_inf", x=Arg((3, 4), MINF), axis=-1, dtypes=FLOAT_DTYPES,
          skip={"gradcheck": "-inf inputs: a finite-difference step cannot move them"}),
        V("empty_rows", x=Arg((0, 5)), axis=1),
        V("empty_axis", x=Arg((3, 0)), axis=1),
    ]


case("softmax", lambda x, axis: torch.softmax(x, axis), softmax_variants(), bench={"x": Arg((1024, 1024)), "axis": -1})
case("log_softmax", lambda x, axis: torch.log_softmax(x, axis), softmax_variants(),
     bench={"x": Arg((1024, 1024)), "axis": -1})
# rows wider than a block's registers hold (CUDA's one-pass kernel) and a wide axis 0
WIDE_SOFTMAX = [V("wide_rows", x=Arg((3, 3000), U(-3, 3)), axis=-1), V("very_wide_rows", x=Arg((2, 9000), U(-3, 3)), axis=1),
                V("wide_axis0", x=Arg((700, 6), U(-3, 3)), axis=0)]
for _op in ("softmax", "log_softmax"):
    CASES[_op].variants = CASES[_op].variants + WIDE_SOFTMAX


# ---------------------------------------------------------------- attention
def fa(name: str, qs: Tuple[int, ...], ks: Tuple[int, ...], causal: bool, alibi: bool, scale: float = 0.0,
       layout: str = "contig", **opts: Any) -> Variant:
    return V(name, q=Arg(qs, layout=layout), k=Arg(ks), v=Arg(ks, layout=layout), causal=causal, alibi=alibi,
             scale=scale, **opts)


def attention_flops(q, k, causal, **_):
    b, h, tq, d = q.shape
    return 4.0 * b * h * tq * k.shape[2] * d * (0.5 if causal else 1.0)


case("flash_attention", attention_ref, [
    fa("plain", (1, 2, 5, 4), (1, 2, 5, 4), False, False),
    fa("causal_gqa_prefill", (2, 4, 3, 4), (2, 2, 5, 4), True, False),
    fa("causal_alibi", (1, 4, 4, 3), (1, 4, 4, 3), True, True),
    fa("alibi_3_heads", (1, 3, 4, 5), (1, 1, 4, 5), False, True),  # non-power-of-two slopes, MQA
    fa("scale", (1, 2, 4, 4), (1, 2, 4, 4), True, False, scale=0.3),
    fa("decode", (2, 2, 1, 4), (2, 2, 7, 4), True, True),
    fa("transposed_inputs", (1, 2, 4, 6), (1, 2, 4, 6), True, False, layout="T"),
    fa("long_keys", (1, 2, 9, 16), (1, 1, 70, 16), True, False),  # more than one 64-key tile
    fa("empty_queries", (1, 2, 0, 8), (1, 2, 3, 8), True, False),
],
    skip={"gradgrad": "once-differentiable (ops.yaml: no double backward through this op): its backward "
                      "kernel records no graph, so create_graph gives a gradient without one"},
    bench={"q": Arg((4, 8, 256, 64)), "k": Arg((4, 8, 256, 64)), "v": Arg((4, 8, 256, 64)),
           "causal": True, "alibi": False, "scale": 0.0}, bench_kind="flops", bench_flops=attention_flops)


# ---------------------------------------------------------------- indexing
case("index_select", lambda x, axis, index: torch.index_select(x, axis, index), [
    V("repeats", x=Arg((5, 3)), axis=0, index=Idx((5,), 5, values=[3, 0, 3, 1, 4])),
    V("middle_axis", x=Arg((2, 5, 3)), axis=1, index=Idx((3,), 5, values=[4, 4, 1])),
    V("transposed", x=Arg((3, 5), layout="T"), axis=-1, index=Idx((4,), 5)),
    V("i32_index", x=Arg((3, 4)), axis=0, index=Idx((4,), 3, dtype="i32")),
    V("strided", x=Arg((4, 3), layout="S"), axis=1, index=Idx((5,), 3)),
    V("empty_index", x=Arg((4, 3)), axis=0, index=Idx((0,), 4)),
], bench={"x": Arg((4096, 256)), "axis": 0, "index": Idx((4096,), 4096)})

case("gather", lambda x, axis, index: torch.gather(x, axis, index.long()), [  # torch: int64 indices only
    V("axis0", x=Arg((4, 5)), axis=0, index=Idx((3, 5), 4)),
    V("axis1_wider", x=Arg((3, 6)), axis=1, index=Idx((3, 8), 6)),
    V("smaller_index", x=Arg((4, 5, 3)), axis=1, index=Idx((2, 4, 3), 5)),
    V("transposed", x=Arg((3, 6), layout="T"), axis=1, index=Idx((3, 4), 6)),
    V("i32_index", x=Arg((3, 4)), axis=1, index=Idx((3, 2), 4, dtype="i32")),
    V("empty_index", x=Arg((3, 4)), axis=0, index=Idx((0, 4), 3)),
], bench={"x": Arg((1024, 1024)), "axis": 1, "index": Idx((1024, 512), 1024)})

case("embedding", lambda weight, indices: F.embedding(indices.long(), weight), [
    V("2d_indices", weight=Arg((6, 4)), indices=Idx((2, 3), 6, values=[1, 5, 1, 0, 2, 5])),
    V("1d_indices", weight=Arg((7, 3)), indices=Idx((4,), 7, values=[6, 0, 0, 3])),
    V("transposed", weight=Arg((4, 6), layout="T"), indices=Idx((3,), 4)),
    V("i32_indices", weight=Arg((3, 4)), indices=Idx((4,), 3, dtype="i32")),
    V("empty_indices", weight=Arg((3, 4)), indices=Idx((0, 2), 3)),
], bench={"weight": Arg((8192, 512)), "indices": Idx((4096,), 8192)})

case("one_hot", lambda indices, num_classes, dtype: F.one_hot(indices.long(), num_classes).to(TORCH_DTYPES[dtype]),
     [V("to_" + d, indices=Idx((2, 3), 5, dtype=None), num_classes=5, dtype=d) for d in ALL_DTYPES] + [
         V("1d", indices=Idx((4,), 4, dtype=None, values=[0, 3, 2, 3]), num_classes=4, dtype="f32"),
         V("empty", indices=Idx((0,), 3, dtype=None), num_classes=3, dtype="i64"),
     ], bench={"indices": Idx((8192,), 128, dtype=None), "num_classes": 128, "dtype": "f32"})


# ---------------------------------------------------------------- losses
def ce_ref(logits, target, ignore_index, label_smoothing, reduction):
    return F.cross_entropy(logits, target.long(), ignore_index=ignore_index, label_smoothing=label_smoothing,
                           reduction=reduction)


LOGITS = U(-4, 4)
CE_T = Idx((6,), 5, ignore=(-100, 3))  # rows 1 and 4 ignored
case("cross_entropy", ce_ref, [
    V(f"{red}{'_smooth' if ls else ''}", logits=Arg((6, 5), LOGITS), target=CE_T, ignore_index=-100,
      label_smoothing=ls, reduction=red)
    for red in ("mean", "sum", "none") for ls in (0.0, 0.1)
] + [
    *[V("ignore_valid_class" + ("" if red == "mean" else "_" + red), logits=Arg((5, 4)),
        target=Idx((5,), 4, values=[2, 0, 2, 1, 3]), ignore_index=2, label_smoothing=0.1, reduction=red)
      for red in ("mean", "sum", "none")],
    V("transposed", logits=Arg((6, 5), layout="T"), target=Idx((6,), 5), ignore_index=-100, label_smoothing=0.0,
      reduction="mean"),
    # a target outside [0, C) is fine when it is the ignore_index
    V("ignored_out_of_range_target", logits=Arg((2, 5)), target=Idx((2,), 8, values=[1, 7]), ignore_index=7,
      label_smoothing=0.0, reduction="mean"),
    V("strided_smooth", logits=Arg((4, 3), layout="S"), target=Idx((4,), 3), ignore_index=-100,
      label_smoothing=0.25, reduction="sum"),
    V("i32_target", logits=Arg((4, 3)), target=Idx((4,), 3, dtype="i32"), ignore_index=-100, label_smoothing=0.0,
      reduction="sum"),
    V("empty_sum", logits=Arg((0, 3)), target=Idx((0,), 3), ignore_index=-100, label_smoothing=0.0, reduction="sum"),
], bench={"logits": Arg((4096, 1024), LOGITS), "target": Idx((4096,), 1024), "ignore_index": -100,
          "label_smoothing": 0.0, "reduction": "mean"})

case("nll_loss", lambda log_probs, target, ignore_index, reduction:
     F.nll_loss(log_probs, target.long(), ignore_index=ignore_index, reduction=reduction), [
    V(red, log_probs=Arg((6, 5), U(-3, 0)), target=CE_T, ignore_index=-100, reduction=red)
    for red in ("mean", "sum", "none")
] + [
    V("ignore_valid_class", log_probs=Arg((5, 4)), target=Idx((5,), 4, values=[2, 0, 2, 1, 3]), ignore_index=2,
      reduction="mean"),
    V("transposed", log_probs=Arg((4, 3), layout="T"), target=Idx((4,), 3), ignore_index=-100, reduction="sum"),
    V("i32_target", log_probs=Arg((4, 3)), target=Idx((4,), 3, dtype="i32"), ignore_index=-100, reduction="mean"),
    V("empty_none", log_probs=Arg((0, 3)), target=Idx((0,), 3), ignore_index=-100, reduction="none"),
], bench={"log_probs": Arg((4096, 1024), U(-3, 0)), "target": Idx((4096,), 1024), "ignore_index": -100,
          "reduction": "mean"})

case("mse_loss", lambda input, target, reduction: F.mse_loss(input, target, reduction=reduction), [
    V(red, input=Arg((3, 4)), target=Arg((3, 4)), reduction=red) for red in ("mean", "sum", "none")
] + [
    V("transposed", input=Arg((4, 3), layout="T"), target=Arg((4, 3)), reduction="mean"),
    V("strided", input=Arg((2, 3), layout="S"), target=Arg((2, 3), layout="T"), reduction="sum"),
    V("empty_sum", input=Arg((0, 3)), target=Arg((0, 3)), reduction="sum"),
], bench={"input": Arg((1024, 1024)), "target": Arg((1024, 1024)), "reduction": "mean"})

PROB = U(0.0, 1.0)
case("bce_with_logits", lambda logits, target, reduction:
     F.binary_cross_entropy_with_logits(logits, target, reduction=reduction), [
    V(red, logits=Arg((3, 4), U(-6, 6)), target=Arg((3, 4), PROB), reduction=red) for red in ("mean", "sum", "none")
] + [
    V("transposed", logits=Arg((4, 3), U(-6, 6), "T"), target=Arg((4, 3), PROB), reduction="mean"),
    V("extreme_logits", logits=Arg((5,), Vals([-40.0, -3.0, 0.0, 2.0, 35.0])),
      target=Arg((5,), Vals([1.0, 0.0, 0.5, 1.0, 0.0])), reduction="sum"),
    V("empty_none", logits=Arg((0, 2)), target=Arg((0, 2), PROB), reduction="none"),
], bench={"logits": Arg((1024, 1024), U(-6, 6)), "target": Arg((1024, 1024), PROB), "reduction": "mean"})


# ---------------------------------------------------------------- fused kernels
NORM = U(-1.5, 1.5)
WEIGHT = U(0.5, 1.5)
case("rms_norm", rms_ref, [
    V("3d", x=Arg((4, 3, 16), NORM), weight=Arg((16,), WEIGHT), eps=1e-6),
    V("transposed", x=Arg((6, 5), NORM, "T"), weight=Arg((5,), WEIGHT), eps=1e-5),
    V("strided_weight", x=Arg((3, 4), NORM, "S"), weight=Arg((4,), WEIGHT, "S"), eps=1e-6),
    V("empty_rows", x=Arg((0, 4)), weight=Arg((4,), WEIGHT), eps=1e-6),
], bench={"x": Arg((4096, 1024), NORM), "weight": Arg((1024,), WEIGHT), "eps": 1e-6})

case("layer_norm", layer_norm_ref, [
    V("2d", x=Arg((5, 13), U(-4, 4)), weight=Arg((13,), WEIGHT), bias=Arg((13,)), eps=1e-5),
    V("transposed", x=Arg((3, 6), NORM, "T"), weight=Arg((6,), WEIGHT), bias=Arg((6,)), eps=1e-5),
    V("strided_3d", x=Arg((2, 3, 5), NORM, "S"), weight=Arg((5,), WEIGHT), bias=Arg((5,), layout="S"), eps=1e-5),
    V("empty_rows", x=Arg((0, 4)), weight=Arg((4,), WEIGHT), bias=Arg((4,)), eps=1e-5),
], bench={"x": Arg((4096, 1024), NORM), "weight": Arg((1024,), WEIGHT), "bias": Arg((1024,)), "eps": 1e-5})

case("add_rms_norm", lambda x, residual, weight, eps: (rms_ref(x + residual, weight, eps), x + residual), [
    V("2d", x=Arg((3, 12), NORM), residual=Arg((3, 12), NORM), weight=Arg((12,), WEIGHT), eps=1e-6),
    V("transposed_residual", x=Arg((2, 3, 6), NORM), residual=Arg((2, 3, 6), NORM, "T"), weight=Arg((6,), WEIGHT),
      eps=1e-6),
    V("strided", x=Arg((4, 5), NORM, "S"), residual=Arg((4, 5), NORM), weight=Arg((5,), WEIGHT), eps=1e-5),
    V("empty_rows", x=Arg((0, 4)), residual=Arg((0, 4)), weight=Arg((4,), WEIGHT), eps=1e-6),
], bench={"x": Arg((4096, 1024), NORM), "residual": Arg((4096, 1024), NORM), "weight": Arg((1024,), WEIGHT),
          "eps": 1e-6})

case("add_layer_norm", lambda x, residual, weight, bias, eps:
     (layer_norm_ref(x + residual, weight, bias, eps), x + residual), [
    V("2d", x=Arg((3, 12), NORM), residual=Arg((3, 12), NORM, "T"), weight=Arg((12,), WEIGHT), bias=Arg((12,)),
      eps=1e-5),
    V("3d", x=Arg((2, 2, 7), NORM, "T"), residual=Arg((2, 2, 7), NORM), weight=Arg((7,), WEIGHT), bias=Arg((7,)),
      eps=1e-5),
    V("strided", x=Arg((3, 4), NORM, "S"), residual=Arg((3, 4), NORM, "S"), weight=Arg((4,), WEIGHT),
      bias=Arg((4,)), eps=1e-6),
    V("empty_rows", x=Arg((0, 4)), residual=Arg((0, 4)), weight=Arg((4,), WEIGHT), bias=Arg((4,)), eps=1e-5),
], bench={"x": Arg((4096, 1024), NORM), "residual": Arg((4096, 1024), NORM), "weight": Arg((1024,), WEIGHT),
          "bias": Arg((1024,)), "eps": 1e-5})

SCE_T = Idx((6,), 300, values=[3, -100, 0, 299, 298, 7])
case("softmax_cross_entropy", lambda logits, target, ignore_index, reduction:
     F.cross_entropy(logits, target.long(), ignore_index=ignore_index, reduction=reduction), [
    V(f"wide_{red}", logits=Arg((6, 300), U(-8, 8)), target=SCE_T, ignore_index=-100, reduction=red)
    for red in ("mean", "sum", "none")
] + [
    V(f"narrow_{red}", logits=Arg((5, 6), NORM, "T"), target=Idx((5,), 6, values=[1, 2, 0, 3, 2]), ignore_index=2,
      reduction=red) for red in ("mean", "sum", "none")
] + [
    V("i32_target", logits=Arg((3, 4), NORM), target=Idx((3,), 4, dtype="i32"), ignore_index=-100, reduction="mean"),
    V("ignored_out_of_range_target", logits=Arg((2, 3), NORM), target=Idx((2,), 4, values=[0, 3]), ignore_index=3,
      reduction="sum"),
    V("strided", logits=Arg((3, 4), NORM, "S"), target=Idx((3,), 4), ignore_index=-100, reduction="sum"),
    V("empty_sum", logits=Arg((0, 4)), target=Idx((0,), 4), ignore_index=-100, reduction="sum"),
], bench={"logits": Arg((4096, 1024), LOGITS), "target": Idx((4096,), 1024), "ignore_index": -100,
          "reduction": "mean"})

case("swiglu", lambda gate, up: F.silu(gate) * up, [
    V("same_shape", gate=Arg((4, 10), U(-3, 3)), up=Arg((4, 10))),
    V("broadcast_up", gate=Arg((2, 3, 4), NORM), up=Arg((4,), NORM)),
    V("transposed_gate", gate=Arg((3, 4), U(-3, 3), "T"), up=Arg((3, 4), NORM)),
    V("strided", gate=Arg((2, 3), NORM, "S"), up=Arg((2, 3), NORM, "S")),
    V("empty", gate=Arg((0, 4)), up=Arg((4,))),
], bench={"gate": Arg((4096, 1024)), "up": Arg((4096, 1024))})

ADAM_ATTRS = dict(step=3, lr=0.01, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
case("adam_step_multi", adam_ref, [
    V(f"{'adamw' if dec else 'adam'}",
      params=[Arg((5, 7)), Arg((300,))], grads=[Arg((5, 7)), Arg((300,))],
      exp_avgs=[Arg((5, 7), U(-0.2, 0.2)), Arg((300,), U(-0.2, 0.2))],
      exp_avg_sqs=[Arg((5, 7), U(0.0, 0.1)), Arg((300,), U(0.0, 0.1))],
      decoupled_weight_decay=dec, **ADAM_ATTRS)
    for dec in (True, False)
] + [
    V("first_step_with_empty", params=[Arg((3,)), Arg((0, 2))], grads=[Arg((3,)), Arg((0, 2))],
      exp_avgs=[Arg((3,), U(0, 0)), Arg((0, 2))], exp_avg_sqs=[Arg((3,), U(0, 0)), Arg((0, 2))],
      decoupled_weight_decay=True, **dict(ADAM_ATTRS, step=1)),
], mutates=["params", "exp_avgs", "exp_avg_sqs"],
    bench={"params": [Arg((1024, 1024))] * 4, "grads": [Arg((1024, 1024))] * 4,
           "exp_avgs": [Arg((1024, 1024), U(-0.2, 0.2))] * 4, "exp_avg_sqs": [Arg((1024, 1024), U(0.0, 0.1))] * 4,
           "decoupled_weight_decay": True, **ADAM_ATTRS})


# ---------------------------------------------------------------- large inputs
# Above the CPU backend's parallel grain (2^15 elements) and with odd sizes, so that the threaded
# loops and the SIMD main loops and tails run (gen_fixtures.py's large cases); f32 and f64, as
# there. Sums use inputs in [0, 1]: their f32 rounding then stays far below the tolerance.
BIG = ("f32", "f64")
UNIT = U(0.0, 1.0)
H = U(-0.5, 0.5)  # inner products of 65..130 terms keep their f32 rounding well under atol


def add_variants(op: str, *variants: Variant) -> None:
    CASES[op].variants = CASES[op].variants + list(variants)  # (cases may share their first list)


add_variants("exp", V("large", x=Arg((181, 191)), dtypes=BIG))
add_variants("tanh", V("large", x=Arg((181, 191)), dtypes=BIG))
add_variants("gelu", V("large_tanh", x=Arg((181, 191), U(-4, 4)), approximate_tanh=True, dtypes=BIG))
add_variants("sigmoid", V("large_transposed", x=Arg((181, 191), U(-6, 6), "T"), dtypes=BIG))
add_variants("add", V("large_broadcast", a=Arg((181, 1)), b=Arg((191,)), dtypes=BIG))
add_variants("mul", V("large_transposed", a=Arg((181, 191), layout="T"), b=Arg((181, 191)), dtypes=BIG))
add_variants("div", V("large", a=Arg((181, 191)), b=Arg((181, 191), POS), dtypes=BIG))
add_variants("sum", *[V("large_axes_" + "_".join(map(str, a)), x=Arg((67, 521), UNIT), axes=a, keepdim=False,
                        dtypes=BIG)
                      for a in ([1], [0], [0, 1])],
             V("large_transposed", x=Arg((67, 521), UNIT, "T"), axes=[1], keepdim=False, dtypes=BIG))
add_variants("mean", V("large_keep", x=Arg((67, 521), UNIT), axes=[1], keepdim=True, dtypes=BIG))
add_variants("max", V("large", x=Arg((67, 521)), axes=[1], keepdim=False, dtypes=BIG))
add_variants("min", V("large", x=Arg((67, 521)), axes=[0], keepdim=False, dtypes=BIG))
add_variants("var", V("large", x=Arg((67, 521)), axes=[1], correction=1, keepdim=False, dtypes=BIG))
add_variants("argmax", V("large", x=Arg((67, 521)), axis=1, keepdim=False, dtypes=BIG))
add_variants("softmax", V("large", x=Arg((70, 517), U(-6, 6)), axis=-1, dtypes=BIG))
add_variants("log_softmax", V("large_axis0", x=Arg((517, 70), U(-6, 6)), axis=0, dtypes=BIG))
add_variants("matmul",
             V("large", a=Arg((64, 129), H), b=Arg((129, 65), H), dtypes=BIG),
             V("large_batched", a=Arg((4, 33, 65), H), b=Arg((65, 31), H), dtypes=BIG),
             V("large_transposed", a=Arg((64, 129), H, "T"), b=Arg((129, 65), H), dtypes=BIG))
add_variants("linear", V("large", x=Arg((96, 130), H), weight=Arg((70, 130), H), bias=Arg((70,)), dtypes=BIG))
add_variants("cross_entropy", V("large_smooth", logits=Arg((512, 100), LOGITS),
                                target=Idx((512,), 100, ignore=(-100, 7)), ignore_index=-100, label_smoothing=0.1,
                                reduction="mean", dtypes=BIG))

# The CUDA kernels' own paths (tests/gpu/test_cuda_ops.cpp): wide softmax rows (the pipelined
# kernel from 4k columns), a long sum, and flash attention at the head sizes and key counts the
# tiled kernels specialize on. Run where CUDA is (on the CPU they add time, not coverage).
CUDA = ("cuda",)
add_variants("softmax", V("cuda_wide", x=Arg((4, 3000)), axis=-1, devices=CUDA),
             V("cuda_many_rows", x=Arg((9000, 64)), axis=-1, devices=CUDA),
             V("cuda_16384", x=Arg((3, 16384)), axis=-1, devices=CUDA))
add_variants("log_softmax", V("cuda_4096", x=Arg((300, 4096)), axis=-1, devices=CUDA))
add_variants("sum", V("cuda_long", x=Arg((3, 100000), UNIT), axes=[], keepdim=False, devices=CUDA, dtypes=BIG))
add_variants("flash_attention",
             fa("cuda_d32", (2, 4, 33, 32), (2, 4, 33, 32), False, False, devices=CUDA),
             fa("cuda_causal_gqa_d64", (2, 4, 45, 64), (2, 2, 50, 64), True, False, devices=CUDA),
             fa("cuda_alibi_d128", (1, 4, 70, 128), (1, 4, 70, 128), True, True, devices=CUDA),
             fa("cuda_d96", (1, 2, 17, 96), (1, 1, 17, 96), False, True, devices=CUDA),
             fa("cuda_decode", (2, 8, 1, 64), (2, 8, 700, 64), True, False, devices=CUDA),
             fa("cuda_decode_gqa", (1, 8, 3, 128), (1, 2, 1000, 128), True, True, devices=CUDA))


# ---------------------------------------------------------------- mixed dtypes
# Promotion like PyTorch (ops.yaml, add's doc); gradients come back in each input's own dtype.
NOT_F64 = ("f32", "f16", "bf16", "i32", "i64", "bool")
add_variants("add", V("promote_with_f64", a=Arg((3, 4)), b=Arg((4,), dtype="f64"), dtypes=NOT_F64))
add_variants("mul",
             V("promote_with_i64", a=Arg((3, 4)), b=Arg((3, 4), dtype="i64"), dtypes=FLOAT_DTYPES),
             V("bool_mask", a=Arg((3, 4), dtype="bool"), b=Arg((3, 4)), dtypes=FLOAT_DTYPES))
for _op in ("maximum", "minimum"):
    add_variants(_op, V("promote_i64_with_float", a=Arg((3, 4), dtype="i64"), b=Arg((3, 4), Grid(0.075)),
                        dtypes=FLOAT_DTYPES))
add_variants("where", V("promote_with_f64", cond=Arg((3, 4), dtype="bool"), a=Arg((3, 4)), b=Arg((4,), dtype="f64"),
                        dtypes=("f32", "f16", "bf16", "i32", "i64")))
add_variants("div", V("int_by_int", a=Arg((3, 4), dtype="i64"), b=Arg((3, 4), U(1, 4), dtype="i64"), dtypes=("f32",)))
# two floating dtypes reach the kernels as they are (converted while loading): strided and
# broadcast operands of two dtypes, and the in-place op that writes into its f32 target directly
add_variants("mul", V("mixed_bf16_f32_strided", a=Arg((4, 5), dtype="bf16", layout="T"), b=Arg((5,), dtype="f32"),
                      dtypes=("f32",)))
add_variants("sub", V("mixed_f16_f64_strided", a=Arg((3, 6), dtype="f16", layout="S"), b=Arg((3, 1), dtype="f64"),
                      dtypes=("f64",)))
add_variants("add_", V("mixed_into_f32", x=Arg((3, 4), dtype="f32"), b=Arg((4,), dtype="bf16"), dtypes=("f32",)))


# ---------------------------------------------------------------- edge values (tests/capi/test_ops.c)
# Special values through every unary op, torch (in f64, in_f64 below) as the reference: zeros of
# both signs, infinities, NaN, values whose results overflow or underflow (f32, f16 and bf16
# overflow earlier than f64).
SPECIAL = Vals([0.0, -0.0, math.inf, -math.inf, math.nan, 100.0, -100.0, 1e-30])
NONFINITE = "non-finite inputs: finite differences of them are meaningless (grad vs torch covers them)"
# Wide domains: the unary ops over the ranges test_ops.c swept ([9, 13], f32 and f64).
WIDE = ("f32", "f64")
UNARY_EDGES: Dict[str, Tuple[Domain, Dict[str, Any]]] = {
    "neg": (U(-4, 4), {}), "abs": (U(-4, 4), {}), "exp": (U(-10, 10), {}), "log": (U(0.01, 50), {}),
    "sqrt": (U(0.01, 50), {}), "rsqrt": (U(0.01, 50), {}), "sin": (U(-6, 6), {}), "cos": (U(-6, 6), {}),
    "tanh": (U(-5, 5), {}), "sinh": (U(-4, 4), {}), "cosh": (U(-4, 4), {}), "sigmoid": (U(-8, 8), {}),
    "relu": (U(-4, 4), {}), "leaky_relu": (U(-4, 4), {"negative_slope": 0.1}),
    "gelu": (U(-5, 5), {"approximate_tanh": False}), "silu": (U(-6, 6), {}), "softplus": (U(-6, 25), {}),
    "mish": (U(-6, 6), {}), "clamp": (U(-2, 2), {"lo": -0.5, "hi": 0.75}), "add_scalar": (U(-4, 4), {"value": 2.5}),
    "cone": (U(-4, 6), {}), "parabolic_cone": (U(-4, 6), {}), "parcon": (U(-4, 6), {"beta": 1.5}),
    "mul_scalar": (U(-4, 4), {"value": -1.75}), "pow_scalar": (U(0, 4), {"exponent": 2.5}),
}
# Where the engine differs from torch (reported, docs/harness_case_map.md "Known differences"): the
# mode is skipped on the variant with that value, and a twin without it runs everything else.
DIFFERS = "ENGINE DIFFERS FROM TORCH: "
SPECIAL_SKIPS = {
    "rsqrt": ({"grad": DIFFERS + "rsqrt's gradient at -inf is 0 here, NaN in torch"},
              [0.0, -0.0, math.inf, 2.5, math.nan, 100.0, -100.0, 1e-30]),
}


def in_f64(ref: Callable[..., Any]) -> Callable[..., Any]:
    """ref computed in f64 and rounded to the input's dtype: torch's vectorized f32 kernels treat
    infinities differently across versions (gelu(inf) is NaN in torch 2.11's, inf in its f64)."""
    def run(**kw: Any) -> Any:
        dt = next(v.dtype for v in kw.values() if isinstance(v, torch.Tensor))
        return ref(**{k: v.double() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}).to(dt)
    return run


for _op, (_dom, _attrs) in UNARY_EDGES.items():
    _skips, _twin = SPECIAL_SKIPS.get(_op, ({}, None))
    add_variants(_op, V("special_values", x=Arg((8,), SPECIAL), dtypes=FLOAT_DTYPES, ref=in_f64(CASES[_op].ref),
                        skip=dict(_skips, gradcheck=NONFINITE), **_attrs),
                 V("wide", x=Arg((9, 13), _dom), dtypes=WIDE, **_attrs))
    if _twin:
        add_variants(_op, V("special_values_twin", x=Arg((8,), Vals(_twin)), dtypes=FLOAT_DTYPES,
                            ref=in_f64(CASES[_op].ref), skip={"gradcheck": NONFINITE}, **_attrs))
add_variants("gelu", V("special_values_tanh", x=Arg((8,), SPECIAL), approximate_tanh=True, dtypes=FLOAT_DTYPES,
                       ref=in_f64(CASES["gelu"].ref), skip={"gradcheck": NONFINITE}),
             V("wide_tanh", x=Arg((9, 13), U(-5, 5)), approximate_tanh=True, dtypes=WIDE))
add_variants("pow_scalar", V("special_values_cube", x=Arg((8,), SPECIAL), exponent=3.0, dtypes=FLOAT_DTYPES,
                             ref=in_f64(CASES["pow_scalar"].ref), skip={"gradcheck": NONFINITE}))
for _op, _attrs in [("gelu_backward", {"approximate_tanh": False}), ("gelu_backward", {"approximate_tanh": True}),
                    ("silu_backward", {})]:
    add_variants(_op, V("special_values" + ("_tanh" if _attrs.get("approximate_tanh") else ""), grad=Arg((8,)),
                        x=Arg((8,), SPECIAL), dtypes=FLOAT_DTYPES, ref=in_f64(CASES[_op].ref),
                        skip={"gradcheck": NONFINITE}, **_attrs))


# dtype promotion pairs (like torch; ops.yaml, add's doc), each run once (the result's dtype
# labels it): a [2, 3] and b [3] (broadcast) of the given dtypes
def promotion(op: str, da: str, db: str, result: str, da_dom: Domain = STD, db_dom: Domain = STD,
              **opts: Any) -> None:
    add_variants(op, V(f"promote_{da}_{db}", a=Arg((2, 3), da_dom, dtype=da), b=Arg((3,), db_dom, dtype=db),
                       dtypes=(result if result != "bool" else da,), **opts))


for _op, _da, _db, _r in [("add", "i32", "f32", "f32"), ("add", "f32", "i32", "f32"), ("mul", "i32", "i64", "i64"),
                          ("add", "i64", "f16", "f16"), ("add", "f16", "bf16", "f32"),
                          ("add", "bf16", "f32", "f32"), ("mul", "f32", "f64", "f64"),
                          ("maximum", "i32", "f64", "f64"), ("lt", "i32", "f32", "bool"), ("eq", "f16", "bf16", "bool"),
                          ("ne", "bool", "f64", "bool"), ("ge", "i64", "i32", "bool")]:
    promotion(_op, _da, _db, _r)
# torch refuses bool - int; the engine subtracts the bool as 0/1
promotion("sub", "bool", "i32", "i32", ref=lambda a, b: a.to(b.dtype) - b)
promotion("div", "i32", "i32", "f32", db_dom=Away(1, 2))
promotion("div", "i64", "i32", "f32", db_dom=Away(1, 2))
# integer arithmetic stays exact beyond f32's (and f64's) integers
add_variants("add", V("i64_beyond_2_53", a=Arg((3,), Vals([2.0 ** 40, -(2.0 ** 35), 2.0 ** 62]), dtype="i64"),
                      b=Arg((3,), Vals([1.0, 3.0, 1.0]), dtype="i64"), dtypes=("i64",)))
add_variants("where", V("int_with_float", cond=Arg((3, 4), dtype="bool"), a=Arg((4,), dtype="i32"), b=Arg((3, 1)),
                        dtypes=FLOAT_DTYPES),
             V("transposed_cond", cond=Arg((3, 4), dtype="bool", layout="T"), a=Arg((3, 4)), b=Arg(())))
add_variants("copy_", V("cast_broadcast_into_transposed", x=Arg((3, 2), layout="T"), src=Arg((2,), dtype="f32")))
# a transposed 3-d operand against a broadcast column
for _op, _da, _db in [("add", Grid(0.025), Grid(0.075)), ("sub", Grid(0.025), Grid(0.075)),
                      ("mul", Grid(0.025), Grid(0.075)), ("maximum", Grid(0.025), Grid(0.075)),
                      ("minimum", Grid(0.025), Grid(0.075)), ("mul_tanh", Grid(0.025), Grid(0.075)),
                      ("div", STD, Away(0.5, 2.0)), ("pow", POS, U(-2, 2, ints=(0, 3)))] + [
        (_c, Ties(), Ties()) for _c in ("eq", "ne", "lt", "le", "gt", "ge")]:
    add_variants(_op, V("transposed_3d_broadcast", a=Arg((2, 3, 4), _da, "T"), b=Arg((3, 1), _db)))
# a matrix against a batch of matrices
add_variants("matmul", V("2d_batched", a=Arg((3, 5), MM), b=Arg((2, 5, 4), MM)))
# A contiguous operand against one broadcast along its leading dimensions (a bias row: CUDA's
# i % inner path), either operand first: rows of whole 16-byte vectors, odd rows, rows shorter
# than a vector, [1, T, D] against [B, T, D], and sizes where each CUDA thread loops several times.
BIAS_SHAPES = [("bias_row", (6, 16), (16,)), ("bias_1n", (6, 16), (1, 16)), ("bias_3d", (2, 5, 8), (1, 5, 8)),
               ("bias_odd_row", (7, 13), (13,)), ("bias_short_row", (5, 3), (3,)),
               ("bias_large", (64, 264), (264,)), ("bias_large_odd", (37, 131), (131,)),
               ("bias_large_3d", (4, 33, 64), (1, 33, 64))]
HALF_BIAS_SUM = ("the bias gradient sums up to 64 half-rounded products where torch sums f32 ones "
                 "(the small variants check half gradients)")
for _op, _da, _db in [("add", STD, STD), ("sub", STD, STD), ("mul", STD, STD), ("div", STD, Away(0.5, 2.0))]:
    for _name, _full, _bias in BIAS_SHAPES:
        _skip = {"grad@f16": HALF_BIAS_SUM, "grad@bf16": HALF_BIAS_SUM} if "large" in _name else {}
        add_variants(_op, V(_name, a=Arg(_full, _da), b=Arg(_bias, _db), skip=_skip),
                     V(_name + "_first", a=Arg(_bias, _da), b=Arg(_full, _db), skip=_skip))
# ... with operands of two floating dtypes (converted while loading)
add_variants("add", V("bias_mixed_bf16_f32", a=Arg((37, 131), dtype="bf16"), b=Arg((131,), dtype="f32"), dtypes=("f32",)),
             V("bias_mixed_f32_first", a=Arg((1, 16), dtype="f32"), b=Arg((6, 16), dtype="bf16"), dtypes=("f32",)))
add_variants("sub", V("bias_mixed_f16_f64_first", a=Arg((33, 64), dtype="f16"), b=Arg((4, 33, 64), dtype="f64"),
                      dtypes=("f64",)))
add_variants("bias_gelu", V("tanh_large_row_bias", x=Arg((37, 131), U(-3, 3)), bias=Arg((131,), U(-1, 1)),
                            approximate_tanh=True))

# reductions: NaN propagates (max/min like torch.amax, argmax points at the first NaN), every
# axis given explicitly and negative, exact integer sums past i32, a long f32 sum
NANS = Vals([1, 2, math.nan, 0, 3, 4, 5, 6, 7, 8, 9, math.nan])
NAN_GRAD = "NaN inputs: finite differences of them are meaningless"
for _op in ("max", "min"):
    add_variants(_op, *[V(f"nan_{name}", x=Arg((2, 3, 2), NANS), axes=axes, keepdim=False, dtypes=FLOAT_DTYPES,
                          skip={"gradcheck": NAN_GRAD})
                        for name, axes in (("rows", [2]), ("middle", [1]), ("all", []))])
add_variants("argmax", V("nan", x=Arg((2, 3, 2), NANS), axis=1, keepdim=False, dtypes=FLOAT_DTYPES))
for _op in ("maximum", "minimum"):
    add_variants(_op, V("nan", a=Arg((2, 3, 2), U(0, 0)), b=Arg((2, 3, 2), NANS), dtypes=FLOAT_DTYPES,
                        skip={"gradcheck": NAN_GRAD,
                              "grad": DIFFERS + f"where one operand is NaN, {_op}'s gradient is 0 for both here; "
                                                "torch gives both the whole upstream gradient"}))
for _op in ("sum", "mean", "max", "min"):
    add_variants(_op, V("axes_all_negative", x=Arg((2, 3, 4), Distinct()), axes=[-1, -3, -2], keepdim=True))
add_variants("var", V("c1_axes_all_negative", x=Arg((2, 3, 4)), axes=[-1, -3, -2], correction=1, keepdim=False))
add_variants("sum", V("i32_past_i32", x=Arg((2, 3), Vals([2e9, 2e9, -5, 7, 1, 1]), dtype="i32"), axes=[],
                      keepdim=False, dtypes=("i32",)),
             V("long_f32", x=Arg((1 << 20,), U(0.1, 0.1)), axes=[], keepdim=False, dtypes=("f32",)))
add_variants("max", V("i32_large", x=Arg((2, 3), Vals([2e9, 2e9, -5, 7, 1, 1]), dtype="i32"), axes=[1],
                      keepdim=False, dtypes=("i32",)))
add_variants("mean", V("long_f32_keep", x=Arg((1 << 20,), U(0.1, 0.1)), axes=[], keepdim=True, dtypes=("f32",)))
# argmax over many ties along every axis (the first maximum wins), kept or not, transposed
add_variants("argmax", *[V(f"ties_axis{a}", x=Arg((4, 5, 6), Ties()), axis=a, keepdim=a % 2 == 0)
                         for a in (-3, -2, -1, 0, 1, 2)],
             V("ties_transposed", x=Arg((4, 5, 6), Ties(), "T"), axis=-1, keepdim=False))

# softmax: negative axes, logits around 1000 (the stable formulation)
for _op in ("softmax", "log_softmax"):
    add_variants(_op, V("axis-2", x=Arg((2, 3, 5), U(-3, 3)), axis=-2),
                 V("axis-3", x=Arg((2, 3, 5), U(-3, 3)), axis=-3),
                 V("logits_near_1000", x=Arg((4, 7), U(995, 1005)), axis=1, dtypes=("f32", "f64")))

# indexing: index tensors that are themselves views (a strided and a transposed index), gather
# along each axis of a 3-d input with an index longer along it and shorter elsewhere
add_variants("index_select", V("strided_index", x=Arg((5, 4)), axis=0, index=Idx((3,), 5, layout="S")))
add_variants("embedding", V("strided_indices", weight=Arg((5, 4)), indices=Idx((3,), 5, layout="S")),
             V("transposed_indices", weight=Arg((5, 4)), indices=Idx((4, 3), 5, layout="T")))
add_variants("gather", V("transposed_index", x=Arg((5, 4)), axis=0, index=Idx((5, 4), 5, layout="T")),
             V("strided_index", x=Arg((3, 4)), axis=1, index=Idx((3, 2), 4, layout="S")),
             *[V(f"3d_axis{a}", x=Arg((3, 4, 5)), axis=a,
                 index=Idx(tuple(6 if d == a else s for d, s in enumerate((2, 3, 4))), (3, 4, 5)[a]))
               for a in range(3)])
add_variants("one_hot", V("transposed_indices", indices=Idx((4, 5), 5, dtype=None, layout="T"), num_classes=5,
                          dtype="f64"))
add_variants("cross_entropy", V("strided_target", logits=Arg((3, 4)), target=Idx((3,), 4, layout="S"),
                                ignore_index=-100, label_smoothing=0.1, reduction="sum"))
add_variants("bce_with_logits", V("logits_60", logits=Arg((4,), Vals([-60.0, 60.0, -60.0, 60.0])),
                                  target=Arg((4,), Vals([0.75, 0.125, 0.0, 1.0])), reduction="none"))


# ---------------------------------------------------------------- error paths
# Each op's own failures: shapes that do not fit, bad axes, dtypes, index ranges, attribute
# values, device mismatches (CUDA only). The C API's contract for every function (NULL and freed
# handles, NULL out pointers, the message format, creation and autograd APIs) stays in
# tests/capi/test_errors.c. Inputs are f32 unless an error variant says otherwise.
A23, A24, A33, A22, V3, V4 = Arg((2, 3)), Arg((2, 4)), Arg((3, 3)), Arg((2, 2)), Arg((3,)), Arg((4,))
SCALAR = Arg(())
BAD_REDUCTIONS = (3, -1, 42)


def t_idx(*values: int, dtype: str = "i64") -> Idx:
    """A 1-d index tensor holding exactly these values (in range or not)."""
    return Idx((len(values),), max(values + (0,)) + 1, dtype=dtype, values=values)


# views and shape ops
add_errors("reshape",
           E("wrong_count", SHAPE, "[2,3]", "[4]", x=A23, shape=[4]),
           E("two_inferred", SHAPE, "only one dimension may be -1", "[-1,-1]", x=A23, shape=[-1, -1]),
           E("negative_size", SHAPE, "-2", "[-2,-3]", x=A23, shape=[-2, -3]),
           E("negative_size_with_count", SHAPE, "-2", "[-2,12]", x=Arg((2, 3, 4)), shape=[-2, 12]),
           E("wrong_count_square", SHAPE, "[2,3,4]", "[5,5]", x=Arg((2, 3, 4)), shape=[5, 5]),
           E("not_divisible", SHAPE, "[2,3,4]", "[7,-1]", x=Arg((2, 3, 4)), shape=[7, -1]),
           E("infer_next_to_zero", SHAPE, "[0,3]", "[0,-1]", x=Arg((0, 3)), shape=[0, -1]))
add_errors("view",
           E("wrong_count", SHAPE, "[2,3]", "[5,-1]", x=A23, shape=[5, -1]),
           E("transposed_flatten", SHAPE, "[4,3]", "strides [1,4]", "[12]", x=Arg((4, 3), layout="T"), shape=[12]))
add_errors("transpose",
           E("dim_below_rank", SHAPE, "axis -3", "rank 2", x=A23, dim0=0, dim1=-3),
           E("dim_at_rank", SHAPE, "axis 2", "rank 2", x=A23, dim0=0, dim1=2))
add_errors("permute",
           E("too_many_dims", SHAPE, "3 entries", "rank 2", x=A23, dims=[0, 1, 2]),
           E("too_few_dims", SHAPE, "1 entries", "rank 2", x=A23, dims=[0]),
           E("repeated", SHAPE, "axis 1 repeats", x=A23, dims=[1, 1]),
           E("out_of_range", SHAPE, "entry 2", "rank 2", x=A23, dims=[0, 2]))
add_errors("slice",
           E("bad_axis", SHAPE, "axis 2", "rank 2", x=A23, axis=2, start=0, end=1, step=1),
           E("scalar", SHAPE, "scalar", x=SCALAR, axis=0, start=0, end=1, step=1),
           E("zero_step", INVALID, "step", "0", x=A23, axis=1, start=0, end=3, step=0),
           E("negative_step", INVALID, "step", "-1", x=A23, axis=1, start=3, end=0, step=-1))
add_errors("expand",
           E("fewer_dims", SHAPE, "[3]", "[2]", x=V3, shape=[2]),
           E("fewer_dims_2d", SHAPE, "[2,3]", "[3]", x=A23, shape=[3]),
           E("wrong_size", SHAPE, "[3]", "[3,4]", x=V3, shape=[3, 4]),
           E("non_singleton", SHAPE, "[3,1]", "[4,4]", x=Arg((3, 1)), shape=[4, 4]),
           E("fewer_dims_than_x", SHAPE, "[3,1]", "[4]", x=Arg((3, 1)), shape=[4]),
           E("keep_on_new_axis", SHAPE, "-1", "[-1,3,4]", x=Arg((3, 1)), shape=[-1, 3, 4]),
           E("negative_size", SHAPE, "size -2", "[-2,2]", x=Arg((2,)), shape=[-2, 2]))
add_errors("squeeze",
           E("not_size_one", SHAPE, "axis 1", "size 3", "[2,3]", x=A23, axis=1),
           E("transposed_not_size_one", SHAPE, "axis 0", "size 4", "[4,3]", x=Arg((4, 3), layout="T"), axis=0),
           E("bad_axis", SHAPE, "axis 4", x=A23, axis=4))
add_errors("unsqueeze",
           E("past_the_end", SHAPE, "axis 3", x=A23, axis=3),
           E("before_the_start", SHAPE, "axis -4", x=A23, axis=-4))
add_errors("flatten",
           E("reversed", SHAPE, "start axis 1", "end axis 0", x=A23, start_axis=1, end_axis=0),
           E("bad_end", SHAPE, "axis 2", x=A23, end_axis=2, start_axis=0))
add_errors("cast", *[E(f"bad_dtype_{d}", DTYPE, str(d), x=V3, dtype=d) for d in (10, -1, 99)])
add_errors("cat",
           E("shapes", SHAPE, "tensor 1", "[2,4]", "[2,3]", xs=[A23, A24], axis=0),
           E("scalars", SHAPE, "scalar", xs=[SCALAR, SCALAR], axis=0),
           E("no_tensors", INVALID, "at least one", xs=[], axis=0),
           E("bad_axis", SHAPE, "axis 2", xs=[A23, A23], axis=2),
           E("dtypes", DTYPE, "f64", "f32", xs=[A22, Arg((2, 2), dtype="f64")], axis=0))
add_errors("stack",
           E("shapes", SHAPE, "[2,4]", "[2,3]", xs=[A23, A24], axis=0),
           E("no_tensors", INVALID, "at least one", xs=[], axis=0),
           E("bad_axis", SHAPE, "axis 3", xs=[A23, A23], axis=3),
           E("dtypes", DTYPE, "f64", "f32", xs=[A22, Arg((2, 2), dtype="f64")], axis=0))
add_errors("split",
           E("sizes_do_not_sum", SHAPE, "sum to 2", "size 3", x=A23, sizes=[1, 1], axis=1),
           E("negative_size", SHAPE, "-1", x=A23, sizes=[4, -1], axis=1),
           E("bad_axis", SHAPE, "axis -3", x=A23, sizes=[1, 1], axis=-3))

# elementwise
add_errors("add", E("shapes", SHAPE, "[2,3]", "[4]", a=A23, b=V4))
add_errors("mul", E("shapes", SHAPE, "[2,4]", "[3,3]", a=A24, b=A33))
add_errors("lt", E("shapes", SHAPE, "[2,3]", "[4]", a=A23, b=V4))
add_errors("where",
           E("shapes", SHAPE, "[2]", "[2,3]", cond=Arg((2,), dtype="bool"), a=A23, b=V3),
           E("cond_not_bool", DTYPE, "bool", "f32", cond=A22, a=A22, b=A22))
add_errors("clamp",
           E("lo_above_hi", INVALID, "lo", "hi", "2", "1", x=A23, lo=2.0, hi=1.0),
           E("lo_above_hi_fraction", INVALID, "0.5", "-0.5", x=A23, lo=0.5, hi=-0.5))
add_errors("copy_", E("shapes", SHAPE, "[2,3]", "[3]", x=V3, src=A23))
add_errors("add_", E("shapes", SHAPE, "[2,3]", "[3]", x=V3, b=A23))
add_errors("mul_", E("shapes", SHAPE, "[4]", "[2,3]", x=A23, b=V4))

# reductions
add_errors("sum",
           E("bad_axis", SHAPE, "axis 2", "rank 2", x=A23, axes=[2], keepdim=False),
           E("axis_twice", SHAPE, "axis -2", "twice", x=A23, axes=[0, -2], keepdim=False),
           E("same_axis_twice", SHAPE, "axis 0", "twice", x=A23, axes=[0, 0], keepdim=False))
add_errors("mean", E("bad_axis", SHAPE, "axis -3", "rank 2", x=A23, axes=[-3], keepdim=True))
add_errors("max",
           E("bad_axis", SHAPE, "axis 2", x=A23, axes=[2], keepdim=False),
           E("empty_axis", SHAPE, "empty axis 0", "[0,3]", x=Arg((0, 3)), axes=[0], keepdim=False),
           E("empty_last_axis", SHAPE, "empty axis 1", "[2,0]", x=Arg((2, 0)), axes=[1], keepdim=False))
add_errors("min", E("empty_axis", SHAPE, "empty axis 0", "[0,3]", x=Arg((0, 3)), axes=[0], keepdim=False))
add_errors("var",
           E("bad_axis", SHAPE, "axis 2", x=A23, axes=[2], correction=1, keepdim=False),
           E("negative_correction", INVALID, "correction", "-1", x=A23, axes=[], correction=-1, keepdim=False),
           E("integer", DTYPE, "x", "i32", x=A22, axes=[], correction=1, keepdim=False, inputs="i32"))
add_errors("argmax",
           E("bad_axis", SHAPE, "axis 5", x=A23, axis=5, keepdim=False),
           E("empty_axis", SHAPE, "empty axis 0", "[0,3]", x=Arg((0, 3)), axis=0, keepdim=False),
           E("empty_vector", SHAPE, "empty axis 0", "[0]", x=Arg((0,)), axis=0, keepdim=False))

# linear algebra, softmax
add_errors("matmul",
           E("inner", SHAPE, "inner dimensions differ", "[2,4]", "[3,3]", a=A24, b=A33),
           E("inner_vectors", SHAPE, "inner dimensions differ", a=V4, b=V3),
           E("scalar_a", SHAPE, "at least one dimension", "[]", a=SCALAR, b=V3),
           E("scalar_b", SHAPE, "at least one dimension", "[]", a=A23, b=SCALAR),
           E("batch", SHAPE, "do not broadcast", "2 vs 3", a=Arg((2, 2, 3)), b=Arg((3, 3, 4))),
           E("dtypes", DTYPE, "f32", "f64", a=A22, b=Arg((2, 2), dtype="f64")),
           E("integer", DTYPE, "a", "i32", a=A22, b=A22, inputs="i32"))
add_errors("linear",
           E("in_features", SHAPE, "[2,3]", "[2,4]", x=A23, weight=A24),
           E("weight_1d", SHAPE, "weight", "[3]", x=A23, weight=V3),
           E("bias", SHAPE, "bias", "[2]", "[4]", x=A24, weight=A24, bias=V4),
           E("dtypes", DTYPE, "x is f32", "weight is f64", x=A22, weight=Arg((2, 2), dtype="f64")))
add_errors("softmax",
           E("bad_axis", SHAPE, "axis 2", "rank 2", x=A23, axis=2),
           E("integer", DTYPE, "x", "i32", x=A22, axis=0, inputs="i32"))
add_errors("log_softmax", E("bad_axis", SHAPE, "axis -3", x=A23, axis=-3))

# indexing
X45 = Arg((4, 5))
add_errors("index_select",
           E("index_2d", SHAPE, "1-d", "[2,2]", x=A23, axis=0, index=Idx((2, 2), 2)),
           E("bad_axis", SHAPE, "axis 2", x=A23, axis=2, index=t_idx(0)),
           E("float_index", DTYPE, "integer", "f32", x=A22, axis=0, index=t_idx(0, 1, dtype="f32")),
           E("index_too_large", INVALID, "index 4", "size 4", x=X45, axis=0, index=t_idx(0, 4, 1)),
           E("negative_index", INVALID, "index -1", "size 5", x=X45, axis=1, index=t_idx(0, -1, 1)),
           E("i32_index_too_large", INVALID, "index 5", "size 5", x=X45, axis=1, index=t_idx(5, 0, 0, dtype="i32")))
add_errors("gather",
           E("index_rank", SHAPE, "rank of x (2)", "[3]", x=A23, axis=0, index=t_idx(0, 1, 0)),
           E("float_index", DTYPE, "integer", "f32", x=A22, axis=0, index=Idx((2, 2), 2, dtype="f32")),
           E("index_too_large", INVALID, "index 5", "size 5", x=X45, axis=1, index=Idx((2, 2), 6, values=[0, 1, 5, 2])))
add_errors("embedding",
           E("weight_1d", SHAPE, "weight", "[3]", weight=V3, indices=t_idx(0, 1)),
           E("float_indices", DTYPE, "integer", "f32", weight=A22, indices=Idx((2,), 2, dtype="f32")),
           E("index_too_large", INVALID, "index 4", "size 4", weight=X45, indices=t_idx(0, 4, 1)),
           E("negative_index", INVALID, "index -1", weight=X45, indices=t_idx(0, -1, 1)))
add_errors("one_hot",
           E("float_indices", DTYPE, "integer", "f32", indices=Idx((2, 2), 2, dtype="f32"), num_classes=3, dtype="f32"),
           E("bad_dtype", DTYPE, "dtype", "10", indices=t_idx(0, 1), num_classes=3, dtype=10),
           E("storage_dtype", DTYPE, "i8", "storage", indices=t_idx(0, 1), num_classes=3, dtype=7),
           E("zero_classes", INVALID, "num_classes", "0", indices=t_idx(0, 2), num_classes=0, dtype="f32"),
           E("index_at_classes", INVALID, "index 1", "size 1", indices=t_idx(0, 1), num_classes=1, dtype="f32"),
           E("index_too_large", INVALID, "index 4", "size 4", indices=t_idx(0, 4, 1), num_classes=4, dtype="f32"),
           E("negative_index", INVALID, "index -1", indices=t_idx(0, -1, 1), num_classes=4, dtype="f32"))

# losses
T3 = t_idx(0, 1, 0)
add_errors("cross_entropy",
           E("target_rows", SHAPE, "[2,3]", "[3]", logits=A23, target=T3, ignore_index=-100, label_smoothing=0.0,
             reduction="mean"),
           E("logits_1d", SHAPE, "[N, C]", "[3]", logits=V3, target=T3, ignore_index=-100, label_smoothing=0.0,
             reduction="mean"),
           E("logits_3d", SHAPE, "[N, C]", "[2,3,1]", logits=Arg((2, 3, 1)), target=t_idx(0, 1), ignore_index=-100,
             label_smoothing=0.0, reduction="mean"),
           E("float_target", DTYPE, "target", "f32", logits=A22, target=Idx((2,), 2, dtype="f32"),
             ignore_index=-100, label_smoothing=0.0, reduction="mean"),
           E("integer_logits", DTYPE, "logits", "i32", logits=A22, target=Idx((2,), 2, dtype="f32"), ignore_index=-100,
             label_smoothing=0.0, reduction="mean", inputs="i32"),
           E("smoothing_above_1", INVALID, "label_smoothing", "1.5", logits=A23, target=t_idx(0, 2),
             ignore_index=-100, label_smoothing=1.5, reduction="mean"),
           E("negative_smoothing", INVALID, "label_smoothing", "-0.1", logits=A23, target=t_idx(0, 2),
             ignore_index=-100, label_smoothing=-0.1, reduction="mean"),
           # without smoothing cross_entropy is softmax_cross_entropy: on CUDA a NaN loss instead
           E("target_out_of_range", INVALID, "target 7", "row 1", "[0, 5)", logits=Arg((2, 5)), target=t_idx(1, 7),
             ignore_index=-100, label_smoothing=0.0, reduction="mean", devices=("cpu",)),
           E("target_out_of_range_smoothed", INVALID, "index 7", "size 5", logits=Arg((2, 5)), target=t_idx(1, 7),
             ignore_index=-100, label_smoothing=0.1, reduction="mean"),
           *[E(f"reduction_{r}", INVALID, "reduction", str(r), logits=A23, target=t_idx(0, 1), ignore_index=-100,
               label_smoothing=0.0, reduction=r) for r in BAD_REDUCTIONS + (7,)])
add_errors("nll_loss",
           E("target_out_of_range", INVALID, "index 7", "size 5", log_probs=Arg((2, 5)), target=t_idx(1, 7),
             ignore_index=-100, reduction="sum"),
           *[E(f"reduction_{r}", INVALID, "reduction", str(r), log_probs=A23, target=t_idx(0, 1), ignore_index=-100,
               reduction=r) for r in BAD_REDUCTIONS])
add_errors("mse_loss",
           E("shapes", SHAPE, "[2,3]", "[2,4]", input=A23, target=A24, reduction="mean"),
           E("shapes_transposed", SHAPE, "[2,3]", "[3,2]", input=A23, target=Arg((3, 2)), reduction="mean"),
           E("integer", DTYPE, "input", "i32", input=A22, target=A22, reduction="mean", inputs="i32"),
           *[E(f"reduction_{r}", INVALID, "reduction", str(r), input=A23, target=A23, reduction=r)
             for r in BAD_REDUCTIONS])
add_errors("bce_with_logits",
           E("shapes", SHAPE, "[2,3]", "[2,2]", logits=A23, target=A22, reduction="sum"),
           E("shapes_flat", SHAPE, "[2,3]", "[6]", logits=A23, target=Arg((6,)), reduction="sum"),
           E("integer", DTYPE, "logits", "i32", logits=A22, target=A22, reduction="mean", inputs="i32"),
           *[E(f"reduction_{r}", INVALID, "reduction", str(r), logits=A23, target=A23, reduction=r)
             for r in BAD_REDUCTIONS])

# fused kernels
X32 = Arg((3, 2))
add_errors("rms_norm",
           E("weight_size", SHAPE, "weight", "[3]", "[4]", x=A23, weight=V4, eps=1e-5),
           E("integer_x", DTYPE, "x", "i64", x=A23, eps=1e-5, inputs="i64"),
           E("negative_eps", INVALID, "eps", "-1", x=A23, eps=-1.0))
add_errors("layer_norm",
           E("bias_size", SHAPE, "bias", "[4]", x=A23, weight=V3, bias=V4, eps=1e-5),
           E("integer_weight", DTYPE, "weight", "i64", x=A23, weight=Arg((3,), dtype="i64"), eps=1e-5))
add_errors("add_rms_norm",
           E("residual_shape", SHAPE, "residual", "[3,2]", "[2,3]", x=A23, residual=X32, weight=V3, eps=1e-5))
add_errors("softmax_cross_entropy",
           # the CPU checks the targets; CUDA gives a NaN loss instead (no host sync; ops.yaml)
           E("target_out_of_range", INVALID, "target 3", "row 1", "[0, 3)", logits=A23, target=t_idx(0, 3),
             ignore_index=-100, reduction="mean", devices=("cpu",)),
           E("target_rows", SHAPE, "[2,3]", "[3]", logits=A23, target=Idx((3,), 1, values=[0, 0, 0]),
             ignore_index=-100, reduction="mean"),
           E("float_target", DTYPE, "target", "f32", logits=A23, target=Idx((2,), 3, dtype="f32"), ignore_index=-100,
             reduction="mean"),
           E("integer_logits", DTYPE, "logits", "i64", logits=A23, target=t_idx(0, 2), ignore_index=-100,
             reduction="mean", inputs="i64"),
           E("reduction_7", INVALID, "reduction", "7", logits=A23, target=t_idx(0, 2), ignore_index=-100, reduction=7))
add_errors("swiglu", E("shapes", SHAPE, "[2,3]", "[3,2]", gate=A23, up=X32))
ADAM_OK = dict(step=1, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, decoupled_weight_decay=True)
ADAM_STATE = dict(params=[A23], exp_avgs=[Arg((2, 3), U(0, 0))], exp_avg_sqs=[Arg((2, 3), U(0, 0))])
add_errors("adam_step_multi",
           # (the four arrays share one count in C: the bindings check the lengths of the lists)
           E("options_struct_size", INVALID, "options->struct_size is 4", "expected", grads=[A23], **ADAM_STATE,
             **ADAM_OK, struct_sizes={"options": 4}),
           E("grad_dtype", DTYPE, "grad 0", "f64", grads=[Arg((2, 3), dtype="f64")], **ADAM_STATE, **ADAM_OK),
           E("grad_shape", SHAPE, "grad 0", "[3,2]", "[2,3]", grads=[X32], **ADAM_STATE, **ADAM_OK),
           E("step_0", INVALID, "step", "got 0", grads=[A23], **ADAM_STATE, **dict(ADAM_OK, step=0)),
           E("beta1_above_1", INVALID, "betas", "1.5", grads=[A23], **ADAM_STATE, **dict(ADAM_OK, beta1=1.5)))

# device mismatches: one operand pinned to the CPU while the others are on the GPU (CUDA only)
CPU_A23, CPU_V3 = Arg((2, 3), device="cpu"), Arg((3,), device="cpu")
MISMATCH = ("is on cpu", "is on cuda")
add_errors("add", E("device_mismatch", DEVICE, *MISMATCH, a=A23, b=CPU_A23, devices=CUDA))
add_errors("where", E("device_mismatch", DEVICE, *MISMATCH, cond=Arg((2, 3), dtype="bool", device="cpu"), a=A23,
                      b=A23, devices=CUDA))
add_errors("add_", E("device_mismatch", DEVICE, *MISMATCH, x=A23, b=CPU_A23, devices=CUDA))
add_errors("copy_", E("device_mismatch", DEVICE, *MISMATCH, x=A23, src=CPU_A23, devices=CUDA))
add_errors("cat", E("device_mismatch", DEVICE, *MISMATCH, xs=[A23, CPU_A23], axis=0, devices=CUDA))
add_errors("matmul", E("device_mismatch", DEVICE, *MISMATCH, a=A23, b=Arg((3, 2), device="cpu"), devices=CUDA))
add_errors("index_select", E("device_mismatch", DEVICE, *MISMATCH, x=A23, axis=0,
                             index=Idx((2,), 2, device="cpu"), devices=CUDA))
add_errors("gather", E("device_mismatch", DEVICE, *MISMATCH, x=A23, axis=1, index=Idx((2, 2), 3, device="cpu"),
                       devices=CUDA))
add_errors("rms_norm", E("device_mismatch", DEVICE, *MISMATCH, x=A23, weight=CPU_V3, eps=1e-6, devices=CUDA))
add_errors("add_rms_norm", E("device_mismatch", DEVICE, *MISMATCH, x=A23, residual=CPU_A23, weight=V3, eps=1e-6,
                             devices=CUDA))
add_errors("softmax_cross_entropy", E("device_mismatch", DEVICE, *MISMATCH, logits=A23,
                                      target=Idx((2,), 3, device="cpu"), ignore_index=-100, reduction="mean",
                                      devices=CUDA))
add_errors("flash_attention", E("device_mismatch", DEVICE, *MISMATCH, q=Arg((1, 1, 2, 4)),
                                k=Arg((1, 1, 2, 4), device="cpu"), v=Arg((1, 1, 2, 4)), causal=False, alibi=False,
                                scale=0.0, devices=CUDA))

# half-precision sums (issue 15): 4096 rows scattered into one in the backward (index_add for
# index_select and embedding, scatter_add for gather). A running sum rounded to f16/bf16 after
# every add drifts far from the f32 sum of the same values (most of these 32 columns fail the
# half grad tolerance that way; a bf16 sum of ones stops at 256); ours accumulates in f32 and
# rounds once. Half dtypes only: an f32 sum of 4096 values in another order than torch's can
# miss the f32 grad tolerance where a column's sum is near 0.
MANY_ROWS, HALF_DTYPES = 4096, ("f16", "bf16")
add_variants("embedding", V("many_to_one_row", weight=Arg((3, 32)),
                            indices=Idx((MANY_ROWS,), 3, values=[1] * MANY_ROWS), dtypes=HALF_DTYPES))
add_variants("index_select", V("many_to_one_middle_axis", x=Arg((2, 3, 16)), axis=1, index=Idx((MANY_ROWS,), 1),
                               dtypes=HALF_DTYPES))
add_variants("gather", V("many_to_one_row", x=Arg((2, 32)), axis=0, index=Idx((MANY_ROWS, 32), 1),
                         dtypes=HALF_DTYPES))
