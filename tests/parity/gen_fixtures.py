#!/usr/bin/python3
"""Generates the PyTorch parity fixtures: usage `gen_fixtures.py OUT.safetensors [--device cuda]`.

--device cpu (the default) computes everything on the CPU. --device cuda draws the same inputs
and upstream gradients on the CPU from the same seed (so they are bit-identical to the CPU file),
then runs the ops, and their backward, with torch on CUDA (TF32 off), for test_parity's `cuda`
mode; that file also carries the metadata "device" = "cuda" and "cuda_device_name".

Every case k ("c000", "c001", ...) stores, in one SafeTensors file:
  k.in<i>    the inputs as the C side loads them: the leaves. A non-contiguous input is stored
             in its storage layout and the C side makes the view: nx_transpose (tr<i>=d0,d1),
             then nx_slice with a step (sl<i>=axis,start,end,step); its gradient is the leaf's.
  k.out<j>   PyTorch's outputs
  k.gout<j>  the random upstream gradient of each floating output (backward cases only)
  k.grad<i>  PyTorch's gradient of every input listed in grad=
and a metadata entry "case.k" = "op=NAME;dt=f32;nin=2;nout=1;grad=0,1;key=value;..." that
test_parity.c parses (dt, the first floating input's dtype, is informational: tolerances follow
the dtype of each compared tensor). Metadata "ncases" is the number of cases. Written without the
`safetensors` package: 8-byte little-endian header length, JSON header, raw little-endian data.
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(20240611)

F32, F64 = torch.float32, torch.float64
I64 = torch.int64

ST_DTYPES = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.bool: "BOOL",
}
DT_NAMES = {torch.float32: "f32", torch.float64: "f64"}

# Where torch runs the ops (--device). Inputs and upstream gradients are always drawn on the CPU,
# from the one CPU generator, so every device's fixtures share them bit for bit.
DEVICE = torch.device("cpu")
tensors = {}  # name -> contiguous tensor, written in insertion order
metadata = {}
ncases = 0


def fmt(v):
    """Metadata value: ints, floats (repr round-trips through strtod), lists, bools."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (list, tuple)):
        return ",".join(fmt(x) for x in v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def case(op, inputs, fn, grad=(), tr=None, sl=None, **attrs):
    """Runs fn on the (transposed/sliced where tr/sl say) inputs with autograd and records a case.

    inputs: tensors as stored (leaves); grad: indices of inputs whose gradient is checked;
    tr: {input index: (d0, d1)} transposes applied before the op; sl: {input index: (axis,
    start, end, step)} strided slices applied after any transpose; attrs: op attributes that
    the C side reads from the metadata (the same values fn uses)."""
    global ncases
    tr = tr or {}
    sl = sl or {}
    key = "c%03d" % ncases
    ncases += 1
    leaves = []
    for i, t in enumerate(inputs):
        leaf = t.detach().clone().contiguous().to(DEVICE)  # a leaf on DEVICE
        if i in grad:
            assert leaf.is_floating_point(), (op, i)
            leaf.requires_grad_(True)
        leaves.append(leaf)
    views = []
    for i, leaf in enumerate(leaves):
        v = leaf.transpose(*tr[i]) if i in tr else leaf
        if i in sl:
            axis, start, end, step = sl[i]
            index = [slice(None)] * v.dim()
            index[axis % v.dim()] = slice(start, end, step)
            v = v[tuple(index)]
        views.append(v)
    outs = fn(*views)
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    for j, o in enumerate(outs):
        assert o.device.type == DEVICE.type, (op, j, o.device)  # nothing fell back to another device
    float_dt = next((t.dtype for t in inputs if t.is_floating_point()), F32)
    for i, leaf in enumerate(leaves):
        tensors["%s.in%d" % (key, i)] = leaf.detach()
    for j, o in enumerate(outs):
        tensors["%s.out%d" % (key, j)] = o.detach().contiguous()
    if grad:
        gouts = []
        for j, o in enumerate(outs):
            assert o.is_floating_point() and o.requires_grad, (op, j)
            g = torch.randn(o.shape, dtype=o.dtype)  # on the CPU: the same stream for every device
            gouts.append(g.to(DEVICE))
            tensors["%s.gout%d" % (key, j)] = g
        torch.autograd.backward(list(outs), gouts)
        for i in grad:
            g = leaves[i].grad
            if g is None:
                g = torch.zeros_like(leaves[i])
            tensors["%s.grad%d" % (key, i)] = g.detach().contiguous()
    fields = [("op", op), ("dt", DT_NAMES[float_dt]), ("nin", len(inputs)), ("nout", len(outs))]
    if grad:
        fields.append(("grad", sorted(grad)))
    for i, dims in sorted(tr.items()):
        fields.append(("tr%d" % i, dims))
    for i, spec in sorted(sl.items()):
        fields.append(("sl%d" % i, spec))
    fields += sorted(attrs.items())
    metadata["case." + key] = ";".join("%s=%s" % (k, fmt(v)) for k, v in fields)


# ---------------------------------------------------------------- input domains
def randn(*shape, dt=F32, scale=1.0):
    return torch.randn(shape, dtype=dt) * scale


def positive(*shape, dt=F32, lo=0.2, hi=3.0):
    return torch.rand(shape, dtype=dt) * (hi - lo) + lo


def small_ints(*shape, dt=F32, lo=-2, hi=3):
    """Integer-valued floats: many exact ties (comparisons, maximum/minimum, max/min)."""
    return torch.randint(lo, hi, shape).to(dt)


def all_dims(x):
    return tuple(range(x.dim()))


# ---------------------------------------------------------------- elementwise binary
def binary_cases():
    ops = {
        "add": torch.add,
        "sub": torch.sub,
        "mul": torch.mul,
        "div": torch.div,
        "maximum": torch.maximum,
        "minimum": torch.minimum,
    }
    for name, f in ops.items():
        b_dom = (lambda *s, dt=F32: positive(*s, dt=dt, lo=0.5, hi=2.0) * (torch.randint(0, 2, s) * 2 - 1).to(dt)) \
            if name == "div" else randn
        case(name, [randn(2, 3), b_dom(2, 3)], f, grad=(0, 1))
        # broadcasting [3,1,5] with [4,5]
        case(name, [randn(3, 1, 5), b_dom(4, 5)], f, grad=(0, 1))
        # non-contiguous first operand: stored [5,3], used as [3,5]; b broadcasts as [5]
        case(name, [randn(5, 3), b_dom(5)], f, grad=(0, 1), tr={0: (0, 1)})
    for name in ("add", "mul", "div", "maximum"):
        case(name, [randn(3, 1, 4, dt=F64), positive(2, 4, dt=F64)], ops[name], grad=(0, 1))
    # exact ties: maximum/minimum share the gradient half and half, like PyTorch
    for name in ("maximum", "minimum"):
        case(name, [small_ints(4, 5), small_ints(4, 5)], ops[name], grad=(0, 1))
    # pow: positive base, any exponent; gradients for base and exponent
    case("pow", [positive(3, 4), randn(3, 4)], torch.pow, grad=(0, 1))
    case("pow", [positive(3, 1, 5), randn(4, 5)], torch.pow, grad=(0, 1))
    case("pow", [positive(5, 3), randn(3, 5)], torch.pow, grad=(0, 1), tr={0: (0, 1)})
    case("pow", [positive(2, 3, dt=F64), randn(2, 3, dt=F64)], torch.pow, grad=(0, 1))
    # comparisons (forward only); integer-valued inputs so that equality happens
    cmps = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
    for name, f in cmps.items():
        case(name, [small_ints(3, 1, 5), small_ints(4, 5)], f)
        case(name, [small_ints(5, 3), small_ints(3, 5)], f, tr={0: (0, 1)})
    case("eq", [small_ints(2, 3, dt=F64), small_ints(2, 3, dt=F64)], torch.eq)
    # where: bool cond [4,5], a [3,1,5], b [5] all broadcast
    case("where", [torch.rand(4, 5) > 0.5, randn(3, 1, 5), randn(5)], torch.where, grad=(1, 2))
    case("where", [torch.rand(3, 4) > 0.5, randn(4, 3), randn(3, 4)], torch.where, grad=(1, 2), tr={1: (0, 1)})
    case("where", [torch.rand(2, 3) > 0.5, randn(2, 3, dt=F64), randn(2, 3, dt=F64)], torch.where, grad=(1, 2))


# ---------------------------------------------------------------- elementwise unary
def unary_cases():
    ops = [
        # name, torch fn, domain, attrs
        ("neg", torch.neg, randn, {}),
        ("abs", torch.abs, randn, {}),
        ("exp", torch.exp, randn, {}),
        ("log", torch.log, positive, {}),
        ("sqrt", torch.sqrt, positive, {}),
        ("rsqrt", torch.rsqrt, positive, {}),
        ("sin", torch.sin, lambda *s, dt=F32: randn(*s, dt=dt, scale=2.0), {}),
        ("cos", torch.cos, lambda *s, dt=F32: randn(*s, dt=dt, scale=2.0), {}),
        ("tanh", torch.tanh, randn, {}),
        ("sinh", torch.sinh, randn, {}),
        ("cosh", torch.cosh, randn, {}),
        ("sigmoid", torch.sigmoid, lambda *s, dt=F32: randn(*s, dt=dt, scale=3.0), {}),
        ("relu", torch.relu, randn, {}),
        ("silu", F.silu, lambda *s, dt=F32: randn(*s, dt=dt, scale=2.0), {}),
        ("softplus", F.softplus, lambda *s, dt=F32: randn(*s, dt=dt, scale=3.0), {}),
        ("mish", F.mish, lambda *s, dt=F32: randn(*s, dt=dt, scale=2.0), {}),
    ]
    for name, f, dom, attrs in ops:
        case(name, [dom(3, 4, 5)], f, grad=(0,), **attrs)
        case(name, [dom(6, 4)], f, grad=(0,), tr={0: (0, 1)}, **attrs)
    for name, f, dom, attrs in ops:
        if name in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "softplus", "mish", "sin", "abs"):
            case(name, [dom(4, 5, dt=F64)], f, grad=(0,), **attrs)
    # kinks at exactly 0: relu'(0) = 0 and |x|'(0) = 0 in PyTorch
    z = torch.tensor([[-1.5, 0.0, 2.0], [0.0, 3.0, -0.25]])
    case("relu", [z], torch.relu, grad=(0,))
    case("abs", [z], torch.abs, grad=(0,))
    # softplus above its threshold (20): identity, derivative 1
    case("softplus", [torch.tensor([-30.0, -5.0, 0.0, 19.5, 21.0, 40.0])], F.softplus, grad=(0,))
    # leaky_relu
    for slope in (0.01, 0.2):
        case("leaky_relu", [randn(3, 4, 5)], lambda x, s=slope: F.leaky_relu(x, s), grad=(0,), slope=slope)
    case("leaky_relu", [randn(6, 4)], lambda x: F.leaky_relu(x, 0.1), grad=(0,), tr={0: (0, 1)}, slope=0.1)
    case("leaky_relu", [torch.cat([z.flatten(), randn(6)])], lambda x: F.leaky_relu(x, 0.3), grad=(0,), slope=0.3)
    case("leaky_relu", [randn(3, 4, dt=F64)], lambda x: F.leaky_relu(x, 0.05), grad=(0,), slope=0.05)
    # gelu, exact (erf) and tanh approximation
    for approx in (0, 1):
        mode = "tanh" if approx else "none"
        g = lambda x, m=mode: F.gelu(x, approximate=m)
        case("gelu", [randn(3, 4, 5, scale=2.0)], g, grad=(0,), approx=approx)
        case("gelu", [randn(6, 4, scale=2.0)], g, grad=(0,), tr={0: (0, 1)}, approx=approx)
        case("gelu", [randn(4, 5, dt=F64, scale=2.0)], g, grad=(0,), approx=approx)
    # clamp, including values exactly at the bounds (gradient 1 there, like PyTorch)
    edge = torch.tensor([-2.0, -0.5, -0.1, 0.0, 0.7, 1.0, 1.5])
    case("clamp", [randn(3, 4, 5)], lambda x: torch.clamp(x, -0.5, 0.7), grad=(0,), lo=-0.5, hi=0.7)
    case("clamp", [edge], lambda x: torch.clamp(x, -0.5, 1.0), grad=(0,), lo=-0.5, hi=1.0)
    case("clamp", [randn(6, 4)], lambda x: torch.clamp(x, -1.0, 0.25), grad=(0,), tr={0: (0, 1)}, lo=-1.0, hi=0.25)
    case("clamp", [randn(4, 5, dt=F64)], lambda x: torch.clamp(x, -0.3, 0.3), grad=(0,), lo=-0.3, hi=0.3)
    # scalar ops
    for v in (2.5, -0.75):
        case("add_scalar", [randn(3, 4)], lambda x, v=v: x + v, grad=(0,), value=v)
        case("mul_scalar", [randn(3, 4)], lambda x, v=v: x * v, grad=(0,), value=v)
    case("add_scalar", [randn(5, 3)], lambda x: x + 1.25, grad=(0,), tr={0: (0, 1)}, value=1.25)
    case("mul_scalar", [randn(5, 3)], lambda x: x * -3.0, grad=(0,), tr={0: (0, 1)}, value=-3.0)
    case("mul_scalar", [randn(3, 4, dt=F64)], lambda x: x * 0.1, grad=(0,), value=0.1)
    for e in (2.0, 2.5, -1.5, 0.5, 0.0):
        case("pow_scalar", [positive(3, 4)], lambda x, e=e: torch.pow(x, e), grad=(0,), value=e)
    case("pow_scalar", [randn(3, 4)], lambda x: torch.pow(x, 3.0), grad=(0,), value=3.0)  # negative bases
    case("pow_scalar", [positive(5, 3)], lambda x: torch.pow(x, 1.7), grad=(0,), tr={0: (0, 1)}, value=1.7)
    case("pow_scalar", [positive(3, 4, dt=F64)], lambda x: torch.pow(x, -0.5), grad=(0,), value=-0.5)


