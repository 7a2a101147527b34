"""tests/emu/rewrite_cuda.py: the source rewrite that lets g++ compile CUDA for the emulator.
Launches and `extern __shared__` become calls, each static __shared__ array gets the line that
registers it with the race detector, line numbers stay put, and a declaration the rewrite cannot
register is refused rather than left unchecked."""
import subprocess
import sys

from test_trainer_cli import REPO

SCRIPT = REPO / "tests" / "emu" / "rewrite_cuda.py"


def rewrite(tmp_path, source, expect=0):
    src, dst = tmp_path / "k.cu", tmp_path / "out.cu"
    src.write_text(source)
    p = subprocess.run([sys.executable, str(SCRIPT), str(src), str(dst)], capture_output=True, text=True, timeout=60)
    assert p.returncode == expect, p.stderr
    return dst.read_text() if expect == 0 else p.stderr


KERNEL = """\
template <int N>
static __global__ void k(float* out) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float partial[8][33];
    __shared__ __align__(16) __nv_bfloat16 rows[32 * 8];
    // a comment naming __shared__ float x[4], y[4]; is not a declaration
    const char* s = "nor is __shared__ float a[2], b[2]; in a string";
    out[threadIdx.x] = partial[0][0];
}
void launch(float* out, cudaStream_t st) {
    k<4><<<dim3(2, 1),
           128, 64, st>>>(out);
}
"""


def test_launches_shared_memory_and_line_numbers(tmp_path):
    out = rewrite(tmp_path, KERNEL)
    lines = out.split("\n")
    assert lines[0].startswith('#line 1 "')
    body = lines[1:]
    assert len(body) == len(KERNEL.split("\n")), "the rewrite changed the line count"
    assert body[2].strip() == "unsigned char* smem = static_cast<unsigned char*>(vp_emu::dynamic_smem());"
    assert body[3].strip() == "__shared__ float partial[8][33]; vp_emu::shared_static(partial, sizeof(partial));"
    assert body[4].strip() == "__shared__ __align__(16) __nv_bfloat16 rows[32 * 8]; vp_emu::shared_static(rows, sizeof(rows));"
    assert "shared_static" not in body[5] and "shared_static" not in body[6], "a comment or a string was rewritten"
    launch = " ".join(x.strip() for x in body[10:12])  # it spans the two lines the launch did
    assert launch.startswith("vp_emu::launch(vp_emu::fn_id(k<4>), vp_emu::LaunchConfig(dim3(2, 1), 128, 64, st)"), launch
    assert launch.endswith('"k<4>", k<4>, out);'), launch


def test_two_arrays_in_one_declaration_are_refused(tmp_path):
    err = rewrite(tmp_path, "__global__ void k() {\n    __shared__ float a[4], b[4];\n}\n", expect=1)
    assert "line 2" in err and "one static __shared__ array per statement" in err
