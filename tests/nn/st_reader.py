"""A small SafeTensors reader (no `safetensors` package, which Debian does not ship), for the
files nx_module_save and nx_optimizer_save write. Standard library only, plus torch for to_torch."""
import json
import struct

# bytes per element
ST_DTYPES = {"F32": 4, "F64": 8, "I32": 4, "I64": 8, "BOOL": 1, "F16": 2, "BF16": 2}


def read_safetensors(path):
    """Returns (header without __metadata__, metadata dict, {name: (dtype, shape, raw bytes)}),
    after validating the layout: 8-byte little-endian header size, a JSON object, data offsets
    that tile the data section from 0 to its end without holes or overlaps."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: shorter than the 8-byte header size" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError("%s: header size %d runs past the end of the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    data = blob[8 + n:]
    spans, tensors = [], {}
    for name, e in header.items():
        dtype, shape, (a, b) = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in ST_DTYPES:
            raise ValueError("%s: %s has unknown dtype %s" % (path, name, dtype))
        count = 1
        for s in shape:
            count *= s
        if b - a != count * ST_DTYPES[dtype] or a < 0 or b > len(data):
            raise ValueError("%s: %s: offsets [%d, %d) do not fit shape %s %s" % (path, name, a, b, shape, dtype))
        spans.append((a, b, name))
        tensors[name] = (dtype, shape, data[a:b])
    spans.sort()
    at = 0
    for a, b, name in spans:
        if a != at:
            raise ValueError("%s: hole or overlap before %s (offset %d, expected %d)" % (path, name, a, at))
        at = b
    if at != len(data):
        raise ValueError("%s: %d trailing bytes after the last tensor" % (path, len(data) - at))
    return header, meta, tensors


def to_torch(entry):
    """A (dtype, shape, raw) entry of read_safetensors as a torch tensor."""
    import torch
    dtype, shape, raw = entry
    tdt = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64,
           "BOOL": torch.bool, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
    if not raw:
        return torch.zeros(shape, dtype=tdt)
    return torch.frombuffer(bytearray(raw), dtype=tdt).reshape(shape).clone()