# ---------------------------------------------------------------- reductions
def reduction_cases():
    def red(name, x, axes, keepdim, tr=None, **extra):
        def f(v):
            dims = tuple(axes) if axes else all_dims(v)
            if name == "sum":
                return torch.sum(v, dim=dims, keepdim=keepdim)
            if name == "mean":
                return torch.mean(v, dim=dims, keepdim=keepdim)
            if name == "max":
                return torch.amax(v, dim=dims, keepdim=keepdim)
            if name == "min":
                return torch.amin(v, dim=dims, keepdim=keepdim)
            if name == "var":
                return torch.var(v, dim=dims, unbiased=bool(extra["correction"]), keepdim=keepdim)
            raise ValueError(name)
        case(name, [x], f, grad=(0,), tr=tr, axes=list(axes), keepdim=int(keepdim), **extra)

    layouts = [((), False), ((), True), ((0,), False), ((1,), True), ((-1,), False), ((0, 2), False),
               ((1, 2), True), ((0, 1), False), ((2, 0), True)]
    for name in ("sum", "mean", "max", "min"):
        for axes, keepdim in layouts:
            red(name, randn(3, 4, 5), axes, keepdim)
        red(name, randn(6, 4), (1,), False, tr={0: (0, 1)})  # reduce a transposed view
        red(name, randn(2, 5, 3), (0, 1), True, tr={0: (1, 2)})
        red(name, randn(3, 4, dt=F64), (1,), False)
        red(name, randn(3, 4, 5, dt=F64), (), False)
    # ties: the gradient is shared evenly among the elements that attain the extreme
    for name in ("max", "min"):
        red(name, small_ints(4, 6, lo=-1, hi=2), (1,), False)
        red(name, small_ints(3, 4, 2, lo=0, hi=2), (), False)
        red(name, small_ints(3, 4, 5, lo=-1, hi=2), (0, 2), True)
    for corr in (0, 1):
        for axes, keepdim in [((), False), ((0,), False), ((1,), True), ((-1,), False), ((0, 2), True)]:
            red("var", randn(3, 4, 5), axes, keepdim, correction=corr)
        red("var", randn(6, 4), (0,), False, tr={0: (0, 1)}, correction=corr)
        red("var", randn(3, 7, dt=F64), (1,), True, correction=corr)
    # argmax (forward only), with ties resolved to the first maximum
    for axis, keepdim in [(0, False), (1, True), (-1, False), (2, False)]:
        case("argmax", [randn(3, 4, 5)], lambda x, a=axis, k=keepdim: torch.argmax(x, dim=a, keepdim=k),
             axis=axis, keepdim=int(keepdim))
    case("argmax", [small_ints(4, 6, lo=0, hi=2)], lambda x: torch.argmax(x, dim=1), axis=1, keepdim=0)
    case("argmax", [randn(6, 4)], lambda x: torch.argmax(x, dim=1), tr={0: (0, 1)}, axis=1, keepdim=0)
    case("argmax", [randn(3, 5, dt=F64)], lambda x: torch.argmax(x, dim=0), axis=0, keepdim=0)


