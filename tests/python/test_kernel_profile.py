"""dev/kernel_profile.py: the per-kernel table device_check.sh makes from Nsight Compute's CSV,
checked on a log in ncu's format (its ==PROF== lines and the program's output before the header,
quoted fields, thousands separators, mixed time units)."""
import subprocess
import sys

import pytest

from test_trainer_cli import REPO

SCRIPT = REPO / "dev" / "kernel_profile.py"
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i, kernel, unit, value):
    return (f'"{i}","4242","bench_gpt_vanilla","127.0.0.1","{kernel}","1","7","(128, 1, 1)","(16, 768, 1)","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"')


def run(path, *args, expect=0):
    p = subprocess.run([sys.executable, str(SCRIPT), str(path), *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == expect, p.stderr
    return p


def test_table_per_kernel_and_step(tmp_path):
    att = "void gpu::attention_forward_kernel2<64>(gpu::AttentionArgs)"
    gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas"
    norm = "void gpu::layernorm_forward_kernel2<__nv_bfloat16>(float*, const __nv_bfloat16*, int)"
    launches = [(att, "nsecond", "1,500,000"), (gemm, "usecond", "2,000"), (gemm, "msecond", "1"), (norm, "nsecond", "250,000"),
                (att, "nsecond", "1,500,000"), (gemm, "usecond", "2,000"), (gemm, "msecond", "1"), (norm, "nsecond", "250,000")]
    log = tmp_path / "ncu.csv"
    log.write_text("==PROF== Connected to process 4242\nbench_gpt: bf16 gpt2 L=12\n" + HEADER + "\n" +
                   "\n".join(row(i, *x) for i, x in enumerate(launches)) + "\n==PROF== Disconnected from process 4242\n")
    out = run(log, "--steps", "2").stdout.splitlines()
    # per step: gemm 2 + 1 = 3 ms (2 calls), attention 1.5 ms, layernorm 0.25 ms; total 4.75 ms
    assert out[0] == "kernel time per step (ncu, kernels serialised): 4.75 ms over 4 launches"
    assert out[4] == f"| `{gemm}` | 2 | 3.000 | 63.2% |"
    assert out[5] == "| `attention_forward_kernel2<64>` | 1 | 1.500 | 31.6% |"
    assert out[6] == "| `layernorm_forward_kernel2<__nv_bfloat16>` | 1 | 0.250 | 5.3% |"
    out = run(log, "--steps", "2", "--top", "1").stdout.splitlines()
    assert out[-1] == "| 2 other kernels | 2 | 1.750 | 36.8% |"
    assert run(log, "--steps", "2", "--top", "2", "--brief").stdout == \
        f"4.75 ms over 4 launches; largest: {gemm} 3.000 ms; attention_forward_kernel2<64> 1.500 ms\n"


@pytest.mark.parametrize("text, message", [
    ("bench_gpt: no profile here\n", 'no ncu CSV header'),
    (HEADER.replace('"Metric Unit",', '') + "\n", "has no column 'Metric Unit'"),
    (HEADER + "\n" + row(0, "k", "furlong", "1"), "unknown time unit 'furlong'"),
])
def test_not_an_ncu_log_is_an_error(tmp_path, text, message):
    log = tmp_path / "bad.csv"
    log.write_text(text)
    assert message in run(log, expect=1).stderr
