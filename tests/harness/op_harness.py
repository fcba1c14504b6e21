#!/usr/bin/env python3
"""The op harness: every op of src/ops/ops.yaml, every dtype it declares, every device present,
checked through the C API (nexusgrad._nexus, nx_<op>(handles..., attributes..., stream)):

  forward    our outputs against PyTorch's on the same input values (shape, dtype and values;
             f16/bf16 inputs reach torch as float32 and the result is compared at half tolerance)
  grad       for ops with `grad`: the gradient of every input listed there, from our backward
             (nx_backward with a random upstream gradient) against torch.autograd's
  gradcheck  in f64: central differences of sum(w * op(x)) (random w) against our backward
  gradgrad   in f64: the Hessian-vector product H v of L = sum(w * op(x)) from double backward
             (nx_autograd_grad with create_graph, then again through the first-order gradient)
             against central differences of that first-order gradient along v
  cuda       on CUDA: the same inputs on the CPU and on the GPU, outputs and gradients compared
  python     for ops with a generated nexusgrad wrapper: the wrapper gives exactly nx_<op>'s result
  rules      the op's declared output rules (ops.yaml `shape:` and `dtype:`): on every forward run,
             our outputs have the shape and dtype the rules compute from the actual inputs and
             attributes (no torch involved; `custom` is not checked; a skip key `rules` or `*`
             skips it)
  errors     the case's error variants: each call must fail with its nx_status, a message naming
             nx_<op> and the values involved, no new handle left behind, in-place inputs unchanged

The cases (inputs, attributes, torch references, skips with their reasons) are in op_cases.py;
an op of the registry without a case, or a case for an op the registry lacks, is a failure; so is
an op whose `shape:` or `dtype:` rule is missing, unknown or needs arguments the op lacks; so is
a differentiable op with f64 whose finite differences (first or second order) ran nowhere, unless
its case says why.
Prints one summary line and exits 1 when any check failed:
  op harness: N ops, M op x dtype x device cases, K checks, F failed

usage: OMP_NUM_THREADS=2 PYTHONPATH=BUILD/python python3 tests/harness/op_harness.py
       [--op NAME[,NAME]] [--dtype f32] [--device cpu|cuda] [-v]
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import re
import sys
import time
import zlib
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REGISTRY = os.path.join(ROOT, "src", "ops", "ops.yaml")
HEADER = os.path.join(ROOT, "include", "nexus.h")  # the fields of the options structs
sys.path.insert(0, HERE)

import op_cases  # noqa: E402
from op_cases import ALL_DTYPES, FLOAT_DTYPES, TORCH_DTYPES, Arg, Case, Err, Idx, Variant  # noqa: E402

import nexusgrad  # noqa: E402
from nexusgrad import _nexus as C  # noqa: E402

# ---------------------------------------------------------------- tolerances (declared once)
# |ours - torch| <= atol + rtol |torch|, by the dtype of the compared tensor. f32/f64 are the
# parity tests' values; half types allow a rounding or two of the result (f16 ulp 2^-10,
# bf16 2^-7 near 1), gradients two more (they go through a few rounded ops). A case widens
# these only with a reason (op_cases.Case.tol_reason).
TOL = {
    "f32": {"fwd": (1e-5, 1e-4), "grad": (1e-5, 1e-4)},
    "f64": {"fwd": (1e-10, 1e-10), "grad": (1e-10, 1e-10)},
    "f16": {"fwd": (1e-3, 2e-3), "grad": (2e-3, 4e-3)},
    "bf16": {"fwd": (8e-3, 1.6e-2), "grad": (1.6e-2, 3.2e-2)},
}
# gradcheck: step, and |analytic - numeric| <= rtol |numeric| + atol max(1, |L|) (the second
# term is the central difference's rounding noise, ~1e-16 |L| / eps)
GC_EPS, GC_RTOL, GC_ATOL = 1e-6, 1e-6, 1e-8
GC_MAX_ELEMENTS = 2500  # finite differences cost two op calls per input element
# gradgrad: step along the random direction v (N(0, 1) entries), and |Hv - numeric| <= rtol
# |numeric| + atol max(1, |numeric|_inf, |grad|_inf) (the second term: the difference's rounding
# noise, ~1e-16 |grad| / eps, and its truncation, ~eps^2 |4th derivative|). Directional
# differences cost four backward passes whatever the size; GG_MAX_ELEMENTS bounds the work.
GG_EPS, GG_RTOL, GG_ATOL = 1e-5, 1e-6, 1e-8
GG_MAX_ELEMENTS = 50000

NX_DTYPE = {"f32": C.NX_F32, "f64": C.NX_F64, "f16": C.NX_F16, "bf16": C.NX_BF16, "i32": C.NX_I32,
            "i64": C.NX_I64, "bool": C.NX_BOOL}
DTYPE_NAME = {v: k for k, v in NX_DTYPE.items()}
NP_DTYPE = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.int16, "i32": np.int32,
            "i64": np.int64, "bool": np.bool_}
NX_REDUCTION = {"mean": C.NX_REDUCTION_MEAN, "sum": C.NX_REDUCTION_SUM, "none": C.NX_REDUCTION_NONE}
TORCH_NAME = {v: k for k, v in TORCH_DTYPES.items()}


# ---------------------------------------------------------------- the registry
@dataclass
class CArg:
    """One logical argument of an op, named as the cases name it."""
    name: str
    kind: str  # tensor, tensors (pointer + count), ints (pointer + count), float, int, bool, dtype, reduction
    struct: Optional[str] = None  # a field of an options struct: the C parameter that passes it ("options")
    ctype: Optional[str] = None  # ... and the struct's type ("nx_adam_options")


@dataclass
class Op:
    name: str
    args: List[CArg]
    nouts: int  # 0: in place (outs: none); -1: a list whose length the arguments decide (split)
    optional: List[str]
    index: List[str]
    grad: List[str]
    dtypes: List[str]
    devices: List[str]
    kind: str
    python: Optional[str] = None  # the generated nexusgrad wrapper (ops.yaml `python:`), if any
    python_order: List[str] = dataclasses.field(default_factory=list)  # C argument names in its parameter order
    shape_rule: Optional[str] = None  # ops.yaml `shape:` (None: missing; checked by rule_problems)
    dtype_rule: Optional[str] = None  # ops.yaml `dtype:`


SCALAR_KINDS = {"double": "float", "int64_t": "int", "bool": "bool", "nx_dtype": "dtype", "nx_reduction": "reduction",
                "nx_tensor": "tensor"}


def parse_args(text: str) -> List[CArg]:
    """The logical arguments of an op's C `args`. A pointer and the size_t count after it are one
    argument (an array, a list in the cases and the bindings); several arrays before one count
    share it (nx_adam_step_multi's params, grads, exp_avgs, exp_avg_sqs: lists of one length). An
    options struct (`const nx_adam_options* options`) is one argument per field of the struct
    but struct_size (the cases give lr, beta1... as attributes); call_op builds the struct."""
    params = [p.strip() for p in text.replace("\n", " ").split(",") if p.strip()]
    out: List[CArg] = []
    uncounted: List[str] = []  # arrays waiting for their count
    for param in params:
        ctype, name = param.rsplit(None, 1)
        if name.startswith("*"):
            ctype, name = ctype + "*", name[1:]
        base = ctype.replace("const", "").replace("*", "").strip()
        if ctype.endswith("*") and base.endswith("_options"):
            out += [CArg(field, kind, name, base) for field, kind in options_fields(base)]
        elif ctype.endswith("*"):
            kind = {"nx_tensor": "tensors", "int64_t": "ints"}.get(base)
            if kind is None:
                raise ValueError(f"unknown array argument type {ctype}")
            out.append(CArg(name, kind))
            uncounted.append(name)
        elif ctype == "size_t":
            if not uncounted:
                raise ValueError(f"count {name} follows no pointer argument")
            uncounted = []
        elif uncounted:
            raise ValueError(f"pointer argument(s) {uncounted} without a size_t count")
        elif ctype in SCALAR_KINDS:
            out.append(CArg(name, SCALAR_KINDS[ctype]))
        else:
            raise ValueError(f"unknown argument type {ctype}")
    if uncounted:
        raise ValueError(f"pointer argument(s) {uncounted} without a size_t count")
    return out


@functools.lru_cache(maxsize=None)
def options_fields(struct: str) -> List[Tuple[str, str]]:
    """(name, kind) of the fields of an options struct of nexus.h after struct_size, in order."""
    with open(HEADER) as f:
        m = re.search(r"typedef struct \{([^}]*)\}\s*" + re.escape(struct) + r"\s*;", f.read())
    if m is None:
        raise ValueError(f"{struct} is not a struct of {HEADER}")
    fields: List[Tuple[str, str]] = []
    for decl in re.sub(r"/\*.*?\*/", " ", m.group(1), flags=re.S).split(";"):
        if not decl.strip():
            continue
        ctype, names = decl.split(None, 1)
        for name in (n.strip() for n in names.split(",")):
            if name == "struct_size":
                continue
            if ctype not in SCALAR_KINDS:
                raise ValueError(f"{struct}.{name}: unknown field type {ctype}")
            fields.append((name, SCALAR_KINDS[ctype]))
    return fields


def expand_dtypes(spec: Any) -> List[str]:
    if spec == "float":
        return list(FLOAT_DTYPES)
    if spec == "numeric":
        return list(FLOAT_DTYPES) + ["i32", "i64"]
    if spec == "all":
        return list(ALL_DTYPES)
    if isinstance(spec, list) and all(d in ALL_DTYPES for d in spec):
        return list(spec)
    raise ValueError(f"unknown dtypes {spec!r}")


def python_wrapper(spec: Any) -> Optional[str]:
    """The function name of a generated wrapper (`name(params)`); None for manual or none."""
    return None if spec in (None, "manual", "none") else str(spec).split("(")[0]


def python_order(spec: Any, c_names: List[str]) -> List[str]:
    """The C arguments in the order of the wrapper's parameters: `pyname:cname` in ops.yaml `python:`
    binds by name, as scripts/opgen.py reads it (gather(input:x, dim:axis, index)); without any
    binding the order is the C order."""
    if python_wrapper(spec) is None:
        return []
    inner = str(spec).split("(", 1)[1].rsplit(")", 1)[0]
    binding = [p.split("=")[0].strip().split(":") for p in inner.split(",") if p.strip()]
    return [b[-1] for b in binding] if any(len(b) == 2 for b in binding) else list(c_names)


def load_registry(path: str = REGISTRY) -> Dict[str, Op]:
    try:
        import yaml
    except ImportError:
        raise SystemExit("op_harness: the `yaml` module is missing (Debian: apt-get install python3-yaml; "
                         "pip: pip install pyyaml)")
    with open(path) as f:
        doc = yaml.safe_load(f)
    ops: Dict[str, Op] = {}
    for section in doc["sections"]:
        for o in section["ops"]:
            outs = str(o.get("outs", "nx_tensor* out")).strip()
            nouts = 0 if outs == "none" else -1 if outs == "nx_tensor* outs" else len(outs.split(","))
            args = parse_args(o["args"])
            ops[o["name"]] = Op(o["name"], args, nouts, list(o.get("optional", [])),
                                list(o.get("index", [])), list(o.get("grad", [])), expand_dtypes(o["dtypes"]),
                                list(o.get("devices", ["cpu", "cuda"])), o.get("kind", "other"),
                                python_wrapper(o.get("python")), python_order(o.get("python"), [a.name for a in args]),
                                o.get("shape"), o.get("dtype"))
    return ops


# ---------------------------------------------------------------- tensors between torch and us
def to_nx(t: torch.Tensor, device: str) -> Any:
    """A new engine tensor with t's values (copied through a host buffer: bf16 as its bits)."""
    name = TORCH_NAME[t.dtype]
    t = t.detach().cpu().contiguous()
    arr = t.view(torch.int16).numpy() if name == "bf16" else t.numpy()
    return C.nx_tensor_from_data(arr, list(t.shape), NX_DTYPE[name], device, None)


def to_torch(h: Any) -> torch.Tensor:
    """A CPU torch copy of an engine tensor (any layout, any device)."""
    name = DTYPE_NAME[C.nx_tensor_dtype(h)]
    buf = np.empty(C.nx_tensor_shape(h), NP_DTYPE[name])
    C.nx_tensor_copy_to_host(h, buf, None)
    t = torch.from_numpy(buf)
    return t.view(torch.bfloat16) if name == "bf16" else t


class NoGrad:
    def __enter__(self) -> None:
        self.prev = C.nx_autograd_get_enabled()
        C.nx_autograd_set_enabled(False)

    def __exit__(self, *exc: Any) -> None:
        C.nx_autograd_set_enabled(self.prev)


def live_tensors() -> int:
    return C.nx_live_handle_count(C.NX_HANDLE_TENSOR)


def create_graph_options(create_graph: bool) -> Any:
    """nx_backward_options with create_graph set, or None (NULL: the defaults)."""
    if not create_graph:
        return None
    o = C.nx_backward_options()
    o.create_graph = True
    return o


def seed_of(*parts: Any) -> int:
    return zlib.crc32("/".join(str(p) for p in parts).encode())


# ---------------------------------------------------------------- materialized inputs
@dataclass
class In:
    """One tensor input: its storage and how the op's view is made of it (layout)."""
    storage: torch.Tensor
    layout: str
    floating: bool
    device: Optional[str] = None  # pinned to this device (None: the device under test)

    @property
    def view(self) -> torch.Tensor:
        if self.layout == "T":
            return self.storage.transpose(-1, -2)
        if self.layout == "S":
            return self.storage[..., ::2]
        return self.storage

    def to_nx(self, device: str) -> Any:
        """The engine tensor the op receives: a leaf (a detached view for T/S layouts)."""
        h = to_nx(self.storage, self.device or device)
        if self.layout == "contig":
            return h
        with NoGrad():
            v = C.nx_transpose(h, -1, -2, None) if self.layout == "T" else C.nx_slice(h, -1, 0, 1 << 62, 2, None)
        return C.nx_tensor_detach(v)


def storage_shape(arg: Arg) -> Tuple[int, ...]:
    s = tuple(arg.shape)
    if arg.layout == "T":
        if len(s) < 2:
            raise ValueError(f"layout T needs two dimensions, got shape {s}")
        return s[:-2] + (s[-1], s[-2])
    if arg.layout == "S":
        if len(s) < 1:
            raise ValueError("layout S needs a dimension")
        return s[:-1] + (2 * s[-1],)
    if arg.layout != "contig":
        raise ValueError(f"unknown layout {arg.layout}")
    return s


def is_tensor_list(m: Any) -> bool:
    """A materialized tensor array (attribute lists such as axes hold plain numbers)."""
    return isinstance(m, list) and len(m) > 0 and all(isinstance(x, In) for x in m)


IDX_JUNK = -999983  # the storage elements a strided index view skips: out of range for every op


def make_input(spec: Any, dtype: str, rng: np.random.Generator) -> Any:
    if isinstance(spec, Arg):
        dt = spec.dtype or dtype
        shape = storage_shape(spec)
        vals = spec.dom(rng, shape, op_cases.kind_of(dt))
        # (np.array, not np.ascontiguousarray: that one makes 0-d arrays 1-d)
        t = torch.from_numpy(np.array(vals, order="C").reshape(shape)).to(TORCH_DTYPES[dt])
        return In(t, spec.layout, dt in FLOAT_DTYPES, spec.device)
    if isinstance(spec, Idx):
        n = int(np.prod(spec.shape, dtype=np.int64))
        vals = np.asarray(spec.values, np.int64) if spec.values is not None else rng.integers(0, spec.high, n)
        if spec.ignore:
            value, every = spec.ignore
            vals = vals.copy()
            vals[1::every] = value
        t = torch.from_numpy(vals.reshape(spec.shape)).to(TORCH_DTYPES[spec.dtype or dtype])
        if spec.layout == "T":
            storage_shape(Arg(tuple(spec.shape), layout="T"))  # checks the rank
            t = t.transpose(-1, -2).contiguous()
        elif spec.layout == "S":
            wide = torch.full(storage_shape(Arg(tuple(spec.shape), layout="S")), IDX_JUNK, dtype=t.dtype)
            wide[..., ::2] = t
            t = wide
        elif spec.layout != "contig":
            raise ValueError(f"unknown layout {spec.layout}")
        return In(t, spec.layout, False, spec.device)
    if isinstance(spec, list) and spec and all(isinstance(s, Arg) for s in spec):
        return [make_input(s, dtype, rng) for s in spec]
    return spec  # None (an optional tensor left out) or an attribute value


def materialize(op: Op, variant: Variant, dtype: str, seed: int) -> Dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {a.name: make_input(variant.args[a.name], dtype, rng) for a in op.args}


# ---------------------------------------------------------------- our side: calls and backward
def c_value(arg: CArg, v: Any, handles: Dict[str, Any]) -> Any:
    if arg.kind == "tensor":
        return handles.get(arg.name)
    if arg.kind == "tensors":
        return handles[arg.name]
    if arg.kind == "ints":
        return [int(x) for x in v]
    if arg.kind == "float":
        return float(v)
    if arg.kind == "int":
        return int(v)
    if arg.kind == "bool":
        return bool(v)
    if arg.kind == "dtype":  # a name, or a raw value (error variants: an invalid enum)
        return NX_DTYPE[v] if isinstance(v, str) else int(v)
    if arg.kind == "reduction":
        return NX_REDUCTION[v] if isinstance(v, str) else int(v)
    raise ValueError(arg.kind)


def make_handles(op: Op, mats: Dict[str, Any], device: str) -> Dict[str, Any]:
    """The engine tensors of the materialized inputs, by C argument name (a list for arrays)."""
    handles: Dict[str, Any] = {}
    for a in op.args:
        m = mats[a.name]
        if isinstance(m, In):
            handles[a.name] = m.to_nx(device)
        elif a.kind == "tensors" and isinstance(m, list):
            handles[a.name] = [x.to_nx(device) for x in m]
    return handles


def c_args(op: Op, mats: Dict[str, Any], handles: Dict[str, Any],
           struct_sizes: Optional[Dict[str, int]] = None) -> List[Any]:
    """The C call's arguments: the fields of an options struct go into one struct (made by the
    bindings, so filled with its defaults, struct_size included), at the struct's place;
    struct_sizes overrides struct_size by C parameter (error variants)."""
    args: List[Any] = []
    structs: Dict[str, Any] = {}
    for a in op.args:
        v = c_value(a, mats[a.name], handles)
        if a.struct is None:
            args.append(v)
            continue
        if a.struct not in structs:
            structs[a.struct] = getattr(C, str(a.ctype))()
            args.append(structs[a.struct])
        setattr(structs[a.struct], a.name, v)
    for param, size in (struct_sizes or {}).items():
        structs[param].struct_size = size
    return args


def call_op(op: Op, mats: Dict[str, Any], handles: Dict[str, Any], mutates: Optional[List[str]],
            struct_sizes: Optional[Dict[str, int]] = None) -> List[Any]:
    """nx_<op>(...); returns the output handles (for in-place ops: the written inputs)."""
    res = getattr(C, "nx_" + op.name)(*c_args(op, mats, handles, struct_sizes), None)
    if op.nouts == 0:
        outs: List[Any] = []
        for name in mutates or []:
            h = handles[name]
            outs.extend(h if isinstance(h, list) else [h])
        return outs
    if op.nouts == 1:
        return [res]
    return list(res)


def grad_leaves(op: Op, mats: Dict[str, Any]) -> List[Tuple[str, str, Optional[int]]]:
    """(label, argument name, list position) of every floating input listed in `grad`."""
    out = []
    for name in op.grad:
        m = mats.get(name)
        if is_tensor_list(m):
            out += [(f"{name}[{i}]", name, i) for i, x in enumerate(m) if x.floating]
        elif isinstance(m, In) and m.floating:
            out.append((name, name, None))
    return out


def not_f64_leaves(mats: Dict[str, Any], leaves: List[Tuple[str, str, Optional[int]]]) -> Optional[str]:
    """Why finite differences cannot run on these leaves (a mixed-dtype variant), or None."""
    other = [label for label, name, pos in leaves
             if (mats[name] if pos is None else mats[name][pos]).view.dtype != torch.float64]
    return f"inputs {other} are not f64: a step of 1e-6 rounds in them" if other else None


def leaf_handle(handles: Dict[str, Any], name: str, pos: Optional[int]) -> Any:
    return handles[name] if pos is None else handles[name][pos]


@dataclass
class Result:
    outs: List[torch.Tensor]
    grads: Dict[str, Optional[torch.Tensor]]
    graph: bool  # whether some output requires grad
    devices: List[str]  # where the outputs and gradients live ("cpu", "cuda:0")
    moved: int = 0  # in-place ops: written tensors whose data pointer changed (must stay 0)


def backward_root(outs: List[Any], gouts: List[Optional[torch.Tensor]], device: str) -> None:
    """nx_backward from the outputs with upstream gradients gouts: one output directly, several
    through sum_k sum(out_k * gout_k) (the engine has one root per backward)."""
    pairs = [(o, g) for o, g in zip(outs, gouts) if g is not None and C.nx_tensor_get_requires_grad(o)]
    if len(pairs) == 1:
        C.nx_backward(pairs[0][0], to_nx(pairs[0][1], device), None, None)
        return
    root = None
    for o, g in pairs:
        term = C.nx_sum(C.nx_mul(o, to_nx(g, device), None), [], False, None)
        root = term if root is None else C.nx_add(root, term, None)
    if root is not None:
        C.nx_backward(root, None, None, None)


def run_ours(op: Op, case: Case, mats: Dict[str, Any], device: str,
             gout_fn: Optional[Any]) -> Result:
    """Our op on device. gout_fn(outputs) -> upstream gradients (None: no backward)."""
    handles = make_handles(op, mats, device)
    leaves = grad_leaves(op, mats) if gout_fn else []
    for _, name, pos in leaves:
        C.nx_tensor_set_requires_grad(leaf_handle(handles, name, pos), True)
    written = [h for name in case.mutates or [] for h in (handles[name] if isinstance(handles[name], list)
                                                           else [handles[name]])] if device == "cpu" else []
    ptrs = [C.nx_tensor_data_ptr(h) for h in written]
    outs = call_op(op, mats, handles, case.mutates)
    result = Result([to_torch(h) for h in outs], {}, any(C.nx_tensor_get_requires_grad(h) for h in outs),
                    [C.nx_tensor_device(h) for h in outs])
    result.moved = sum(C.nx_tensor_data_ptr(h) != p for h, p in zip(written, ptrs))
    if gout_fn and result.graph:
        backward_root(outs, gout_fn(result.outs), device)
        for label, name, pos in leaves:
            g = C.nx_tensor_grad(leaf_handle(handles, name, pos))
            result.grads[label] = None if g is None else to_torch(g)
            if g is not None:
                result.devices.append(C.nx_tensor_device(g))
    return result


def python_matches_c(op: Op, mats: Dict[str, Any], device: str) -> Optional[str]:
    """The generated nexusgrad wrapper on the same inputs gives exactly what nx_<op> gives: its
    parameters map to the right C arguments, in the right order, with the right conversions."""
    import nexusgrad as ng
    from nexusgrad.tensor import _wrap

    handles = make_handles(op, mats, device)
    by_name: Dict[str, Any] = {}
    for a in op.args:
        v = mats[a.name]
        if a.kind == "tensor":
            h = handles.get(a.name)
            by_name[a.name] = None if h is None else _wrap(C.nx_tensor_retain(h))
        elif a.kind == "ints":
            by_name[a.name] = [int(x) for x in v]
        elif a.kind == "reduction":
            by_name[a.name] = v  # the wrapper takes PyTorch's names ("mean", "sum", "none")
        elif a.kind in ("float", "int", "bool"):
            by_name[a.name] = c_value(a, v, handles)
        else:
            return f"no Python conversion for a {a.kind} argument"
    with NoGrad():
        want = to_torch(call_op(op, mats, handles, None)[0])
        got = to_torch(getattr(ng, op.python)(*[by_name[n] for n in op.python_order])._h)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"nexusgrad.{op.python} gave {got.dtype} {tuple(got.shape)}, nx_{op.name} {want.dtype} {tuple(want.shape)}"
    same = got == want
    if got.is_floating_point():
        same |= got.isnan() & want.isnan()
    return None if bool(same.all()) else f"nexusgrad.{op.python} differs from nx_{op.name}"


# ---------------------------------------------------------------- the torch side
RefResult = Tuple[List[torch.Tensor], List[torch.dtype], Dict[str, Optional[torch.Tensor]]]


def run_ref(op: Op, case: Case, variant: Variant, mats: Dict[str, Any], dtype: str,
            gout_fn: Optional[Any]) -> RefResult:
    """torch's outputs, the dtypes ours must have, and torch's gradients (gout_fn given).
    With upcast_half, f16/bf16 inputs reach torch as float32; a float32 result then has the
    dtype the inputs' own floating dtypes promote to (f16 alone: f16; f16 with bf16: f32)."""
    halves = (torch.float16, torch.bfloat16)
    ins = [m for m in mats.values() if isinstance(m, In)] + [x for m in mats.values() if is_tensor_list(m) for x in m]
    upcast = case.upcast_half and any(m.view.dtype in halves for m in ins)
    floats = [m.view.dtype for m in ins if m.view.dtype.is_floating_point]
    promoted = functools.reduce(torch.promote_types, floats) if floats else TORCH_DTYPES[dtype]
    leaves: Dict[str, torch.Tensor] = {}
    want_grad = {(name, pos) for _, name, pos in grad_leaves(op, mats)} if gout_fn else set()

    def prep(m: In, name: str, pos: Optional[int]) -> torch.Tensor:
        t = m.view.clone() if case.mutates else m.view  # an in-place reference writes its input
        if upcast and t.dtype in halves:
            t = t.float()
        if (name, pos) in want_grad:
            t = t.detach().requires_grad_(True)
            leaves[name if pos is None else f"{name}[{pos}]"] = t
        return t

    kwargs: Dict[str, Any] = {}
    for a in op.args:
        m = mats[a.name]
        if isinstance(m, In):
            kwargs[a.name] = prep(m, a.name, None)
        elif is_tensor_list(m):
            kwargs[a.name] = [prep(x, a.name, i) for i, x in enumerate(m)]
        else:
            kwargs[a.name] = m
    out = (variant.ref or case.ref)(**kwargs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    dtypes = [promoted if upcast and o.dtype == torch.float32 else o.dtype for o in outs]
    grads: Dict[str, Optional[torch.Tensor]] = {}
    if gout_fn:
        gouts = gout_fn([o.detach().to(d) for o, d in zip(outs, dtypes)])
        pairs = [(o, g.to(o.dtype)) for o, g in zip(outs, gouts) if g is not None and o.requires_grad]
        names = list(leaves)
        if pairs and names:
            gs = torch.autograd.grad([p[0] for p in pairs], [leaves[n] for n in names], [p[1] for p in pairs],
                                     allow_unused=True)
            grads = dict(zip(names, gs))
    return [o.detach() for o in outs], dtypes, grads


def upstream(seed: int) -> Any:
    """Random upstream gradients N(0, 1) for the floating outputs, the same for every device."""
    def fn(outs: List[torch.Tensor]) -> List[Optional[torch.Tensor]]:
        res: List[Optional[torch.Tensor]] = []
        for i, o in enumerate(outs):
            if not o.is_floating_point():
                res.append(None)
                continue
            g = torch.Generator().manual_seed(seed + i)
            res.append(torch.randn(tuple(o.shape), generator=g, dtype=torch.float64).to(o.dtype))
        return res
    return fn


# ---------------------------------------------------------------- comparisons
def compare(got: torch.Tensor, want: torch.Tensor, want_dtype: torch.dtype, tol: Tuple[float, float]) -> Optional[str]:
    """None when got matches want (shape, dtype, values within tol; NaN and inf where want has
    them), else what differs."""
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, want {tuple(want.shape)}"
    if got.dtype != want_dtype:
        return f"dtype {TORCH_NAME.get(got.dtype, got.dtype)}, want {TORCH_NAME.get(want_dtype, want_dtype)}"
    if got.numel() == 0:
        return None
    g, w = got.double().reshape(-1), want.double().reshape(-1)
    if not want_dtype.is_floating_point:
        bad = (g != w).nonzero()
        if len(bad):
            i = int(bad[0])
            return f"{len(bad)} of {g.numel()} differ; first at {i}: {g[i].item()} vs {w[i].item()} (exact)"
        return None
    atol, rtol = tol
    nan_g, nan_w = torch.isnan(g), torch.isnan(w)
    # an infinity where want overflows want_dtype (torch computed a half result in float32)
    w_r = want.reshape(-1).to(want_dtype).double() if want.dtype != want_dtype else w
    same_inf = torch.isinf(w_r) & (g == w_r)
    err = (g - w).abs()
    bad = (nan_g != nan_w) | (~nan_w & ~same_inf & ~(err <= atol + rtol * w.abs()))
    if bool(bad.any()):
        idx = bad.nonzero().reshape(-1)
        fin = ~nan_w & ~torch.isinf(w) & ~torch.isnan(err)
        worst = int(torch.where(fin, err, torch.zeros_like(err)).argmax()) if bool(fin.any()) else int(idx[0])
        i = int(idx[0])
        return (f"{len(idx)} of {g.numel()} outside atol {atol:g} rtol {rtol:g}: max |err| {err[worst].item():.3g} at "
                f"{worst} ({g[worst].item():.9g} vs {w[worst].item():.9g}); first at {i} ({g[i].item():.9g} vs "
                f"{w[i].item():.9g})")
    return None


def zeros_if_none(g: Optional[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if g is None else g


# ---------------------------------------------------------------- output rules (ops.yaml shape:, dtype:)
# Each op declares a shape rule and a dtype rule (the vocabulary: ops.yaml's header); here each
# rule computes, from the op's actual inputs and attributes, what its outputs must be: one value
# for every output, or a list with one per output (split, inplace). `custom` is not checked.
Dims = Tuple[int, ...]


@dataclass
class RuleInputs:
    """What a rule reads: the materialized inputs by C argument name."""
    op: Op
    mats: Dict[str, Any]
    mutates: Optional[List[str]]

    def tensors(self, with_index: bool = False) -> List[torch.Tensor]:
        """The tensor inputs present (arrays element by element), `index` ones only if asked."""
        out: List[torch.Tensor] = []
        for a in self.op.args:
            if a.kind not in ("tensor", "tensors") or (a.name in self.op.index and not with_index):
                continue
            m = self.mats.get(a.name)
            out += [m.view] if isinstance(m, In) else [x.view for x in m] if isinstance(m, list) else []
        return out

    def first(self) -> torch.Tensor:
        """The first tensor input: the first tensor argument (an array's first element)."""
        return self.tensors(with_index=True)[0]

    def index(self) -> torch.Tensor:
        return self.mats[self.op.index[0]].view

    def has(self, name: str) -> bool:
        return any(a.name == name for a in self.op.args)

    def attr(self, name: str) -> Any:
        return self.mats[name]

    def written(self) -> List[torch.Tensor]:
        """The inputs an in-place op writes, in the order the harness lists its outputs."""
        out: List[torch.Tensor] = []
        for name in self.mutates or []:
            m = self.mats[name]
            out += [x.view for x in m] if isinstance(m, list) else [m.view]
        return out


def rule_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def broadcast_dims(*shapes: Sequence[int]) -> Dims:
    """NumPy broadcasting: shapes aligned right, each dimension 1 or the one other size."""
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        sizes = {int(s[len(s) - nd + i]) for s in shapes if len(s) - nd + i >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def dims(t: torch.Tensor) -> Dims:
    return tuple(int(n) for n in t.shape)


def shape_reduce(r: RuleInputs) -> Dims:
    x = dims(r.first())
    if not x:
        return ()
    axes = [int(a) for a in r.attr("axes")] if r.has("axes") else [int(r.attr("axis"))]
    reduced = {rule_axis(a, len(x)) for a in axes} if axes else set(range(len(x)))
    keep = bool(r.attr("keepdim"))
    return tuple(1 if d in reduced else n for d, n in enumerate(x) if keep or d not in reduced)


def shape_matmul(r: RuleInputs) -> Dims:
    a, b = (dims(t) for t in r.tensors()[:2])
    if not a or not b:
        raise ValueError("matmul needs operands of rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ValueError(f"inner dimensions differ: {a} @ {b}")
    out = broadcast_dims(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def shape_linear(r: RuleInputs) -> Dims:
    x, w = (dims(t) for t in r.tensors()[:2])
    return x[:-1] + w[:1]


def shape_reshape(r: RuleInputs) -> Dims:
    shape = [int(d) for d in r.attr("shape")]
    if shape.count(-1) > 1:
        raise ValueError(f"more than one -1 in {shape}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        shape[shape.index(-1)] = r.first().numel() // known
    return tuple(shape)


def shape_expand(r: RuleInputs) -> Dims:
    x, shape = dims(r.first()), [int(d) for d in r.attr("shape")]
    lead = len(shape) - len(x)
    if lead < 0:
        raise ValueError(f"cannot expand {x} to fewer dimensions {shape}")
    return tuple(x[i - lead] if i >= lead and d == -1 else d for i, d in enumerate(shape))


def shape_transpose(r: RuleInputs) -> Dims:
    x = list(dims(r.first()))
    if x:
        a, b = rule_axis(int(r.attr("dim0")), len(x)), rule_axis(int(r.attr("dim1")), len(x))
        x[a], x[b] = x[b], x[a]
    return tuple(x)


def shape_permute(r: RuleInputs) -> Dims:
    x = dims(r.first())
    return tuple(x[rule_axis(int(d), len(x))] for d in r.attr("dims"))


def shape_slice(r: RuleInputs) -> Dims:
    x = list(dims(r.first()))
    a = rule_axis(int(r.attr("axis")), len(x))
    x[a] = len(range(*slice(int(r.attr("start")), int(r.attr("end")), int(r.attr("step"))).indices(x[a])))
    return tuple(x)


def shape_squeeze(r: RuleInputs) -> Dims:
    x = list(dims(r.first()))
    if x:
        del x[rule_axis(int(r.attr("axis")), len(x))]
    return tuple(x)


def shape_unsqueeze(r: RuleInputs) -> Dims:
    x = list(dims(r.first()))
    x.insert(rule_axis(int(r.attr("axis")), len(x) + 1), 1)
    return tuple(x)


def shape_flatten(r: RuleInputs) -> Dims:
    x = dims(r.first())
    if not x:
        return (1,)
    a, b = rule_axis(int(r.attr("start_axis")), len(x)), rule_axis(int(r.attr("end_axis")), len(x))
    return x[:a] + (int(np.prod(x[a:b + 1], dtype=np.int64)),) + x[b + 1:]


def array_input(r: RuleInputs) -> List[torch.Tensor]:
    name = next(a.name for a in r.op.args if a.kind == "tensors")
    return [x.view for x in r.mats[name]]


def shape_cat(r: RuleInputs) -> Dims:
    ts = array_input(r)
    x = list(dims(ts[0]))
    a = rule_axis(int(r.attr("axis")), len(x))
    x[a] = sum(int(t.shape[a]) for t in ts)
    return tuple(x)


def shape_stack(r: RuleInputs) -> Dims:
    ts = array_input(r)
    x = list(dims(ts[0]))
    x.insert(rule_axis(int(r.attr("axis")), len(x) + 1), len(ts))
    return tuple(x)


def shape_split(r: RuleInputs) -> List[Dims]:
    x = dims(r.first())
    a = rule_axis(int(r.attr("axis")), len(x))
    return [x[:a] + (int(n),) + x[a + 1:] for n in r.attr("sizes")]


def shape_take(r: RuleInputs) -> Dims:
    x = dims(r.first())
    a = rule_axis(int(r.attr("axis")), len(x)) if r.has("axis") else 0
    return x[:a] + dims(r.index()) + x[a + 1:]


# rule name -> (the rule, what it needs of the op's declaration: argument names, alternatives
# joined by |, "@kind" an argument of that kind, "index" one index argument, "2tensors" two
# tensor arguments, "outs:none" an in-place op, "outs:list" a list of outputs)
SHAPE_RULES: Dict[str, Tuple[Any, Tuple[str, ...]]] = {
    "same": (lambda r: dims(r.first()), ()),
    "broadcast": (lambda r: broadcast_dims(*[t.shape for t in r.tensors()]), ()),
    "reduce": (shape_reduce, ("axes|axis", "keepdim")),
    "loss": (lambda r: dims(r.attr("target").view) if r.attr("reduction") == "none" else (), ("target", "reduction")),
    "matmul": (shape_matmul, ("2tensors",)),
    "linear": (shape_linear, ("2tensors",)),
    "take": (shape_take, ("index",)),
    "index": (lambda r: dims(r.index()), ("index",)),
    "one_hot": (lambda r: dims(r.index()) + (int(r.attr("num_classes")),), ("index", "num_classes")),
    "inplace": (lambda r: [dims(t) for t in r.written()], ("outs:none",)),
    "reshape": (shape_reshape, ("shape",)),
    "expand": (shape_expand, ("shape",)),
    "transpose": (shape_transpose, ("dim0", "dim1")),
    "permute": (shape_permute, ("dims",)),
    "slice": (shape_slice, ("axis", "start", "end", "step")),
    "squeeze": (shape_squeeze, ("axis",)),
    "unsqueeze": (shape_unsqueeze, ("axis",)),
    "flatten": (shape_flatten, ("start_axis", "end_axis")),
    "cat": (shape_cat, ("@tensors", "axis")),
    "stack": (shape_stack, ("@tensors", "axis")),
    "split": (shape_split, ("sizes", "axis", "outs:list")),
}


def dtype_of(t: torch.Tensor) -> str:
    return TORCH_NAME[t.dtype]


PROMOTION = ("bool", "i32", "i64", "f16", "bf16", "f32", "f64")  # f16 with bf16: f32


def promote2(a: str, b: str) -> str:
    return "f32" if {a, b} == {"f16", "bf16"} else max(a, b, key=PROMOTION.index)


def dtype_promote(r: RuleInputs) -> str:
    return functools.reduce(promote2, [dtype_of(t) for t in r.tensors()])


def dtype_scalar(r: RuleInputs) -> str:
    """The first tensor input combined with the double attributes as PyTorch combines a tensor
    with Python numbers (whole finite numbers as ints; an exponent as an int only if >= 0)."""
    d = dtype_of(r.first())
    if d in FLOAT_DTYPES:
        return d
    scalars = [(a.name, float(r.attr(a.name))) for a in r.op.args if a.kind == "float"]
    if d == "bool" and any(name == "exponent" for name, _ in scalars):
        return "f32"
    ints = all(math.isfinite(v) and v == math.floor(v) and (name != "exponent" or v >= 0) for name, v in scalars)
    return ("i64" if d == "bool" else d) if ints else "f32"


DTYPE_RULES: Dict[str, Tuple[Any, Tuple[str, ...]]] = {
    "same": (lambda r: dtype_of(r.first()), ()),
    "promote": (dtype_promote, ()),
    "promote_int": (lambda r: (lambda d: "i64" if d == "bool" else d)(dtype_promote(r)), ()),
    "promote_float": (lambda r: (lambda d: d if d in FLOAT_DTYPES else "f32")(dtype_promote(r)), ()),
    "numeric_or_f32": (lambda r: (lambda d: "f32" if d == "bool" else d)(dtype_of(r.first())), ()),
    "float_or_i64": (lambda r: (lambda d: d if d in FLOAT_DTYPES else "i64")(dtype_of(r.first())), ()),
    "scalar": (dtype_scalar, ("@float",)),
    "bool": (lambda r: "bool", ()),
    "i64": (lambda r: "i64", ()),
    "attr": (lambda r: r.attr(next(a.name for a in r.op.args if a.kind == "dtype")), ("@dtype",)),
    "inplace": (lambda r: [dtype_of(t) for t in r.written()], ("outs:none",)),
}


def rule_problems(op: Op) -> Optional[str]:
    """Why op's `shape:`/`dtype:` declaration is unusable (missing, unknown, or a rule whose
    arguments the op lacks), or None."""
    kinds = {a.name: a.kind for a in op.args}
    problems = []
    for aspect, rule, table in (("shape", op.shape_rule, SHAPE_RULES), ("dtype", op.dtype_rule, DTYPE_RULES)):
        if rule is None:
            problems.append(f"no `{aspect}:` rule")
            continue
        if rule == "custom":
            continue
        if rule not in table:
            problems.append(f"unknown {aspect} rule {rule!r} (known: {', '.join(list(table) + ['custom'])})")
            continue
        if op.nouts == 0 and rule != "inplace":
            problems.append(f"`{aspect}: {rule}` for an in-place op (outs: none): want inplace")
        for need in table[rule][1]:
            if need == "outs:none":
                ok, what = op.nouts == 0, "outs: none"
            elif need == "outs:list":
                ok, what = op.nouts == -1, "a list of outputs (outs: nx_tensor* outs)"
            elif need == "index":
                ok, what = len(op.index) == 1, "one `index` argument"
            elif need == "2tensors":
                ok = sum(k in ("tensor", "tensors") and n not in op.index for n, k in kinds.items()) >= 2
                what = "two tensor arguments"
            elif need.startswith("@"):
                ok, what = need[1:] in kinds.values(), f"a {need[1:]} argument"
            else:
                ok, what = any(n in kinds for n in need.split("|")), " or ".join(f"`{n}`" for n in need.split("|"))
            if not ok:
                problems.append(f"`{aspect}: {rule}` needs {what}")
    return "; ".join(problems) if problems else None


# ---------------------------------------------------------------- the run
class Harness:
    def __init__(self, ops: Dict[str, Op], verbose: bool, simd_levels: Sequence[str]) -> None:
        self.ops = ops
        self.verbose = verbose
        # CPU runs repeat at each SIMD level (the first is the default one, where finite
        # differences run; the others re-check forward and grad against torch)
        self.simd_levels = list(simd_levels)
        self.level = ""
        self.checks = 0
        self.failures: List[str] = []
        self.skips: List[str] = []
        self.combos = 0
        self.gradchecks: Dict[str, int] = {}
        self.gradcheck_skipped: Dict[str, List[str]] = {}
        self.gradgrads: Dict[str, int] = {}
        self.gradgrad_skipped: Dict[str, List[str]] = {}
        self.by_mode: Dict[str, int] = {}

    # -------------------------------------------------------------- bookkeeping
    def check(self, ok_msg: Optional[str], where: str, mode: str = "meta") -> bool:
        self.checks += 1
        self.by_mode[mode] = self.by_mode.get(mode, 0) + 1
        if ok_msg is not None:
            self.failures.append(f"{where}: {ok_msg}")
            print(f"FAIL {where}: {ok_msg}", flush=True)
            return False
        return True

    def skip(self, where: str, reason: str) -> None:
        self.skips.append(f"{where}: {reason}")
        if self.verbose:
            print(f"SKIP {where}: {reason}")

    @staticmethod
    def skip_reason(case: Case, variant: Variant, mode: str, dtype: str, device: str) -> Optional[str]:
        for table in (variant.skip, case.skip):
            for key, reason in table.items():
                parts = key.split("@") + ["*", "*"]
                if parts[0] in (mode, "*") and parts[1] in (dtype, "*") and parts[2] in (device, "*"):
                    if not reason:
                        raise ValueError(f"{case.op}: skip {key} without a reason")
                    return reason
        return None

    @staticmethod
    def tol(case: Case, variant: Variant, what: str, dtype_name: str, device: str) -> Tuple[float, float]:
        """TOL, unless the variant or the case widens it: keys [grad@]DTYPE[@DEVICE], the most
        specific first (a plain DTYPE key applies to gradients too)."""
        keys = [f"{dtype_name}@{device}", dtype_name]
        if what == "grad":
            keys = [f"grad@{dtype_name}@{device}", f"grad@{dtype_name}"] + keys
        for table, reason in ((variant.tol, variant.tol_reason), (case.tol, case.tol_reason)):
            for key in keys:
                if key in table:
                    if not reason:
                        raise ValueError(f"{case.op}: tolerance {key} widened without a tol_reason")
                    return table[key]
        return TOL.get(dtype_name, TOL["f64"])[what]

    # -------------------------------------------------------------- output rules
    def check_rules(self, op: Op, case: Case, mats: Dict[str, Any], outs: List[torch.Tensor], where: str) -> None:
        """Our outputs' shapes and dtypes against what the op's declared rules compute from these
        inputs: one check per rule (none for `custom`)."""
        r = RuleInputs(op, mats, case.mutates)
        for aspect, rule, table, got in (
                ("shape", op.shape_rule, SHAPE_RULES, [tuple(int(n) for n in o.shape) for o in outs]),
                ("dtype", op.dtype_rule, DTYPE_RULES, [TORCH_NAME[o.dtype] for o in outs])):
            if rule == "custom":
                continue
            label = f"`{aspect}: {rule}`"
            try:
                want = table[rule][0](r)
            except Exception as e:  # the rule does not apply to inputs the op accepted
                self.check(f"{label} cannot be computed from these inputs: {type(e).__name__}: {e}",
                           f"{where} rules {aspect}", "rules")
                continue
            wants = want if isinstance(want, list) else [want] * len(got)
            msg = None
            if len(wants) != len(got):
                msg = f"{len(got)} outputs, {label} gives {len(wants)}"
            else:
                bad = [j for j, (g, w) in enumerate(zip(got, wants)) if g != w]
                if bad:
                    j = bad[0]
                    msg = f"out{j} has {aspect} {got[j]}, {label} gives {wants[j]}"
            self.check(msg, f"{where} rules {aspect}", "rules")

    # -------------------------------------------------------------- case vs registry
    def validate(self, op: Op, case: Case) -> bool:
        """A case must name exactly the op's C arguments, give Idx for `index` arguments and
        floating Args for `grad` ones; a mismatch is a failure (the harness would test a
        different signature than the registry declares)."""
        names = [a.name for a in op.args]
        problems = []
        for v in case.variants:
            missing = [n for n in names if n not in v.args and n not in op.optional]
            extra = [k for k in v.args if k not in names]
            if missing or extra:
                problems.append(f"variant {v.name}: missing {missing}, unknown {extra}")
            for a in op.args:
                spec = v.args.get(a.name)
                if a.name in op.index and spec is not None and not isinstance(spec, Idx):
                    problems.append(f"variant {v.name}: index argument {a.name} is not an Idx")
                if a.name not in op.index and isinstance(spec, Idx):
                    problems.append(f"variant {v.name}: {a.name} is an Idx but ops.yaml does not list it in `index`")
                if a.kind in ("tensor", "tensors") and spec is None and a.name not in op.optional:
                    problems.append(f"variant {v.name}: required tensor {a.name} is None")
            for g in op.grad:
                spec = v.args.get(g)
                specs = spec if isinstance(spec, list) else [spec]
                if spec is not None and not all(isinstance(s, Arg) for s in specs):
                    problems.append(f"variant {v.name}: grad input {g} is not an Arg")
        for e in case.errors:
            missing = [n for n in names if n not in e.args and n not in op.optional]
            extra = [k for k in e.args if k not in names]
            if missing or extra:
                problems.append(f"error variant {e.name}: missing {missing}, unknown {extra}")
            if not isinstance(getattr(C, e.status, None), int):
                problems.append(f"error variant {e.name}: unknown status {e.status}")
            structs = {a.struct for a in op.args if a.struct}
            if any(k not in structs for k in e.struct_sizes):
                problems.append(f"error variant {e.name}: struct_sizes names {sorted(e.struct_sizes)}, the op's "
                                f"options structs are {sorted(structs)}")
        for kind, names_seen in (("variant", [v.name for v in case.variants]), ("error variant",
                                                                                [e.name for e in case.errors])):
            dups = sorted({n for n in names_seen if names_seen.count(n) > 1})
            if dups:
                problems.append(f"{kind} names repeat (they seed the inputs): {dups}")
        if case.mutates and op.nouts != 0:
            problems.append("`mutates` given but ops.yaml declares outputs")
        if op.nouts == 0 and not case.mutates:
            problems.append("in-place op (outs: none) without `mutates`")
        return self.check("; ".join(problems) if problems else None, f"{op.name} case matches ops.yaml")

    def variants_of(self, op: Op, case: Case) -> List[Variant]:
        """The case's variants plus, per optional tensor, the first variant with it left out."""
        out = [dataclasses.replace(v, args=dict(v.args, **{o: None for o in op.optional if o not in v.args}))
               for v in case.variants]
        if op.optional and case.variants:
            base = case.variants[0]
            combos = [[o] for o in op.optional] + ([list(op.optional)] if len(op.optional) > 1 else [])
            for leave_out in combos:
                out.append(dataclasses.replace(base, name="no_" + "_".join(leave_out),
                                               args=dict(base.args, **{o: None for o in leave_out})))
        return out

    # -------------------------------------------------------------- one op
    def run_op(self, op: Op, case: Case, dtypes: Sequence[str], devices: Sequence[str]) -> bool:
        """Runs every variant of the case; False when the case does not match the registry."""
        if not self.validate(op, case):
            return False
        variants = self.variants_of(op, case)
        for dtype in op.dtypes:
            if dtype not in dtypes:
                continue
            for device in devices:
                if device not in op.devices:
                    continue
                ran = False
                for level in (self.simd_levels if device == "cpu" else [""]):
                    if level:
                        C.nx_cpu_set_simd_level(level)
                    self.level = level
                    ran |= self.run_combo(op, case, variants, dtype, device)
                if device == "cpu" and self.simd_levels:
                    C.nx_cpu_set_simd_level(self.simd_levels[0])
                self.level = ""
                if ran:
                    self.combos += 1
                elif not any(self.skip_reason(case, v, "*", dtype, device) for v in variants):
                    self.check("no variant ran", f"{op.name} {dtype} {device}")
        # Every differentiable op with f64 gets finite differences somewhere, first and second
        # order, unless the case itself says why not.
        if op.grad and "f64" in op.dtypes and "f64" in dtypes and "cpu" in devices:
            for mode, ran_, skipped in (("gradcheck", self.gradchecks, self.gradcheck_skipped),
                                        ("gradgrad", self.gradgrads, self.gradgrad_skipped)):
                if mode not in case.skip and not (mode == "gradgrad" and "gradcheck" in case.skip) \
                        and not ran_.get(op.name):
                    self.check(f"no variant ran (skipped: {skipped.get(op.name, [])})", f"{op.name} {mode} coverage")
        for e in case.errors:
            if e.dtype not in dtypes:
                continue
            for device in devices:
                if device not in op.devices or (e.devices is not None and device not in e.devices):
                    continue
                where = f"{op.name} {e.dtype} {device} [{e.name}] errors"
                try:
                    self.run_error(op, case, e, device, where)
                except Exception as ex:  # a failure of the harness itself (bad arguments...)
                    self.check(f"{type(ex).__name__}: {ex}", where, "errors")
        return True

    def run_combo(self, op: Op, case: Case, variants: List[Variant], dtype: str, device: str) -> bool:
        before = self.checks
        for v in variants:
            if v.dtypes is not None and dtype not in v.dtypes:
                continue
            if v.devices is not None and device not in v.devices:
                continue
            where = f"{op.name} {dtype} {device}{'/' + self.level if self.level else ''} [{v.name}]"
            try:
                self.run_variant(op, case, v, dtype, device, where)
            except Exception as e:  # an engine error, or a reference torch cannot compute
                self.check(f"{type(e).__name__}: {e}", where)
        return self.checks > before

    def run_variant(self, op: Op, case: Case, v: Variant, dtype: str, device: str, where: str) -> None:
        seed = seed_of(op.name, v.name, dtype)
        mats = materialize(op, v, dtype, seed)
        floating = dtype in FLOAT_DTYPES
        has_grad = bool(op.grad) and floating and bool(grad_leaves(op, mats))
        skip_fwd = self.skip_reason(case, v, "forward", dtype, device)
        skip_grad = self.skip_reason(case, v, "grad", dtype, device) if has_grad else None
        skip_rules = self.skip_reason(case, v, "rules", dtype, device)
        for mode, reason in (("forward", skip_fwd), ("grad", skip_grad), ("rules", skip_rules)):
            if reason:
                self.skip(f"{where} {mode}", reason)
        do_grad = has_grad and not skip_grad
        gout = upstream(seed + 7) if do_grad else None
        ours: Optional[Result] = None
        if not skip_fwd or do_grad:
            ours = run_ours(op, case, mats, device, gout)
            ref_outs, ref_dtypes, ref_grads = run_ref(op, case, v, mats, dtype, gout)
            if not skip_fwd:
                if case.mutates:  # in place: the results are in the inputs' own storage
                    self.check(f"{ours.moved} written tensors have a new data pointer" if ours.moved else None,
                               f"{where} forward in place", "forward")
                if len(ours.outs) != len(ref_outs):
                    self.check(f"{len(ours.outs)} outputs, torch has {len(ref_outs)}", f"{where} forward", "forward")
                for j, (o, r, d) in enumerate(zip(ours.outs, ref_outs, ref_dtypes)):
                    self.check(compare(o, r, d, self.tol(case, v, "fwd", TORCH_NAME[d], device)),
                               f"{where} forward out{j}", "forward")
            if op.python and not skip_fwd:
                self.check(python_matches_c(op, mats, device), f"{where} python wrapper", "python")
            if device != "cpu":  # nothing may fall back to (or land on) the host
                elsewhere = [d for d in ours.devices if not d.startswith(device)]
                self.check(f"results on {elsewhere}" if elsewhere else None, f"{where} results on {device}", "cuda")
            if do_grad:
                if not ours.graph:
                    # integer outputs (a cast to i64...) have no gradient, in torch as in ours
                    if any(o.is_floating_point() for o in ours.outs) or ref_grads:
                        self.check("no output requires grad: the op recorded no graph", f"{where} grad")
                else:
                    for label, g in ref_grads.items():
                        leaf = self.leaf_view(mats, label)
                        want = zeros_if_none(g, leaf.float() if case.upcast_half else leaf)
                        got = ours.grads.get(label)
                        got = zeros_if_none(got, leaf)
                        self.check(compare(got, want, leaf.dtype,
                                           self.tol(case, v, "grad", TORCH_NAME[leaf.dtype], device)),
                                   f"{where} grad {label}", "grad")
        if not skip_rules:  # our outputs only: no torch reference needed
            if ours is None:
                with NoGrad():
                    ours = run_ours(op, case, mats, device, None)
            self.check_rules(op, case, mats, ours.outs, where)
        if device != "cpu":
            self.cuda_vs_cpu(op, case, v, mats, dtype, device, where, gout)
        if dtype == "f64" and op.grad and (not self.level or self.level == self.simd_levels[0]):
            self.gradcheck(op, case, v, mats, device, where, seed)
            self.gradgrad(op, case, v, mats, device, where, seed)

    @staticmethod
    def leaf_view(mats: Dict[str, Any], label: str) -> torch.Tensor:
        if label.endswith("]"):
            name, pos = label[:-1].split("[")
            return mats[name][int(pos)].view
        return mats[label].view

    # -------------------------------------------------------------- CUDA against the CPU
    def cuda_vs_cpu(self, op: Op, case: Case, v: Variant, mats: Dict[str, Any], dtype: str, device: str,
                    where: str, gout: Any) -> None:
        reason = self.skip_reason(case, v, "cuda", dtype, device)
        if reason:
            self.skip(f"{where} cuda", reason)
            return
        gpu = run_ours(op, case, mats, device, gout)
        cpu = run_ours(op, case, mats, "cpu", gout)
        for j, (g, c) in enumerate(zip(gpu.outs, cpu.outs)):
            self.check(compare(g, c, c.dtype, self.tol(case, v, "fwd", TORCH_NAME[c.dtype], device)),
                       f"{where} cuda out{j}", "cuda")
        for label, c in cpu.grads.items():
            leaf = self.leaf_view(mats, label)
            self.check(compare(zeros_if_none(gpu.grads.get(label), leaf), zeros_if_none(c, leaf), leaf.dtype,
                               self.tol(case, v, "grad", TORCH_NAME[leaf.dtype], device)),
                       f"{where} cuda grad {label}", "cuda")

    # -------------------------------------------------------------- finite differences
    def size_reason(self, mats: Dict[str, Any], leaves: List[Tuple[str, str, Optional[int]]], limit: int,
                    why: str = "") -> Optional[str]:
        """Why finite differences skip these inputs by their size (none when they do not)."""
        n = sum(self.leaf_view(mats, label).numel() for label, _, _ in leaves)
        if n > limit:
            return f"{n} input elements > {limit}{why}"
        return "empty inputs: nothing to perturb" if n == 0 else None

    def gradcheck(self, op: Op, case: Case, v: Variant, mats: Dict[str, Any], device: str, where: str,
                  seed: int) -> None:
        leaves = grad_leaves(op, mats)
        if not leaves:
            return
        reason = self.skip_reason(case, v, "gradcheck", "f64", device) or not_f64_leaves(mats, leaves) \
            or self.size_reason(mats, leaves, GC_MAX_ELEMENTS, ": too slow for finite differences")
        if reason:
            self.gradcheck_skipped.setdefault(op.name, []).append(v.name)
            self.skip(f"{where} gradcheck", reason)
            return
        wfn = upstream(seed + 11)
        weights: List[Optional[torch.Tensor]] = []

        def wrapped(outs: List[torch.Tensor]) -> List[Optional[torch.Tensor]]:
            weights[:] = wfn(outs)
            return weights

        analytic = run_ours(op, case, mats, device, wrapped)
        if v.gc_step is None and any(o.is_floating_point() and o.dtype != torch.float64 for o in analytic.outs):
            self.skip(f"{where} gradcheck", "an output is not f64: finite differences need f64 outputs")
            self.gradcheck_skipped.setdefault(op.name, []).append(v.name)
            return
        if not analytic.graph:
            if any(o.is_floating_point() for o in analytic.outs):
                self.check("no output requires grad", f"{where} gradcheck")
            return  # integer outputs: nothing to differentiate

        # The objective on plain contiguous inputs (values do not depend on the layout).
        base = {k: (m.view.contiguous() if isinstance(m, In) else [x.view.contiguous() for x in m]
                    if is_tensor_list(m) else None) for k, m in mats.items()}

        def objective(name: str, pos: Optional[int], flat: int, delta: float) -> float:
            handles: Dict[str, Any] = {}
            for k, m in base.items():
                if m is not None:
                    items = m if isinstance(m, list) else [m]
                    hs = []
                    for i, t in enumerate(items):
                        if k == name and (pos is None or pos == i):
                            t = t.clone()
                            t.view(-1)[flat] += delta
                        hs.append(to_nx(t, device))
                    handles[k] = hs if isinstance(m, list) else hs[0]
            with NoGrad():
                outs = call_op(op, mats, handles, case.mutates)
            total = 0.0
            for h, w in zip(outs, weights):
                if w is not None:
                    total += float((to_torch(h).double() * w.double()).sum())
            return total

        L0 = objective("", None, 0, 0.0)
        atol = GC_ATOL * max(1.0, abs(L0))
        eps = v.gc_step or GC_EPS
        for label, name, pos in leaves:
            a = analytic.grads.get(label)
            leaf = self.leaf_view(mats, label)
            if leaf.numel() == 0:
                continue  # nothing to compare: no check
            a = zeros_if_none(a, leaf).double().contiguous().reshape(-1)
            x = base[name][pos] if pos is not None else base[name]
            worst, msg = 0.0, None
            for j in range(x.numel()):
                x0 = float(x.view(-1)[j])
                step = (x0 + eps) - (x0 - eps)  # the step actually taken in f64
                num = (objective(name, pos, j, eps) - objective(name, pos, j, -eps)) / step
                err = abs(float(a[j]) - num)
                allowed = GC_RTOL * abs(num) + atol
                worst = max(worst, err / allowed)
                if not err <= allowed and msg is None:
                    msg = (f"element {j}: analytic {float(a[j]):.12g}, numeric {num:.12g} "
                           f"(|diff| {err:.3g} > {allowed:.3g})")
            self.gradchecks[op.name] = self.gradchecks.get(op.name, 0) + 1
            self.check(msg, f"{where} gradcheck {label}", "gradcheck")

    # -------------------------------------------------------------- second order
    def gradgrad(self, op: Op, case: Case, v: Variant, mats: Dict[str, Any], device: str, where: str,
                 seed: int) -> None:
        """H v by double backward against (g(x + eps v) - g(x - eps v)) / 2 eps, g the first-order
        gradient of L = sum(w * op(x)) with respect to every grad input jointly, v random."""
        leaves = grad_leaves(op, mats)
        if not leaves:
            return
        reason = self.skip_reason(case, v, "gradgrad", "f64", device)
        if not reason:
            gc = self.skip_reason(case, v, "gradcheck", "f64", device)
            reason = f"as gradcheck: {gc}" if gc else not_f64_leaves(mats, leaves)
        reason = reason or self.size_reason(mats, leaves, GG_MAX_ELEMENTS)
        if reason:
            self.gradgrad_skipped.setdefault(op.name, []).append(v.name)
            self.skip(f"{where} gradgrad", reason)
            return
        gen = torch.Generator().manual_seed(seed + 17)
        dirs = {label: torch.randn(tuple(self.leaf_view(mats, label).shape), generator=gen, dtype=torch.float64)
                for label, _, _ in leaves}
        base = {k: (m.view.contiguous() if isinstance(m, In) else [x.view.contiguous() for x in m]
                    if is_tensor_list(m) else None) for k, m in mats.items()}
        wfn = upstream(seed + 13)
        weights: List[Optional[torch.Tensor]] = []

        def first_order(shift: float, create_graph: bool) -> Optional[Tuple[Dict[str, Any], List[Any]]]:
            """The gradients (handles, None where unreachable) at x + shift v, and the leaves."""
            handles: Dict[str, Any] = {}
            leaf_h: Dict[str, Any] = {}
            for k, m in base.items():
                if m is None:
                    continue
                items = m if isinstance(m, list) else [m]
                hs = []
                for i, t in enumerate(items):
                    label = f"{k}[{i}]" if isinstance(m, list) else k
                    if label in dirs and shift:
                        t = t + shift * dirs[label].to(t.dtype)
                    h = to_nx(t, device)
                    if label in dirs:
                        C.nx_tensor_set_requires_grad(h, True)
                        leaf_h[label] = h
                    hs.append(h)
                handles[k] = hs if isinstance(m, list) else hs[0]
            outs = call_op(op, mats, handles, case.mutates)
            if not weights:
                weights[:] = wfn([to_torch(o) for o in outs])
            root = None
            for o, w in zip(outs, weights):
                if w is None or not C.nx_tensor_get_requires_grad(o):
                    continue
                term = C.nx_sum(C.nx_mul(o, to_nx(w, device), None), [], False, None)
                root = term if root is None else C.nx_add(root, term, None)
            if root is None:
                return None
            labels = list(leaf_h)
            gs = C.nx_autograd_grad(root, None, [leaf_h[lb] for lb in labels], create_graph_options(create_graph),
                                    None)
            return dict(zip(labels, gs)), [leaf_h[lb] for lb in labels]

        first = first_order(0.0, True)
        if first is None:
            return  # no output requires grad (integer outputs): gradcheck reports what it must
        if any(w is not None and w.dtype != torch.float64 for w in weights):
            self.gradgrad_skipped.setdefault(op.name, []).append(v.name)
            self.skip(f"{where} gradgrad", "an output is not f64: finite differences need f64 outputs")
            return
        g, leaf_list = first
        labels = list(g)
        s = None
        for label in labels:
            gh = g[label]
            if gh is None or not C.nx_tensor_get_requires_grad(gh):
                continue  # this gradient does not depend on the inputs (its Hessian part is 0)
            term = C.nx_sum(C.nx_mul(gh, to_nx(dirs[label], device), None), [], False, None)
            s = term if s is None else C.nx_add(s, term, None)
        hv = {label: torch.zeros_like(dirs[label]) for label in labels}
        if s is not None:
            for label, h in zip(labels, C.nx_autograd_grad(s, None, leaf_list, None, None)):
                if h is not None:
                    hv[label] = to_torch(h).double()
        gp = first_order(GG_EPS, False)
        gm = first_order(-GG_EPS, False)
        assert gp is not None and gm is not None

        def val(d: Dict[str, Any], label: str) -> torch.Tensor:
            return torch.zeros_like(dirs[label]) if d[label] is None else to_torch(d[label]).double()

        gmax = max([float(val(g, lb).abs().max()) for lb in labels if dirs[lb].numel()] + [1.0])
        for label in labels:
            if dirs[label].numel() == 0:
                continue
            num = (val(gp[0], label) - val(gm[0], label)) / (2 * GG_EPS)
            a = hv[label]
            atol = GG_ATOL * max(gmax, float(num.abs().max()))
            err = (a - num).abs()
            bad = ~(err <= GG_RTOL * num.abs() + atol)
            msg = None
            if bool(bad.any()):
                j = int(bad.reshape(-1).nonzero()[0])
                msg = (f"element {j}: H v {float(a.reshape(-1)[j]):.12g}, numeric {float(num.reshape(-1)[j]):.12g} "
                       f"(|diff| {float(err.reshape(-1)[j]):.3g}; {int(bad.sum())} of {bad.numel()} outside)")
            self.gradgrads[op.name] = self.gradgrads.get(op.name, 0) + 1
            self.check(msg, f"{where} gradgrad {label}", "gradgrad")

    # -------------------------------------------------------------- error paths
    def run_error(self, op: Op, case: Case, e: Err, device: str, where: str) -> None:
        want = getattr(C, e.status)
        mats = materialize(op, Variant(e.name, dict(e.args, **{o: None for o in op.optional if o not in e.args})),
                           e.dtype, seed_of(op.name, "error", e.name))
        handles = make_handles(op, mats, device)
        before = {}
        for name in case.mutates or []:
            h = handles.get(name)
            before[name] = [to_torch(x) for x in (h if isinstance(h, list) else [h] if h is not None else [])]
        live = live_tensors()
        try:
            call_op(op, mats, handles, case.mutates, e.struct_sizes)
        except nexusgrad.Error as ex:
            msg = str(getattr(ex, "message", ex))
            problems = []
            if ex.status != want:
                problems.append(f"status {ex.status_name}, want {e.status}")
            prefix = f"nx_{op.name}:"
            if not msg.startswith(prefix):
                problems.append(f"the message does not start with {prefix!r}")
            missing = [nd for nd in e.needles if nd not in msg]
            if missing:
                problems.append(f"the message lacks {missing}")
            self.check(f"{'; '.join(problems)} (message: {msg!r})" if problems else None, where, "errors")
        else:
            self.check(f"returned normally; want {e.status}", where, "errors")
            return
        self.check(None if live_tensors() == live else
                   f"{live_tensors() - live} handles more after the failed call", f"{where} no handle left",
                   "errors")
        for name, olds in before.items():
            h = handles[name]
            news = [to_torch(x) for x in (h if isinstance(h, list) else [h])]
            same = all(torch.equal(a, b) or (a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()))
                       for a, b in zip(olds, news))
            self.check(None if same else f"{name} changed by the failed call", f"{where} {name} unchanged", "errors")


# ---------------------------------------------------------------- main
def simd_levels(wanted: Sequence[str]) -> List[str]:
    """The CPU SIMD levels to run: the default one first, then the others the processor has."""
    default = C.nx_cpu_get_simd_level()
    levels = [default] + [lv for lv in ("avx512", "avx2", "scalar") if lv != default]
    have = []
    for lv in levels:
        try:
            C.nx_cpu_set_simd_level(lv)
            have.append(lv)
        except Exception:  # the processor lacks it
            pass
    C.nx_cpu_set_simd_level(default)
    if wanted:
        missing = [lv for lv in wanted if lv not in have]
        if missing:
            raise SystemExit(f"op harness: SIMD level(s) {missing} not available here (have {have})")
        return [lv for lv in have if lv in wanted]
    return have


def cuda_available() -> bool:
    try:
        return C.nx_cuda_device_count() > 0
    except Exception:
        return False


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--op", action="append", default=[], help="only these ops (repeat, or comma-separated)")
    p.add_argument("--dtype", action="append", default=[],
                   help="only these dtypes (f32, f64, f16, bf16, i32, i64, bool)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="only this device (default: cpu, and cuda when present)")
    p.add_argument("--simd", action="append", default=[],
                   help="CPU SIMD levels (scalar, avx2, avx512; default: the processor's best, then the others)")
    p.add_argument("-v", "--verbose", action="store_true", help="list every op x dtype x device and every skip")
    args = p.parse_args(argv)
    start = time.time()
    torch.manual_seed(0)
    ops = load_registry()
    h = Harness(ops, args.verbose, simd_levels([s for o in args.simd for s in o.split(",") if s]))

    wanted = [n for o in args.op for n in o.split(",") if n]
    dtypes = [d for o in args.dtype for d in o.split(",") if d] or list(ALL_DTYPES)
    has_cuda = cuda_available()
    if args.device == "cuda" and not has_cuda:
        print("op harness: --device cuda but the engine sees no CUDA device")
        return 1
    devices = [args.device] if args.device else ["cpu"] + (["cuda"] if has_cuda else [])
    if has_cuda:
        C.nx_cuda_set_tf32(False)  # f32 matmuls at full precision, like torch's CPU reference

    # registry <-> cases: both directions
    names = wanted or list(ops)
    for n in wanted:
        if n not in ops:
            h.check(f"not in {os.path.relpath(REGISTRY, ROOT)}", f"--op {n}")
    if not wanted:
        for n in op_cases.CASES:
            if n not in ops:
                h.check(f"case for an op that {os.path.relpath(REGISTRY, ROOT)} does not declare", f"case {n}")
    covered = 0
    for n in names:
        if n not in ops:
            continue
        case = op_cases.CASES.get(n)
        if case is None:
            h.check("declared in ops.yaml but has no case in tests/harness/op_cases.py", f"{n}")
            continue
        bad_rules = rule_problems(ops[n])
        if bad_rules:
            h.check(f"{bad_rules} (src/ops/ops.yaml; the rules are listed in its header)", f"{n} output rules")
            continue
        t0 = time.time()
        before_checks, before_fail = h.checks, len(h.failures)
        covered += h.run_op(ops[n], case, dtypes, devices)
        if args.verbose:
            print(f"  {n:<22} {h.checks - before_checks:5d} checks, {len(h.failures) - before_fail} failed "
                  f"({time.time() - t0:.2f}s)", flush=True)
    if args.verbose:
        print(f"devices: {', '.join(devices)} (CPU SIMD levels {', '.join(h.simd_levels)}); checks by mode: "
              f"{', '.join(f'{k} {n}' for k, n in sorted(h.by_mode.items()))}; {len(h.skips)} skipped modes; "
              f"{time.time() - start:.1f}s")
    print(f"op harness: {covered} ops, {h.combos} op x dtype x device cases, {h.checks} checks, "
          f"{len(h.failures)} failed")
    return 0 if not h.failures else 1


if __name__ == "__main__":
    sys.exit(main())