# ---------------------------------------------------------------- matmul, linear, softmax
def linalg_cases():
    mm = torch.matmul
    case("matmul", [randn(3, 4), randn(4, 5)], mm, grad=(0, 1))
    case("matmul", [randn(4), randn(4, 5)], mm, grad=(0, 1))
    case("matmul", [randn(3, 4), randn(4)], mm, grad=(0, 1))
    case("matmul", [randn(6), randn(6)], mm, grad=(0, 1))
    case("matmul", [randn(2, 1, 3, 4), randn(5, 4, 6)], mm, grad=(0, 1))
    case("matmul", [randn(2, 3, 4), randn(4, 2)], mm, grad=(0, 1))
    case("matmul", [randn(4), randn(2, 4, 3)], mm, grad=(0, 1))
    case("matmul", [randn(4, 3), randn(5, 4)], mm, grad=(0, 1), tr={0: (0, 1), 1: (0, 1)})
    case("matmul", [randn(2, 4, 3), randn(2, 4, 5)], mm, grad=(0, 1), tr={0: (1, 2)})
    case("matmul", [randn(3, 4, dt=F64), randn(4, 5, dt=F64)], mm, grad=(0, 1))
    case("matmul", [randn(2, 1, 3, 4, dt=F64), randn(5, 4, 6, dt=F64)], mm, grad=(0, 1))
    case("linear", [randn(4, 5), randn(3, 5), randn(3)], F.linear, grad=(0, 1, 2))
    case("linear", [randn(4, 5), randn(3, 5)], F.linear, grad=(0, 1))
    case("linear", [randn(2, 4, 5), randn(3, 5), randn(3)], F.linear, grad=(0, 1, 2))
    case("linear", [randn(5, 4), randn(3, 5), randn(3)], F.linear, grad=(0, 1, 2), tr={0: (0, 1)})
    case("linear", [randn(4, 5, dt=F64), randn(3, 5, dt=F64), randn(3, dt=F64)], F.linear, grad=(0, 1, 2))
    for name, f in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        for axis in (0, 1, -1):
            case(name, [randn(3, 4, 5, scale=2.0)], lambda x, a=axis, f=f: f(x, a), grad=(0,), axis=axis)
        case(name, [randn(7)], lambda x, f=f: f(x, 0), grad=(0,), axis=0)
        case(name, [randn(6, 4, scale=2.0)], lambda x, f=f: f(x, 1), grad=(0,), tr={0: (0, 1)}, axis=1)
        case(name, [randn(2, 5, 3)], lambda x, f=f: f(x, 1), grad=(0,), tr={0: (1, 2)}, axis=1)
        case(name, [randn(3, 4, dt=F64, scale=2.0)], lambda x, f=f: f(x, -1), grad=(0,), axis=-1)
        case(name, [randn(3, 4, 5, dt=F64)], lambda x, f=f: f(x, 1), grad=(0,), axis=1)


