#!/usr/bin/env python3
"""tests/ptx_fusion.py: where ptxas may fuse a float multiply and an add into one FMA.

    python3 tests/ptx_fusion.py FILE.ptx [--kernels REGEX] [--expect-none]

PTX's mul.f32, add.f32 and sub.f32 without a rounding modifier (.rn, .rz, ...) may be contracted
by ptxas: a product whose result an add or a sub reads can become one FFMA, rounded once instead
of twice, or not, as ptxas decides for each place of each kernel. Two kernels that run the same
source code can therefore round it differently. It happened on an H200 (2026-11-28): attention
forward version 5's lse differed from version 4's in the last bit, because NVVM fused
"m * ln2 + log(l)" in one of version 5's two m-tiles and not in version 4. The CUDA emulator cannot
see this (its host compiler makes its own choices), so the kernels whose bits are compared across
versions write every such product as mul_unfused (__fmul_rn: never fused) or every fused one as
fmaf, and this script checks that their optimised PTX has no such pair left: for each kernel
(.entry) whose mangled name matches --kernels, the count of add.f32 / sub.f32 that read the result
of a mul.f32 written above it (the latest write of that register). --expect-none exits 1 if any
matching kernel has one (or if none matches). PyTorch has no equivalent: its kernels make no
bit-identity claims across versions.
"""
import argparse
import re
import sys

# "mul.f32 %f1, %f2, %f3;" or with .ftz; a rounding modifier (mul.rn.f32) is never contracted
_OP = re.compile(r"^\s*(?:@!?%p\d+\s+)?(mul|add|sub)(?:\.ftz)?(?:\.sat)?\.f32\s+(%f\d+)\s*,\s*([^,;]+)\s*,\s*([^,;]+)\s*;")
# any instruction's destination register (its first operand), to see a register written again;
# a write inside a vector operand ({%f1, %f2}: ld.v4, wgmma) is not seen, which can only count a
# pair too many, never miss one
_DEF = re.compile(r"^\s*(?:@!?%p\d+\s+)?[a-z][\w.]*\s+(%f\d+)\s*,")
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")


def kernels(ptx):
    """(mangled name, body) of each .entry of a PTX file, in order."""
    starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(ptx)]
    return [(name, ptx[pos:starts[i + 1][0] if i + 1 < len(starts) else len(ptx)]) for i, (pos, name) in enumerate(starts)]


def fusable_pairs(body):
    """The add.f32 / sub.f32 lines of a kernel body that read a register whose latest write above
    them (in the text) is an unrounded mul.f32. ptxas works on the whole function, so a product and
    its sum may sit in different blocks; PTX reuses a register name across a loop's iterations, so
    a read above the product's write in the same loop body is not counted (its value came from
    the write before)."""
    pairs, last_mul = [], {}  # register -> its latest write above is an unrounded mul.f32
    for line in body.splitlines():
        m = _OP.match(line)
        if m and m.group(1) in ("add", "sub") and (last_mul.get(m.group(3).strip()) or last_mul.get(m.group(4).strip())):
            pairs.append(line.strip())
        d = _DEF.match(line)
        if d:
            last_mul[d.group(1)] = bool(m and m.group(1) == "mul")
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ptx")
    ap.add_argument("--kernels", default=".", help="regular expression on the mangled .entry names (default: all)")
    ap.add_argument("--expect-none", action="store_true", help="exit 1 if a matching kernel has a fusable pair, or none matches")
    args = ap.parse_args()
    with open(args.ptx) as f:
        ptx = f.read()
    pick = re.compile(args.kernels)
    matched, bad = 0, 0
    for name, body in kernels(ptx):
        if not pick.search(name):
            continue
        matched += 1
        pairs = fusable_pairs(body)
        bad += bool(pairs)
        print(f"{len(pairs):4d} fusable mul -> add/sub pairs  {name}" + (f"  (first: {pairs[0]})" if pairs else ""))
    if args.expect_none and matched == 0:
        print(f"error: no kernel of {args.ptx} matches {args.kernels!r}", file=sys.stderr)
        return 1
    if args.expect_none and bad:
        print(f"error: {bad} of {matched} kernels have products that ptxas may fuse into an FMA in some kernels and not others: "
              "write them as mul_unfused (kernels/common.cuh), or the fused form as fmaf", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
