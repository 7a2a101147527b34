#!/usr/bin/env python3
"""Rewrite CUDA source so that g++ can compile it against the CUDA emulator (tests/emu/cuda_emu.h).

Two constructs have no C++ spelling and are rewritten here, and one gets a line added; everything
else is handled by macros and functions in cuda_emu.h:

    kernel<T><<<grid, block, smem, stream>>>(args);
 -> vp_emu::launch(vp_emu::fn_id(kernel<T>), vp_emu::LaunchConfig(grid, block, smem, stream),
                   "kernel<T>", kernel<T>, args);

    extern __shared__ __align__(16) unsigned char smem[];
 -> unsigned char* smem = static_cast<unsigned char*>(vp_emu::dynamic_smem());

    __shared__ float partial[8][33];
 -> __shared__ float partial[8][33]; vp_emu::shared_static(partial, sizeof(partial));
    (the race detector's record of where the block's static shared memory is; a no-op otherwise)

Line numbers are kept (a #line directive names the original file, and rewritten text spans the
same lines), so compiler errors, assert messages and __FILE__/__LINE__ point at the real source.

usage: rewrite_cuda.py SRC DST
"""
import re
import sys

EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w\s]*?)\s+(\w+)\s*\[\s*\]\s*;")
STATIC_SHARED = re.compile(r"(?<![\w])__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?[A-Za-z_][\w:<>\s]*?\s+(\w+)\s*(?:\[[^\]\n]*\]\s*)+;")
CALLEE_TAIL = re.compile(r"([A-Za-z_][\w:]*)\s*$")


def matching(text, start, open_ch, close_ch):
    """index just past the bracket that closes the one at text[start]"""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
    raise SyntaxError(f"unbalanced {open_ch} at offset {start}")


def callee_start(text, end):
    """start of the kernel expression that ends at `end` (a name, with template arguments or not)"""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if text[i - 1] == ">":  # template arguments: walk back to the matching '<'
        depth = 0
        j = i - 1
        while j >= 0:
            if text[j] == ">":
                depth += 1
            elif text[j] == "<":
                depth -= 1
                if depth == 0:
                    break
            j -= 1
        i = j
    m = CALLEE_TAIL.search(text, 0, i)
    if not m:
        raise SyntaxError(f"no kernel name before <<< at offset {end}")
    return m.start(1)


def rewrite_launches(text, path):
    out, pos = [], 0
    while True:
        lt = text.find("<<<", pos)
        if lt < 0:
            break
        cs = callee_start(text, lt)
        callee = text[cs:lt].strip()
        gt = text.find(">>>", lt)
        config = text[lt + 3 : gt]
        ap = gt + 3
        while text[ap].isspace():
            ap += 1
        if text[ap] != "(":
            raise SyntaxError(f"{path}: no argument list after >>> at offset {gt}")
        ae = matching(text, ap, "(", ")")
        args = text[ap + 1 : ae - 1]
        one_line = lambda s: " ".join(s.split())
        replaced = text[cs:ae]
        # the kernel's arguments are evaluated here, at the launch, as CUDA does (the launch may run
        # later, when its stream gets to it: see "Streams" in cuda_emu.h)
        new = (f'vp_emu::launch(vp_emu::fn_id({callee}), vp_emu::LaunchConfig({config}), "{one_line(callee)}", '
               f"{callee}{', ' + args if args.strip() else ''})")
        new += "\n" * (replaced.count("\n") - new.count("\n"))  # keep the line count
        out.append(text[pos:cs])
        out.append(new)
        pos = ae
    out.append(text[pos:])
    return "".join(out)


def rewrite(text, path):
    text = EXTERN_SHARED.sub(lambda m: f"{m.group(1).strip()}* {m.group(2)} = static_cast<{m.group(1).strip()}*>(vp_emu::dynamic_smem());", text)
    text = STATIC_SHARED.sub(lambda m: f"{m.group(0)} vp_emu::shared_static({m.group(1)}, sizeof({m.group(1)}));", text)
    for n, line in enumerate(text.split("\n"), 1):  # a declaration the pattern missed would go unchecked
        code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line).split("//")[0]  # not in strings or comments
        if "__shared__" in code and "shared_static" not in code:
            raise SyntaxError(f"line {n}: declare one static __shared__ array per statement, as `__shared__ T name[N];`")
    text = rewrite_launches(text, path)
    return f'#line 1 "{path}"\n' + text


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    try:
        result = rewrite(text, src)
    except SyntaxError as e:
        sys.exit(f"rewrite_cuda.py: {src}: {e}")
    with open(dst, "w") as f:
        f.write(result)


if __name__ == "__main__":
    main()