# ---------------------------------------------------------------- views and shape ops
def shape_cases():
    case("reshape", [randn(3, 4)], lambda x: x.reshape(2, 6), grad=(0,), shape=[2, 6])
    case("reshape", [randn(2, 3, 4)], lambda x: x.reshape(4, -1), grad=(0,), shape=[4, -1])
    case("reshape", [randn(4, 3)], lambda x: x.reshape(12), grad=(0,), tr={0: (0, 1)}, shape=[12])  # copies
    case("reshape", [randn(2, 3, dt=F64)], lambda x: x.reshape(3, 2), grad=(0,), shape=[3, 2])
    case("view", [randn(2, 3, 4)], lambda x: x.view(6, 4), grad=(0,), shape=[6, 4])
    case("transpose", [randn(3, 4)], lambda x: x.transpose(0, 1), grad=(0,), d0=0, d1=1)
    case("transpose", [randn(2, 3, 4)], lambda x: x.transpose(-1, 0), grad=(0,), d0=-1, d1=0)
    case("permute", [randn(2, 3, 4)], lambda x: x.permute(2, 0, 1), grad=(0,), dims=[2, 0, 1])
    case("permute", [randn(4, 3, 2)], lambda x: x.permute(1, 2, 0), grad=(0,), tr={0: (0, 2)}, dims=[1, 2, 0])
    case("slice", [randn(7, 4)], lambda x: x[1:6:2], grad=(0,), axis=0, start=1, end=6, step=2)
    case("slice", [randn(3, 9)], lambda x: x[:, -7:100:3], grad=(0,), axis=1, start=-7, end=100, step=3)
    case("slice", [randn(3, 4, 5)], lambda x: x[:, :, 1:4], grad=(0,), axis=-1, start=1, end=4, step=1)
    case("slice", [randn(8, 3)], lambda x: x[:, 2:8:3], grad=(0,), tr={0: (0, 1)}, axis=1, start=2, end=8, step=3)
    case("slice", [randn(6, 2, dt=F64)], lambda x: x[0:5:2], grad=(0,), axis=0, start=0, end=5, step=2)
    case("expand", [randn(3, 1)], lambda x: x.expand(2, 3, 4), grad=(0,), shape=[2, 3, 4])
    case("expand", [randn(1, 4)], lambda x: x.expand(3, -1), grad=(0,), shape=[3, -1])
    case("expand", [randn(1, 3)], lambda x: x.expand(2, 3, 4), grad=(0,), tr={0: (0, 1)}, shape=[2, 3, 4])
    case("squeeze", [randn(3, 1, 4)], lambda x: x.squeeze(1), grad=(0,), axis=1)
    case("squeeze", [randn(3, 4, 1)], lambda x: x.squeeze(-1), grad=(0,), axis=-1)
    case("unsqueeze", [randn(3, 4)], lambda x: x.unsqueeze(1), grad=(0,), axis=1)
    case("unsqueeze", [randn(3, 4)], lambda x: x.unsqueeze(-1), grad=(0,), axis=-1)
    case("unsqueeze", [randn(4, 3)], lambda x: x.unsqueeze(0), grad=(0,), tr={0: (0, 1)}, axis=0)
    case("flatten", [randn(2, 3, 4, 5)], lambda x: x.flatten(1, 2), grad=(0,), start=1, end=2)
    case("flatten", [randn(2, 3, 4)], lambda x: x.flatten(0, -1), grad=(0,), start=0, end=-1)
    case("flatten", [randn(2, 4, 3)], lambda x: x.flatten(1, 2), grad=(0,), tr={0: (1, 2)}, start=1, end=2)
    case("contiguous", [randn(4, 3)], lambda x: x.contiguous(), grad=(0,), tr={0: (0, 1)})
    case("contiguous", [randn(2, 3, 4)], lambda x: x.contiguous(), grad=(0,), tr={0: (0, 2)})
    case("clone", [randn(4, 3)], lambda x: x.clone(), grad=(0,), tr={0: (0, 1)})
    case("cat", [randn(2, 3), randn(4, 3), randn(1, 3)], lambda *xs: torch.cat(xs, 0), grad=(0, 1, 2), axis=0)
    case("cat", [randn(2, 3, 1), randn(2, 3, 4)], lambda *xs: torch.cat(xs, -1), grad=(0, 1), axis=-1)
    case("cat", [randn(3, 2), randn(2, 4)], lambda *xs: torch.cat(xs, 1), grad=(0, 1), tr={0: (0, 1)}, axis=1)
    case("cat", [randn(2, 3, dt=F64), randn(2, 2, dt=F64)], lambda *xs: torch.cat(xs, 1), grad=(0, 1), axis=1)
    case("stack", [randn(2, 3), randn(2, 3), randn(2, 3)], lambda *xs: torch.stack(xs, 0), grad=(0, 1, 2), axis=0)
    case("stack", [randn(2, 3), randn(2, 3)], lambda *xs: torch.stack(xs, -1), grad=(0, 1), axis=-1)
    case("stack", [randn(3, 2), randn(2, 3)], lambda *xs: torch.stack(xs, 1), grad=(0, 1), tr={0: (0, 1)}, axis=1)
    case("split", [randn(6, 3)], lambda x: torch.split(x, [1, 3, 2], 0), grad=(0,), sizes=[1, 3, 2], axis=0)
    case("split", [randn(2, 3, 5)], lambda x: torch.split(x, [2, 3], -1), grad=(0,), sizes=[2, 3], axis=-1)
    case("split", [randn(5, 4)], lambda x: torch.split(x, [4, 1], 1), grad=(0,), tr={0: (0, 1)}, sizes=[4, 1], axis=1)
    # casts: floating casts are differentiable; to integers is forward only (truncation)
    case("cast", [randn(3, 4)], lambda x: x.to(F64), grad=(0,), to="f64")
    case("cast", [randn(3, 4, dt=F64)], lambda x: x.to(F32), grad=(0,), to="f32")
    case("cast", [randn(4, 3)], lambda x: x.to(F64), grad=(0,), tr={0: (0, 1)}, to="f64")
    case("cast", [randn(3, 4, scale=5.0)], lambda x: x.to(I64), to="i64")
    case("cast", [randn(3, 4, scale=5.0)], lambda x: x.to(torch.int32), to="i32")
    case("cast", [torch.randint(-5, 6, (3, 4))], lambda x: x.to(F32), to="f32")
    case("cast", [torch.rand(3, 4) > 0.5], lambda x: x.to(F64), to="f64")


