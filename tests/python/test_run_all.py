"""tests/run_all.sh, the runner behind `make test`, on stub suites: its totals (pytest's skips and
a GPU suite without a GPU among the skipped), its exit code (a failure, a crash, a suite that ran
no test, a failing pytest), the order it prints in with --jobs, and pytest after the binaries. The stubs are shell scripts in a copy of the runner's tree, with a
stub `.venv/bin/python` for pytest, so nothing here runs a real suite."""
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def write_exe(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def tree(tmp_path):
    """A tree with tests/run_all.sh and a stub pytest (.venv/bin/python) that prints PYTEST_SAYS,
    or "3 passed, 1 skipped", and exits PYTEST_RC (default 0). It notes its arguments and its
    OMP_NUM_THREADS in pytest.args. Asked whether pytest-xdist is there (python -c), it exits
    NO_XDIST (default 0: it is)."""
    (tmp_path / "tests").mkdir()
    shutil.copy(REPO / "tests" / "run_all.sh", tmp_path / "tests" / "run_all.sh")
    write_exe(tmp_path / ".venv" / "bin" / "python", """
[ "$1" = -c ] && exit "${NO_XDIST:-0}"
echo "$* omp=${OMP_NUM_THREADS:-unset}" > pytest.args
echo "${PYTEST_SAYS:-3 passed, 1 skipped in 0.01s}"
exit "${PYTEST_RC:-0}"
""")
    return tmp_path


def suite(tree, name, body):
    write_exe(tree / "bin" / name, body)
    return f"bin/{name}"


def run(tree, *args, env=None):
    e = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    r = subprocess.run(["bash", "tests/run_all.sh", *args], cwd=tree, capture_output=True, text=True, timeout=60,
                       env={**e, **(env or {})})
    return r.returncode, r.stdout + r.stderr


def total(out):
    m = re.findall(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", out, re.M)
    assert m, out
    return tuple(int(x) for x in m[-1])


def test_serial_totals_and_pytest_last(tree):
    a = suite(tree, "a", 'echo "2 passed, 0 failed"')
    b = suite(tree, "b", 'echo "got $1"; echo "4 passed, 0 failed"')
    rc, out = run(tree, a, f"{b}@only_this")
    assert rc == 0, out
    assert total(out) == (9, 0, 1)  # the stub pytest's "1 skipped" is in the total
    assert "got only_this" in out  # BINARY@FILTER passes FILTER
    assert out.index("== bin/a: 2 passed") < out.index("== bin/b@only_this: 4 passed") < out.index("== running pytest tests/python dev/reference")
    assert "== pytest tests/python: 3 passed, 0 failed, 1 skipped" in out


def test_a_failure_a_crash_and_a_silent_suite_each_fail_the_run(tree):
    ok = suite(tree, "ok", 'echo "1 passed, 0 failed"')
    failing = suite(tree, "failing", 'echo "1 passed, 2 failed"; exit 1')
    crash = suite(tree, "crash", 'echo "5 passed, 0 failed"; kill -SEGV $$')
    silent = suite(tree, "silent", "true")
    for bad, fails in [(failing, 2), (crash, 1), (silent, 1)]:
        rc, out = run(tree, ok, bad)
        assert rc != 0, out
        assert total(out)[1] == fails, out
        assert f"failed suites: {bad.split('/')[-1]}" in out.replace("bin/", ""), out
    rc, out = run(tree, "--jobs", "2", ok, crash)
    assert rc != 0 and "killed by signal 11" in out, out


def test_a_failing_pytest_fails_the_run(tree):
    ok = suite(tree, "ok", 'echo "1 passed, 0 failed"')
    for args in ([ok], ["--jobs", "2", ok]):
        rc, out = run(tree, *args, env={"PYTEST_SAYS": "1 failed, 2 passed in 0.1s", "PYTEST_RC": "1"})
        assert rc != 0, out
        assert total(out) == (3, 1, 0), out


def test_jobs_suites_print_in_order_then_pytest(tree):
    # the first --jobs suite waits until the second has started (so both run at once) and ends
    # last; the output still comes in the given order, and pytest runs after them all
    slow = suite(tree, "slow", """for i in $(seq 100); do [ -e fast.started ] && break; sleep 0.1; done
[ -e fast.started ] || { echo "the two suites did not run at once"; exit 1; }
sleep 0.5; echo "omp=$OMP_NUM_THREADS"; echo "1 passed, 0 failed"
""")
    fast = suite(tree, "fast", 'touch fast.started; [ -e pytest.args ] && echo "pytest ran first"; echo "2 passed, 0 failed"')
    first = suite(tree, "first", 'echo "1 passed, 0 failed"')
    rc, out = run(tree, first, "--jobs", "2", slow, fast)
    assert rc == 0, out
    assert "pytest ran first" not in out
    assert total(out) == (7, 0, 1), out
    order = [out.index(s) for s in ("== bin/first:", "== bin/slow:", "== bin/fast:", "== pytest tests/python:")]
    assert order == sorted(order), out
    # the --jobs suites get cores / N threads each; pytest keeps the caller's setting (unset here)
    assert f"omp={max(1, (os.cpu_count() or 2) // 2)}" in out, out
    # one pytest worker per core (pytest-xdist)
    cores = str(len(os.sched_getaffinity(0)))
    assert (tree / "pytest.args").read_text().split() == ["-m", "pytest", "-q", "-rs", "--durations=5", "-n", cores, "tests/python", "dev/reference",
                                                          "omp=unset"]


def test_pytest_without_xdist_runs_one_test_at_a_time_and_says_so(tree):
    rc, out = run(tree, suite(tree, "a", 'echo "1 passed, 0 failed"'), env={"NO_XDIST": "1"})
    assert rc == 0, out
    assert "pytest-xdist is not installed" in out and total(out) == (4, 0, 1), out
    assert (tree / "pytest.args").read_text().split() == ["-m", "pytest", "-q", "-rs", "--durations=5", "tests/python", "dev/reference", "omp=unset"]


def test_pytest_skips_join_the_total_and_never_fail_the_run(tree):
    # pytest's skipped count (from its summary line only: a skip reason printed by -rs may say
    # "skipped" too) adds to the GPU suites skipped without a GPU; a skip leaves the exit code alone
    ok = suite(tree, "ok", 'echo "1 passed, 0 failed"')
    gpu = suite(tree, "gpu", 'echo "skipped: no CUDA device (stub)"')
    says = "SKIPPED [2] tests/python/test_x.py:9: 7 skipped upstream\n5 passed, 2 skipped, 1 warning in 0.5s"
    rc, out = run(tree, ok, gpu, env={"PYTEST_SAYS": says})
    assert rc == 0, out
    assert total(out) == (6, 0, 3), out
    assert "== pytest tests/python: 5 passed, 0 failed, 2 skipped" in out, out
    rc, out = run(tree, ok, env={"PYTEST_SAYS": "1 failed, 2 passed, 4 skipped in 0.1s", "PYTEST_RC": "1"})
    assert rc != 0 and total(out) == (3, 1, 4), out
    rc, out = run(tree, ok, env={"PYTEST_SAYS": "a test's output: 9 skipped rows\n2 passed in 0.1s"})
    assert rc == 0 and total(out) == (3, 0, 0), out


def test_cpp_tests_that_skip_themselves_join_the_total(tree):
    # tests/testing.h's SKIP_TEST: the closing line gains ", N skipped"; a suite whose only test
    # skipped ran no test that failed, and is not "ran no test" either
    mixed = suite(tree, "mixed", 'echo "SKIP x: no such GPU"; echo "3 passed, 0 failed, 2 skipped"')
    only = suite(tree, "only", 'echo "SKIP y: no such GPU"; echo "0 passed, 0 failed, 1 skipped"')
    rc, out = run(tree, mixed, only)
    assert rc == 0, out
    assert total(out) == (6, 0, 4), out  # and the stub pytest's 3 passed, 1 skipped
    assert "== bin/mixed: 3 passed, 0 failed, 2 skipped" in out and "== bin/only: 0 passed, 0 failed, 1 skipped" in out, out
    failing = suite(tree, "failing", 'echo "1 passed, 1 failed, 1 skipped"; exit 1')
    rc, out = run(tree, mixed, failing)
    assert rc != 0 and total(out)[1:] == (1, 4), out


def test_no_python_and_no_venv(tree):
    ok = suite(tree, "ok", 'echo "1 passed, 0 failed"')
    rc, out = run(tree, "--no-python", "--jobs", "2", ok)
    assert rc == 0 and total(out) == (1, 0, 0), out
    assert not (tree / "pytest.args").exists()
    shutil.rmtree(tree / ".venv")
    rc, out = run(tree, "--jobs", "2", ok)
    assert rc != 0 and "no .venv" in out, out
