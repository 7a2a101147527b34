"""tests/ptx_fusion.py: the attention kernels whose results are compared bit for bit across versions
(the forward's 2, 4 and 5 with each other; the backward's 2, 3, 4 and 6) must leave ptxas no
multiply-add to fuse in one kernel and not another. The script's analysis is checked on
hand-written PTX; then the backward lab (which has every attention kernel) is compiled as nvcc -O3
compiles the trainer and its kernels checked. The latter needs nvcc, which CI has; it takes about
25 s."""
import os
import shutil
import subprocess
import sys

import pytest

from test_trainer_cli import REPO

SCRIPT = REPO / "tests" / "ptx_fusion.py"

PTX = """.visible .entry _ZN3gpu7kernelAEv(
)
{
\tmul.f32 \t%f3, %f1, %f2;
\tmul.rn.f32 \t%f4, %f1, %f2;
\tadd.f32 \t%f5, %f4, %f1;
\tsub.f32 \t%f6, %f3, %f1;
\tadd.rn.f32 \t%f7, %f3, %f1;
\tret;
}
.visible .entry _ZN3gpu7kernelBEv(
)
{
\tmul.rn.f32 \t%f3, %f1, 0f3F317218;
\tadd.f32 \t%f5, %f1, %f3;
\tfma.rn.f32 \t%f6, %f3, %f1, %f2;
$L__BB1_2:
\tsub.f32 \t%f7, %f8, %f2;
\tmul.f32 \t%f8, %f7, %f1;
\tmov.f32 \t%f9, %f8;
\tld.shared.f32 \t%f8, [%r1];
\tadd.f32 \t%f10, %f8, %f1;
\tbra.uni \t$L__BB1_2;
}
"""


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_pairs_are_products_read_by_an_unrounded_add_or_sub(tmp_path):
    """kernelA: mul.f32 read by sub.f32 is one pair; the add.rn.f32 reading it and the add.f32 reading
    a mul.rn.f32 are not. kernelB has none: rounded products, and a loop whose sub reads %f8 above
    the mul.f32 that writes it (the value of the iteration before, not that product) and whose add
    reads %f8 after a load wrote it again. --expect-none fails on A alone."""
    sys.path.insert(0, str(REPO / "tests"))
    import ptx_fusion
    ks = dict(ptx_fusion.kernels(PTX))
    assert list(ks) == ["_ZN3gpu7kernelAEv", "_ZN3gpu7kernelBEv"]
    assert ptx_fusion.fusable_pairs(ks["_ZN3gpu7kernelAEv"]) == ["sub.f32 \t%f6, %f3, %f1;"]
    assert ptx_fusion.fusable_pairs(ks["_ZN3gpu7kernelBEv"]) == []
    f = tmp_path / "k.ptx"
    f.write_text(PTX)
    assert run(f, "--kernels", "kernelB", "--expect-none").returncode == 0
    p = run(f, "--expect-none")
    assert p.returncode == 1 and "1 of 2 kernels" in p.stderr, p.stdout + p.stderr
    p = run(f, "--kernels", "nothing", "--expect-none")
    assert p.returncode == 1 and "no kernel" in p.stderr


def nvcc():
    return shutil.which("nvcc") or next((p for p in ["/usr/local/cuda/bin/nvcc"] if os.access(p, os.X_OK)), None)


@pytest.mark.skipif(nvcc() is None, reason="needs nvcc (CI has it)")
def test_attention_kernels_leave_nothing_to_fuse(tmp_path):
    """The backward lab (which has every attention kernel) as nvcc -O3 compiles the trainer for
    sm_90a: no product that an add or a sub reads unrounded in any tensor-core forward kernel
    (attention_forward_kernel2: versions 2, 4, 5 at each head dim they run; attention_forward_kernel6:
    versions 6 and 7), dQ kernel or dK/dV kernel (versions 2/3/4, 6 and 7, and dQ version 8 with its
    dK/dV kernels that store dS^T). Before 2026-11-28
    versions 2 and 4 of the forward had 31 such pairs a kernel and version 5 two (NVVM had fused
    the rest): that is how their lse came to differ on an H200; the dQ kernels had 32
    (s sl2 - lse), the dK/dV kernels 24 to 96 (that, and the write-out's dk scale and routed sums)."""
    ptx = tmp_path / "attention_backward.ptx"
    subprocess.run([nvcc(), "-O3", "-std=c++17", "-diag-suppress", "1675,550", "-arch=sm_90a", "-I.", "-DENABLE_BF16", "-ptx",
                    "dev/cuda/attention_backward.cu", "-o", str(ptx)], cwd=REPO, check=True, capture_output=True)
    p = run(ptx, "--kernels", "attention_(forward|backward_dq|backward_dkdv)_kernel[268]", "--expect-none")
    assert p.returncode == 0, p.stdout + p.stderr
    # forward: versions 2 and 4 at head dims 16, 32, 64, 128, version 5 at 16, 32, 64 (128 runs
    # version 4), versions 6 and 7; dQ: versions 2 and 4 at each head dim, 6 and 7, and 8 at each head dim;
    # dK/dV: versions 2 (64 queries a step) and 3/4 (16), each with and without cp.async where built, at each
    # head dim, 6 and 7, and the dS^T-storing kernels of dQ version 8 (4 at each head dim, 6 and 7,
    # and 4 without cp.async at head dim 128, where a block may not have the 103 KiB of the
    # double-buffered one: RTX 30xx-50xx, att2_backward_async_fits)
    assert p.stdout.count("attention_forward_kernel2") == 11 and p.stdout.count("attention_forward_kernel6") == 2, p.stdout
    assert p.stdout.count("attention_backward_dq_kernel2") == 8 and p.stdout.count("attention_backward_dq_kernel6") == 2, p.stdout
    assert p.stdout.count("attention_backward_dq_kernel8") == 4, p.stdout
    assert p.stdout.count("attention_backward_dkdv_kernel2") == 17 and p.stdout.count("attention_backward_dkdv_kernel6") == 4, p.stdout