# ---------------------------------------------------------------- indexing
def index_cases():
    idx = torch.tensor([3, 0, 3, 1, 4])  # repeats: gradients accumulate
    case("index_select", [randn(5, 3), idx], lambda x, i: torch.index_select(x, 0, i), grad=(0,), axis=0)
    case("index_select", [randn(2, 5, 3), torch.tensor([4, 4, 1])], lambda x, i: torch.index_select(x, 1, i),
         grad=(0,), axis=1)
    case("index_select", [randn(5, 3), idx], lambda x, i: torch.index_select(x, -1, i), grad=(0,),
         tr={0: (0, 1)}, axis=-1)
    case("index_select", [randn(5, 2, dt=F64), idx], lambda x, i: torch.index_select(x, 0, i), grad=(0,), axis=0)
    gi0 = torch.randint(0, 4, (3, 5))
    case("gather", [randn(4, 5), gi0], lambda x, i: torch.gather(x, 0, i), grad=(0,), axis=0)
    case("gather", [randn(3, 6), torch.randint(0, 6, (3, 8))], lambda x, i: torch.gather(x, 1, i), grad=(0,), axis=1)
    case("gather", [randn(4, 5, 3), torch.randint(0, 5, (2, 4, 3))], lambda x, i: torch.gather(x, 1, i), grad=(0,),
         axis=1)  # index smaller than x outside the axis
    case("gather", [randn(6, 3), torch.randint(0, 6, (3, 4))], lambda x, i: torch.gather(x, 1, i), grad=(0,),
         tr={0: (0, 1)}, axis=1)
    case("gather", [randn(3, 4, dt=F64), torch.randint(0, 4, (3, 2))], lambda x, i: torch.gather(x, 1, i), grad=(0,),
         axis=1)
    case("embedding", [randn(6, 4), torch.tensor([[1, 5, 1], [0, 2, 5]])], lambda w, i: F.embedding(i, w), grad=(0,))
    case("embedding", [randn(7, 3), torch.tensor([6, 0, 0, 3])], lambda w, i: F.embedding(i, w), grad=(0,))
    case("embedding", [randn(4, 6), torch.tensor([2, 5, 5])], lambda w, i: F.embedding(i, w), grad=(0,),
         tr={0: (0, 1)})
    case("embedding", [randn(5, 3, dt=F64), torch.tensor([[4, 1], [1, 1]])], lambda w, i: F.embedding(i, w),
         grad=(0,))
    for dt, name in ((F32, "f32"), (I64, "i64"), (F64, "f64")):
        case("one_hot", [torch.randint(0, 5, (2, 3))], lambda i, dt=dt: F.one_hot(i, 5).to(dt), classes=5, to=name)
    case("one_hot", [torch.tensor([0, 3, 2, 3])], lambda i: F.one_hot(i, 4).to(F32), classes=4, to="f32")


# ---------------------------------------------------------------- losses
RED = {"mean": 0, "sum": 1, "none": 2}


