"""tests/testing.h, the harness of every C++ test binary, run for real on build/tests/test_gemm: a
filter selects the tests whose names contain it, and a filter that selects none (a misspelt name)
fails with the list of names instead of passing with "0 passed, 0 failed"."""
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GEMM_TESTS = REPO / "build" / "tests" / "test_gemm"


def run(*args):
    r = subprocess.run([str(GEMM_TESTS), *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def test_a_filter_runs_the_tests_it_names():
    rc, out = run("gemm_zero_sizes,gemm_double")
    assert rc == 0, out
    assert "PASS gemm_zero_sizes" in out and "PASS gemm_double_all_layouts" in out
    assert out.rstrip().endswith("2 passed, 0 failed"), out


def test_a_filter_that_matches_no_test_fails_and_lists_the_names():
    rc, out = run("gemm_zero_sise")
    assert rc == 1, out
    assert "no test's name contains 'gemm_zero_sise'" in out
    assert "     gemm_zero_sizes" in out  # the names to pick from
    assert out.rstrip().endswith("0 passed, 1 failed"), out
