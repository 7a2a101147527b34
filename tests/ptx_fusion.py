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
versions write every such product as __fmul_rn (never fused) or every fused one as fmaf, and this
script checks that their optimised PTX has no such pair left: for each kernel (.entry) whose
mangled name matches --kernels, the count of add.f32 / sub.f32 that read the result of a mul.f32.
--expect-none exits 1 if any matching kernel has one (or if none matches). PyTorch has no
equivalent: its kernels make no bit-identity claims across versions.
"""
import argparse
import re
import sys

# "mul.f32 %f1, %f2, %f3;" or with .ftz; a rounding modifier (mul.rn.f32) is never contracted
_OP = re.compile(r"^\s*(?:@!?%p\d+\s+)?(mul|add|sub)(?:\.ftz)?(?:\.sat)?\.f32\s+(%f\d+)\s*,\s*([^,;]+)\s*,\s*([^,;]+)\s*;", re.M)
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")


def kernels(ptx):
    """(mangled name, body) of each .entry of a PTX file, in order."""
    starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(ptx)]
    return [(name, ptx[pos:starts[i + 1][0] if i + 1 < len(starts) else len(ptx)]) for i, (pos, name) in enumerate(starts)]


def fusable_pairs(body):
    """The add.f32 / sub.f32 lines of a kernel body that read a register a mul.f32 wrote."""
    products = {m.group(2) for m in _OP.finditer(body) if m.group(1) == "mul"}
    return [m.group(0).strip() for m in _OP.finditer(body)
            if m.group(1) in ("add", "sub") and (m.group(3).strip() in products or m.group(4).strip() in products)]


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
              "write them as __fmul_rn, or the fused form as fmaf", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