def loss_cases():
    for red in ("mean", "sum", "none"):
        r = RED[red]
        # ignore_index -100 present in the targets, no smoothing
        t = torch.tensor([1, -100, 3, 0, 4, -100])
        case("cross_entropy", [randn(6, 5, scale=2.0), t],
             lambda x, t, red=red: F.cross_entropy(x, t, ignore_index=-100, reduction=red),
             grad=(0,), ignore=-100, smoothing=0.0, reduction=r)
        # label smoothing 0.1 with ignored targets
        case("cross_entropy", [randn(6, 5, scale=2.0), t],
             lambda x, t, red=red: F.cross_entropy(x, t, ignore_index=-100, label_smoothing=0.1, reduction=red),
             grad=(0,), ignore=-100, smoothing=0.1, reduction=r)
        # an ignore_index that is a valid class
        t2 = torch.tensor([2, 0, 2, 1, 3])
        case("cross_entropy", [randn(5, 4), t2],
             lambda x, t, red=red: F.cross_entropy(x, t, ignore_index=2, label_smoothing=0.1, reduction=red),
             grad=(0,), ignore=2, smoothing=0.1, reduction=r)
        case("nll_loss", [F.log_softmax(randn(6, 5), 1), t],
             lambda x, t, red=red: F.nll_loss(x, t, ignore_index=-100, reduction=red),
             grad=(0,), ignore=-100, reduction=r)
        case("mse_loss", [randn(3, 4), randn(3, 4)], lambda x, y, red=red: F.mse_loss(x, y, reduction=red),
             grad=(0, 1), reduction=r)
        case("bce_with_logits", [randn(3, 4, scale=3.0), torch.rand(3, 4)],
             lambda x, y, red=red: F.binary_cross_entropy_with_logits(x, y, reduction=red), grad=(0, 1), reduction=r)
    case("cross_entropy", [randn(6, 5), torch.tensor([0, 5, 2, 2, 1])],
         lambda x, t: F.cross_entropy(x, t), grad=(0,), tr={0: (0, 1)}, ignore=-100, smoothing=0.0, reduction=0)
    case("cross_entropy", [randn(6, 5, dt=F64), torch.tensor([1, -100, 3, 0, 4, 4])],
         lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), grad=(0,), ignore=-100, smoothing=0.1, reduction=0)
    case("nll_loss", [randn(4, 3, dt=F64), torch.tensor([2, 0, -100, 1])],
         lambda x, t: F.nll_loss(x, t, reduction="sum"), grad=(0,), ignore=-100, reduction=1)
    case("mse_loss", [randn(4, 3), randn(3, 4)], lambda x, y: F.mse_loss(x, y), grad=(0, 1), tr={0: (0, 1)}, reduction=0)
    case("mse_loss", [randn(3, 4, dt=F64), randn(3, 4, dt=F64)], lambda x, y: F.mse_loss(x, y), grad=(0, 1),
         reduction=0)
    case("bce_with_logits", [randn(4, 3, scale=3.0), torch.rand(3, 4)],
         lambda x, y: F.binary_cross_entropy_with_logits(x, y), grad=(0,), tr={0: (0, 1)}, reduction=0)
    case("bce_with_logits", [torch.tensor([-40.0, -3.0, 0.0, 2.0, 35.0]), torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0])],
         lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="sum"), grad=(0,), reduction=1)
    case("bce_with_logits", [randn(3, 4, dt=F64, scale=3.0), torch.rand(3, 4, dtype=F64)],
         lambda x, y: F.binary_cross_entropy_with_logits(x, y), grad=(0, 1), reduction=0)


# ---------------------------------------------------------------- dtypes and edge values
def dtype_and_edge_cases():
    """Type promotion (gradients come back in each input's own dtype), integer kernels, 32-bit
    indices, and edge values (0^0, -inf logits, a variance over one element)."""
    ints = lambda *s: torch.randint(-4, 5, s)
    case("add", [randn(3, 4), randn(3, 4, dt=F64)], torch.add, grad=(0, 1))
    case("mul", [randn(3, 4), ints(3, 4)], torch.mul, grad=(0,))
    case("mul", [torch.rand(3, 4) > 0.5, randn(3, 4)], torch.mul, grad=(1,))
    case("where", [torch.rand(3, 4) > 0.5, randn(3, 4), randn(4, dt=F64)], torch.where, grad=(1, 2))
    case("div", [ints(3, 4), torch.randint(1, 4, (3, 4))], torch.div)
    case("add", [ints(3, 4), ints(4)], torch.add)
    case("maximum", [ints(3, 4), randn(3, 4)], torch.maximum, grad=(1,))
    for name, f in (("neg", torch.neg), ("abs", torch.abs), ("relu", torch.relu), ("exp", torch.exp)):
        case(name, [ints(3, 4)], f)
    case("clamp", [ints(3, 4)], lambda x: torch.clamp(x, -1, 2), lo=-1.0, hi=2.0)
    case("add_scalar", [ints(3, 4)], lambda x: x + 2, value=2.0)
    case("add_scalar", [ints(3, 4)], lambda x: x + 2.5, value=2.5)
    case("mul_scalar", [ints(3, 4)], lambda x: x * 3, value=3.0)
    case("sum", [ints(3, 4)], lambda x: torch.sum(x, dim=(1,)), axes=[1], keepdim=0)
    case("sum", [torch.rand(3, 4) > 0.5], lambda x: torch.sum(x, dim=(0, 1)), axes=[], keepdim=0)
    case("max", [ints(3, 4)], lambda x: torch.amax(x, dim=(0,)), axes=[0], keepdim=0)
    i32 = torch.tensor([2, 0, 2, 1], dtype=torch.int32)
    case("index_select", [randn(3, 4), i32], lambda x, i: torch.index_select(x, 0, i), grad=(0,), axis=0)
    case("embedding", [randn(3, 4), i32], lambda w, i: F.embedding(i, w), grad=(0,))
    case("one_hot", [i32], lambda i: F.one_hot(i.long(), 3).to(F32), classes=3, to="f32")
    case("cross_entropy", [randn(4, 3), i32], lambda x, t: F.cross_entropy(x, t.long(), reduction="sum"), grad=(0,),
         ignore=-100, smoothing=0.0, reduction=1)
    # 0^0: PyTorch takes both partial derivatives as 0 there
    case("pow", [torch.tensor([0.0, 0.0, 0.0, 1.5, 2.0]), torch.tensor([0.0, 2.0, 3.0, 0.0, 1.0])], torch.pow,
         grad=(0, 1))
    # -inf logits (masked entries): softmax gives 0, log_softmax -inf, finite gradients elsewhere
    minf = torch.tensor([[0.5, -math.inf, 1.0, -2.0], [2.0, 3.0, -math.inf, -math.inf], [1.0, -1.0, 0.0, 0.25]])
    case("softmax", [minf], lambda x: torch.softmax(x, -1), grad=(0,), axis=-1)
    case("log_softmax", [minf], lambda x: torch.log_softmax(x, -1), grad=(0,), axis=-1)
    # unbiased variance of a single element: 0/0 = NaN, in the value and in the gradient
    case("var", [randn(3, 1)], lambda x: torch.var(x, dim=(1,)), grad=(0,), axes=[1], keepdim=0, correction=1)


