#!/usr/bin/env python3
"""The instruction mix of a kernel's basic blocks, from a SASS listing (cuobjdump -sass).

usage: scripts/sass_block_mix.py LISTING KERNEL_SUBSTRING [--min N]

Splits the first kernel whose mangled name contains KERNEL_SUBSTRING at branch targets and after
branches, and prints each block of at least N instructions (default 40): its address, its length
and its opcodes by count. A static count, not a profile: which blocks run how often is the
reader's part (e.g. a flash kernel's unmasked softmax block runs once per tile). To get a listing
without a GPU: compile the file as the build does (scripts/device_code_diff.sh shows how; its
cuobjdump lands in build-tools/), then `cuobjdump -sass OBJECT > LISTING`.
"""
import argparse
import collections
import re


def kernel_lines(path, key):
    lines, name = [], None
    for line in open(path):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if lines:
                break
            name = m.group(1)
            continue
        if name and key in name:
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if m:
                lines.append((int(m.group(1), 16), m.group(2)))
    return lines


def opcode(ins):
    words = ins.split()
    return (words[1] if words[0].startswith("@") else words[0]).split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("listing")
    ap.add_argument("kernel")
    ap.add_argument("--min", type=int, default=40)
    args = ap.parse_args()
    lines = kernel_lines(args.listing, args.kernel)
    if not lines:
        raise SystemExit(f"no kernel matching {args.kernel!r} in {args.listing}")
    targets = {int(m.group(1), 16) for _, ins in lines for m in [re.search(r"BRA\s+(?:\S+\s+)?0x([0-9a-f]+)", ins)] if m}
    blocks, block = [], []  # each a list of (address, instruction)
    for addr, ins in lines:
        if addr in targets and block:
            blocks.append(block)
            block = []
        block.append((addr, ins))
        if re.match(r"(@!?U?P\w+\s+)?(BRA|EXIT|RET)\b", ins):
            blocks.append(block)
            block = []
    if block:
        blocks.append(block)
    print(f"{len(lines)} instructions, {len(blocks)} blocks")
    for b in blocks:
        if len(b) >= args.min:
            mix = collections.Counter(opcode(ins) for _, ins in b)
            print(f"{b[0][0]:#07x} {len(b):5d}  " + " ".join(f"{k}:{v}" for k, v in mix.most_common(12)))

if __name__ == "__main__":
    main()
