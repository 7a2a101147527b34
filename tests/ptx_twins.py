#!/usr/bin/env python3
"""Run ptxas on a "twin" only where its PTX holds something its trainer's does not.

The compile check of a machine without a GPU (gpu.mk, gpu-compile-check-fast: what CI runs) builds
test_gpt of each value path and precision, bench_gpt of vanilla and the -mpi trainer, and compares
each with vanilla's trainer of its precision. They include
train_gpt.cu and call the same launchers, so their device code is the trainer's: about half of each
of those compiles went to ptxas turning the same PTX into the same SASS again. The same holds one
level up: the other paths' trainers and the kernel labs hold vanilla's kernels, and are twins of
vanilla's trainer (so a twin's "trainer" may itself be a twin, every item of which ptxas compiled
in vanilla's or in its own full check). In the check they
embed PTX only (nvcc code=compute_XX, no ptxas) and keep it (nvcc --keep), as the trainer keeps its
own; this script then compares the two, function by function:

  - every top-level item of the twin (each .entry, .func and module-scope variable) present, with
    the same text, in the trainer's PTX: ptxas has already compiled exactly that code for the
    trainer, so there is nothing more to check, and the script says so;
  - anything else (a kernel only a test instantiates, a body that a macro changes): ptxas runs on
    the twin's whole PTX, as the full build would, and its failure fails the build.

Before comparing, what differs between two translation units of the same code is normalised:
.loc/.file debug lines (file numbers differ), comments (whole lines, and the call-sequence numbers
after code, which count the calls of the whole file), -lineinfo's .debug_str table (names, not
code), the function ordinal in labels and local depots, and the per-file prefix nvcc gives the
internal-linkage helpers of the CUDA headers (_ZN39_INTERNAL_<hash>_12_train_gpt_cu_main...).

usage: ptx_twins.py TWIN.ptx TRAINER.ptx --ptxas "ptxas -arch=sm_90a -O0"
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

INTERNAL_PREFIX = re.compile(r"_ZN\d+_INTERNAL_[0-9a-f]+_\d+_\w+?_cu_main")
# Labels and the local-memory depot carry the function's ordinal in the file ($L__BB12_3: block 3 of
# function 12; __local_depot12), which shifts when a file holds one kernel more; both are local to
# the function, and within one the block number alone is unique.
FUNCTION_ORDINAL = re.compile(r"(\$L__BB|\$L__func_end|__local_depot)\d+")
# A comment after code: the call-sequence numbers of unoptimised PTX ("{ // callseq 148, 0") count
# the calls of the whole file, so one kernel more before a function renumbers it.
TRAILING_COMMENT = re.compile(r"\s*//.*$")
NAME = re.compile(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z0-9_$]+)")


def ptx_items(path):
    """{name: [normalised text, ...]} of a PTX file's top-level items (functions, variables)."""
    items = {}
    lines = []
    depth = 0
    with open(path) as f:
        for raw in f:
            stripped = raw.strip()
            if not stripped or stripped.startswith(("//", ".loc", ".file")):
                continue
            if depth == 0 and stripped.startswith((".version", ".target", ".address_size")):
                continue
            code = TRAILING_COMMENT.sub("", raw.rstrip("\n"))
            lines.append(FUNCTION_ORDINAL.sub(r"\1", INTERNAL_PREFIX.sub("_ZN_INTERNAL_main", code)))
            depth += raw.count("{") - raw.count("}")
            if depth == 0 and stripped.endswith(("}", ";")):
                text = "\n".join(lines)
                lines = []
                # -lineinfo's table of function names: data, not code, and it lists every function
                if text.startswith("\t.section\t.debug_"):
                    continue
                match = NAME.search(text)
                items.setdefault(match.group(1) if match else text.split("\n", 1)[0], []).append(text)
    if lines or depth != 0:
        sys.exit(f"ptx_twins.py: {path}: unbalanced braces or a truncated item at the end; "
                 "is it a PTX file that nvcc finished writing? (delete it and rebuild)")
    return items


def not_in_trainer(twin, trainer):
    """Names of the twin's items that the trainer lacks or holds with different text."""
    return sorted(name for name, texts in twin.items()
                  if any(text not in trainer.get(name, ()) for text in texts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("twin_ptx")
    parser.add_argument("trainer_ptx")
    parser.add_argument("--ptxas", required=True, help="the ptxas command line, without input and output")
    args = parser.parse_args()
    command = shlex.split(args.ptxas) + [args.twin_ptx, "-o", "/dev/null"]
    if not os.path.exists(args.trainer_ptx):
        # a trainer built before its PTX was kept (or by hand): the full check, as without twins
        print(f"ptx_twins: {args.twin_ptx}: no {args.trainer_ptx} to compare with (a trainer built before "
              "nvcc kept its PTX): running ptxas on it")
        return subprocess.run(command).returncode
    twin = ptx_items(args.twin_ptx)
    extra = not_in_trainer(twin, ptx_items(args.trainer_ptx))
    if not extra:
        print(f"ptx_twins: {args.twin_ptx}: its {len(twin)} PTX items are all in {args.trainer_ptx}, "
              "whose items ptxas has compiled: ptxas not run again")
        return 0
    shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
    print(f"ptx_twins: {args.twin_ptx}: {len(extra)} PTX items not in {args.trainer_ptx} ({shown}): "
          "running ptxas on it")
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())