# ---------------------------------------------------------------- strided (sliced) inputs
def strided_cases():
    """Inputs that are strided slices (step > 1), alone or on top of a transpose."""
    case("add", [randn(3, 10), randn(3, 5)], torch.add, grad=(0, 1), sl={0: (1, 0, 10, 2)})
    case("mul", [randn(10, 3), randn(5)], torch.mul, grad=(0, 1), tr={0: (0, 1)}, sl={0: (1, 1, 10, 2)})
    case("exp", [randn(4, 9)], torch.exp, grad=(0,), sl={0: (1, 1, 9, 3)})
    case("gelu", [randn(8, 3)], lambda x: F.gelu(x), grad=(0,), sl={0: (0, 0, 8, 2)}, approx=0)
    case("sum", [randn(6, 4)], lambda x: torch.sum(x, dim=(1,)), grad=(0,), sl={0: (0, 1, 6, 2)}, axes=[1], keepdim=0)
    case("max", [randn(3, 8)], lambda x: torch.amax(x, dim=(0,)), grad=(0,), sl={0: (1, 0, 8, 3)}, axes=[0], keepdim=0)
    case("matmul", [randn(6, 4), randn(4, 5)], torch.matmul, grad=(0, 1), sl={0: (0, 0, 6, 2)})
    case("matmul", [randn(3, 8), randn(4, 5)], torch.matmul, grad=(0, 1), sl={0: (1, 0, 8, 2)})
    case("softmax", [randn(3, 8)], lambda x: torch.softmax(x, -1), grad=(0,), sl={0: (1, 0, 8, 2)}, axis=-1)
    case("log_softmax", [randn(8, 3)], lambda x: torch.log_softmax(x, 0), grad=(0,), sl={0: (0, 1, 8, 2)}, axis=0)
    case("cross_entropy", [randn(12, 4), torch.tensor([0, 3, 1, 2, 1, 0])],
         lambda x, t: F.cross_entropy(x, t), grad=(0,), sl={0: (0, 0, 12, 2)}, ignore=-100, smoothing=0.0, reduction=0)


# ---------------------------------------------------------------- large inputs
def large_cases():
    """Above the CPU backend's parallel grain (2^15 elements) and with odd sizes, so the threaded
    loops and the SIMD main loops and tails all run. Sums use positive inputs: their f32 rounding
    then stays far below the tolerance (a sum near zero would make atol compare rounding noise)."""
    case("exp", [randn(181, 191)], torch.exp, grad=(0,))
    case("gelu", [randn(181, 191, scale=2.0)], lambda x: F.gelu(x, approximate="tanh"), grad=(0,), approx=1)
    case("sigmoid", [randn(191, 181, scale=3.0)], torch.sigmoid, grad=(0,), tr={0: (0, 1)})
    case("add", [randn(181, 1), randn(191)], torch.add, grad=(0, 1))
    case("mul", [randn(191, 181), randn(181, 191)], torch.mul, grad=(0, 1), tr={0: (0, 1)})
    case("div", [randn(181, 191), positive(181, 191)], torch.div, grad=(0, 1))
    for axes in ((1,), (0,), (0, 1)):
        case("sum", [positive(67, 521, lo=0.0, hi=1.0)], lambda x, a=axes: torch.sum(x, dim=a), grad=(0,),
             axes=list(axes), keepdim=0)
    case("mean", [positive(67, 521, lo=0.0, hi=1.0)], lambda x: torch.mean(x, dim=(1,), keepdim=True), grad=(0,),
         axes=[1], keepdim=1)
    case("sum", [positive(521, 67, lo=0.0, hi=1.0)], lambda x: torch.sum(x, dim=(1,)), grad=(0,), tr={0: (0, 1)},
         axes=[1], keepdim=0)
    case("max", [randn(67, 521)], lambda x: torch.amax(x, dim=(1,)), grad=(0,), axes=[1], keepdim=0)
    case("min", [randn(67, 521)], lambda x: torch.amin(x, dim=(0,)), grad=(0,), axes=[0], keepdim=0)
    case("var", [randn(67, 521)], lambda x: torch.var(x, dim=(1,)), grad=(0,), axes=[1], keepdim=0, correction=1)
    case("argmax", [randn(67, 521)], lambda x: torch.argmax(x, dim=1), axis=1, keepdim=0)
    case("softmax", [randn(70, 517, scale=3.0)], lambda x: torch.softmax(x, -1), grad=(0,), axis=-1)
    case("log_softmax", [randn(517, 70, scale=3.0)], lambda x: torch.log_softmax(x, 0), grad=(0,), axis=0)
    # inner products of 65..130 terms: scaled inputs keep their f32 rounding well under atol
    h = 0.5
    case("matmul", [randn(64, 129, scale=h), randn(129, 65, scale=h)], torch.matmul, grad=(0, 1))
    case("matmul", [randn(4, 33, 65, scale=h), randn(65, 31, scale=h)], torch.matmul, grad=(0, 1))
    case("matmul", [randn(129, 64, scale=h), randn(129, 65, scale=h)], torch.matmul, grad=(0, 1), tr={0: (0, 1)})
    case("linear", [randn(96, 130, scale=h), randn(70, 130, scale=h), randn(70)], F.linear, grad=(0, 1, 2))
    t = torch.randint(0, 100, (512,))
    t[::7] = -100
    case("cross_entropy", [randn(512, 100, scale=2.0), t],
         lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), grad=(0,), ignore=-100, smoothing=0.1, reduction=0)
    case("matmul", [randn(64, 129, dt=F64), randn(129, 65, dt=F64)], torch.matmul, grad=(0, 1))
    case("sum", [randn(67, 521, dt=F64)], lambda x: torch.sum(x, dim=(0,)), grad=(0,), axes=[0], keepdim=0)
    case("tanh", [randn(181, 191, dt=F64)], torch.tanh, grad=(0,))


# ---------------------------------------------------------------- composites
def composite_cases():
    # two-layer MLP: linear, relu, linear, cross_entropy; every parameter's gradient (and x's)
    for dt in (F32, F64):
        n, d_in, hidden, classes = 8, 6, 10, 4
        x = randn(n, d_in, dt=dt)
        w1 = randn(hidden, d_in, dt=dt, scale=1 / math.sqrt(d_in))
        b1 = randn(hidden, dt=dt, scale=0.1)
        w2 = randn(classes, hidden, dt=dt, scale=1 / math.sqrt(hidden))
        b2 = randn(classes, dt=dt, scale=0.1)
        t = torch.randint(0, classes, (n,))

        def mlp(x, w1, b1, w2, b2, t):
            return F.cross_entropy(F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2), t)
        case("mlp", [x, w1, b1, w2, b2, t], mlp, grad=(0, 1, 2, 3, 4))

    # causal self-attention block with q/k/v/output projections:
    # out = (softmax(Q K^T / sqrt(d) + mask) V) Wo^T, loss = mse(out, target)
    for dt in (F32, F64):
        b, T, d = 2, 5, 8
        x = randn(b, T, d, dt=dt)
        ws = [randn(d, d, dt=dt, scale=1 / math.sqrt(d)) for _ in range(4)]
        mask = torch.full((T, T), -math.inf, dtype=dt).triu(1)  # 0 on and below the diagonal
        target = randn(b, T, d, dt=dt)

        def attention(x, wq, wk, wv, wo, mask, target):
            q, k, v = F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d)) + mask
            out = F.linear(torch.matmul(torch.softmax(scores, -1), v), wo)
            return F.mse_loss(out, target)
        case("attention", [x] + ws + [mask, target], attention, grad=(0, 1, 2, 3, 4), scale=1.0 / math.sqrt(d))


