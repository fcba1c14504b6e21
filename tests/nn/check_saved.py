#!/usr/bin/python3
"""Reads back, in Python, the SafeTensors files NexusGrad wrote during test_nn_io / test_nn_optim:
`check_saved.py FIXTURE_DIR [--package]`.

Default: with st_reader.py (no `safetensors` package needed), every FIXTURE_DIR/saved/*.safetensors
must parse and follow the layout nx_module_save / nx_optimizer_save promise (8-byte little-endian
header size, JSON header padded so the data section is 8-byte aligned, tensors sorted by name, data
offsets tiling the data section); the module files written from torch's weights must hold exactly
torch's tensors (names, dtypes, shapes, bytes); the optimizer files hold torch's AdamW / Adam / SGD
state (exp_avg, exp_avg_sq, the per-parameter step, momentum_buffer) and the step count.

--package: the same files through the reference `safetensors` package (safetensors.numpy and
safetensors.torch), which must agree with st_reader; exits 77 (skipped) when the package is missing.
"""
import glob
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_reader import read_safetensors, to_torch  # noqa: E402

SKIP = 77


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check_layout(path):
    header, meta, tensors = read_safetensors(path)  # validates offsets
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    if (8 + n) % 8:
        fail("%s: the data section starts at %d, not 8-byte aligned" % (path, 8 + n))
    names = list(header.keys())
    by_offset = sorted(names, key=lambda k: header[k]["data_offsets"][0])
    if by_offset != sorted(names):
        fail("%s: tensors are not stored in name order: %s" % (path, by_offset))
    for k, v in meta.items():
        if not isinstance(k, str) or not isinstance(v, str):
            fail("%s: metadata %r: %r is not str -> str" % (path, k, v))
    return header, meta, tensors


def same_tensors(path, ref_path):
    _, _, got = read_safetensors(path)
    _, _, want = read_safetensors(ref_path)
    if sorted(got) != sorted(want):
        fail("%s holds %s, %s holds %s" % (path, sorted(got), ref_path, sorted(want)))
    for name in want:
        if got[name][:2] != want[name][:2]:
            fail("%s: %s is %s %s, torch's is %s %s" % (path, name, got[name][0], got[name][1], want[name][0],
                                                       want[name][1]))
        if got[name][2] != want[name][2]:
            fail("%s: %s: the bytes differ from torch's" % (path, name))
    return len(want)


def check_default(fixdir):
    import torch
    saved = sorted(glob.glob(os.path.join(fixdir, "saved", "*.safetensors")))
    if len(saved) < 10:
        fail("only %d files in %s/saved: did test_nn_io and test_nn_optim run?" % (len(saved), fixdir))
    for p in saved:
        check_layout(p)
    print("layout: %d files written by NexusGrad parse and follow the format" % len(saved))
    for ours, ref in (("gpt_f64", "w_gpt_rope_swiglu_rms_tied_f64"), ("block_f32", "w_block_rope_swiglu_rms_gqa")):
        n = same_tensors(os.path.join(fixdir, "saved", ours + ".safetensors"), os.path.join(fixdir, ref + ".safetensors"))
        print("module: saved/%s.safetensors == torch's %s.safetensors (%d tensors, bytewise)" % (ours, ref, n))
    _, ometa, opt = read_safetensors(os.path.join(fixdir, "optim.safetensors"))
    cases = ometa["optims"].split(",")
    checked = 0
    for case in cases:
        path = os.path.join(fixdir, "saved", "optim_%s.safetensors" % case)
        _, meta, st = read_safetensors(path)
        conf = dict(kv.split("=", 1) for kv in ometa["optim." + case].split(";"))
        kind = conf["kind"]
        want_kind = "SGD" if kind == "sgd" else ("AdamW" if conf["decoupled"] == "1" else "Adam")
        if meta.get("optimizer") != want_kind:
            fail("%s: metadata optimizer=%r, expected %r" % (path, meta.get("optimizer"), want_kind))
        step = to_torch(st["step"])
        if step.dtype != torch.int64 or step.dim() != 0 or int(step) != int(conf["steps"]):
            fail("%s: step is %r, expected %s" % (path, step, conf["steps"]))
        pairs = [("m", "m"), ("v", "v"), ("step", "step")] if kind == "adam" else [("momentum", "buf")]
        expected = {"step"}
        for i in range(int(conf["nparams"])):
            for ours, theirs in pairs:
                key = "%s.%s.%d" % (case, theirs, i)
                if key not in opt:
                    continue
                want = to_torch(opt[key])
                got = to_torch(st["%s.%d" % (ours, i)])
                expected.add("%s.%d" % (ours, i))
                tol = 1e-10 if want.dtype == torch.float64 else 0 if want.dtype == torch.int64 else 1e-5
                if got.dtype != want.dtype or got.shape != want.shape or not torch.allclose(got, want, rtol=tol, atol=tol):
                    fail("%s: %s.%d differs from torch's state (max diff %g)" %
                         (path, ours, i, (got.double() - want.double()).abs().max()))
                checked += 1
        if set(st) != expected:
            fail("%s holds %s, expected %s" % (path, sorted(st), sorted(expected)))
    print("optimizer: %d saved states hold torch's state (%d tensors) and step counts" % (len(cases), checked))


def check_package(fixdir):
    try:
        import numpy as np
        from safetensors.numpy import load_file
        from safetensors import safe_open
    except ImportError as e:
        print("safetensors package not available (%s): skipped" % e)
        sys.exit(SKIP)
    saved = sorted(glob.glob(os.path.join(fixdir, "saved", "*.safetensors")))
    if not saved:
        fail("no files in %s/saved" % fixdir)
    total = 0
    np_dt = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "BOOL": np.bool_}
    for p in saved:
        _, meta, ours = read_safetensors(p)
        theirs = load_file(p)
        if sorted(theirs) != sorted(ours):
            fail("%s: the package sees %s, st_reader %s" % (p, sorted(theirs), sorted(ours)))
        for name, (dt, shape, raw) in ours.items():
            a = theirs[name]
            if a.dtype != np_dt[dt] or list(a.shape) != shape or a.tobytes() != raw:
                fail("%s: %s differs between the package and st_reader" % (p, name))
            total += 1
        with safe_open(p, framework="numpy") as f:
            if (f.metadata() or {}) != meta:
                fail("%s: metadata %r vs %r" % (p, f.metadata(), meta))
    try:
        from safetensors.torch import load_file as load_torch
        for p in saved:
            load_torch(p)
        via_torch = " and safetensors.torch"
    except ImportError:
        via_torch = ""
    import safetensors
    print("safetensors %s: %d files, %d tensors read identically by safetensors.numpy%s and st_reader" %
          (getattr(safetensors, "__version__", "?"), len(saved), total, via_torch))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        raise SystemExit("usage: check_saved.py FIXTURE_DIR [--package]")
    if "--package" in sys.argv:
        check_package(args[0])
    else:
        check_default(args[0])


if __name__ == "__main__":
    main()