# ---------------------------------------------------------------- SafeTensors writer
# ---------------------------------------------------------------- fused kernels
def rms_ref(x, w, eps):  # torch 1.13 has no F.rms_norm
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def fused_cases():
    """The fused ops (nx_rms_norm, nx_layer_norm, nx_add_*_norm, nx_softmax_cross_entropy,
    nx_swiglu) forward and backward, and one multi-tensor Adam(W) step against torch.optim."""
    for dt in (F32, F64):
        case("rms_norm", [randn(4, 3, 16, dt=dt), positive(16, dt=dt)], lambda x, w: rms_ref(x, w, 1e-6),
             grad=(0, 1), eps=1e-6)
        case("rms_norm", [randn(20, 6, dt=dt), positive(20, dt=dt)], lambda x, w: rms_ref(x, w, 1e-5),
             grad=(0, 1), tr={0: (0, 1)}, eps=1e-5)
        case("layer_norm", [randn(5, 33, dt=dt, scale=3.0), positive(33, dt=dt), randn(33, dt=dt)],
             lambda x, w, b: F.layer_norm(x, (33,), w, b, 1e-5), grad=(0, 1, 2), eps=1e-5)
        case("add_rms_norm", [randn(3, 24, dt=dt), randn(3, 24, dt=dt), positive(24, dt=dt)],
             lambda x, r, w: (rms_ref(x + r, w, 1e-6), x + r), grad=(0, 1, 2), eps=1e-6)
        case("add_layer_norm", [randn(3, 24, dt=dt), randn(24, 3, dt=dt), positive(24, dt=dt), randn(24, dt=dt)],
             lambda x, r, w, b: (F.layer_norm(x + r, (24,), w, b, 1e-5), x + r), grad=(0, 1, 2, 3),
             tr={1: (0, 1)}, eps=1e-5)
        t = torch.tensor([3, -100, 0, 999, 998, 7])
        for r, red in ((0, "mean"), (1, "sum"), (2, "none")):
            case("softmax_cross_entropy", [randn(6, 1000, dt=dt, scale=4.0), t],
                 lambda x, t, red=red: F.cross_entropy(x, t, ignore_index=-100, reduction=red),
                 grad=(0,), ignore=-100, reduction=r)
        case("swiglu", [randn(4, 10, dt=dt, scale=3.0), randn(4, 10, dt=dt)], lambda a, b: F.silu(a) * b, grad=(0, 1))
        case("swiglu", [randn(10, 4, dt=dt, scale=3.0), randn(10, dt=dt)], lambda a, b: F.silu(a) * b, grad=(0, 1),
             tr={0: (0, 1)})
    for decoupled in (True, False):
        p, g, m, v = randn(5, 7), randn(5, 7), randn(5, 7, scale=0.1), positive(5, 7, lo=0.0, hi=0.1)
        p2, g2, m2, v2 = randn(300), randn(300), randn(300, scale=0.1), positive(300, lo=0.0, hi=0.1)

        def adam(p, g, m, v, p2, g2, m2, v2, decoupled=decoupled):
            outs = []
            for pp, gg, mm, vv in ((p, g, m, v), (p2, g2, m2, v2)):
                pp = pp.detach().clone().requires_grad_(True)
                pp.grad = gg.detach().clone()
                cls = torch.optim.AdamW if decoupled else torch.optim.Adam
                opt = cls([pp], lr=0.01, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
                opt.state[pp] = {"step": torch.tensor(2.0), "exp_avg": mm.detach().clone(),
                                 "exp_avg_sq": vv.detach().clone()}
                opt.step()  # step 3
                outs += [pp.detach(), opt.state[pp]["exp_avg"], opt.state[pp]["exp_avg_sq"]]
            return outs
        case("adam_step_multi", [p, g, m, v, p2, g2, m2, v2], adam, step=3, lr=0.01, beta1=0.9, beta2=0.95,
             eps=1e-8, wd=0.1, decoupled=decoupled)


def write_safetensors(path, named, meta):
    header, chunks, at = {}, [], 0
    for name, t in named.items():
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes() if t.numel() else b""
        if sys.byteorder != "little":
            raise SystemExit("gen_fixtures.py: big-endian hosts are not supported")
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # align the data section to 8 bytes, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def main():
    global DEVICE
    parser = argparse.ArgumentParser(description="Writes the PyTorch parity fixtures (SafeTensors).")
    parser.add_argument("out", help="the .safetensors file to write")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where torch computes outputs and gradients (inputs are always drawn on the CPU)")
    args = parser.parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("gen_fixtures.py: --device cuda needs a CUDA build of torch and a visible GPU")
        # Full f32 precision on CUDA: some torch versions default matmul (and cuDNN) to TF32.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if hasattr(torch, "set_float32_matmul_precision"):
            torch.set_float32_matmul_precision("highest")
        DEVICE = torch.device("cuda", 0)
        metadata["device"] = "cuda"
        metadata["cuda_device_name"] = torch.cuda.get_device_name(0)
    binary_cases()
    unary_cases()
    reduction_cases()
    linalg_cases()
    shape_cases()
    index_cases()
    loss_cases()
    dtype_and_edge_cases()
    strided_cases()
    large_cases()
    composite_cases()
    fused_cases()
    metadata["ncases"] = str(ncases)
    metadata["torch_version"] = torch.__version__
    write_safetensors(args.out, tensors, metadata)


if __name__ == "__main__":
    main()
