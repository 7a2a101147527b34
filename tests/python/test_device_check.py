"""dev/device_check.sh, the one script a GPU session runs, checked here so that a mistake in its
own logic does not cost scarce device time: the summary it writes, a failing test binary run again
with CUDA_LAUNCH_BLOCKING=1, and steps that run out of time reported as such, not as failures."""
import os
import re
import shutil
import subprocess

import pytest

from test_trainer_cli import REPO

SCRIPT = REPO / "dev" / "device_check.sh"
QUIET = {"SKIP_DIST": "1", "SKIP_BENCH": "1", "SKIP_CLI": "1", "SKIP_LABS": "1", "ONLY_PATHS": "vanilla", "JOBS": "2"}
# The tests that run real binaries do so without a GPU (they skip where one is present), so they use
# what make test compiled there: the unoptimized GPU binaries of build/check (gpu.mk GPU_BUILD)
GPU_BUILD = "build/check"
REAL = {**QUIET, "GPU_BUILD": GPU_BUILD}


def has_gpu():
    return shutil.which("nvidia-smi") is not None and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def device_check(out, env):
    p = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OUT": str(out), "COMMIT": "test", **env})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    summary = (out / "summary.md").read_text()
    rows = {}
    for line in summary.splitlines():
        if line.startswith("| ") and not line.startswith(("| check |", "| --- |")):
            k, v = line[2:].rstrip().rstrip("|").rstrip().split(" | ", 1)
            rows[k] = v
    return summary, rows


def stub(d, name, lines, code):
    f = d / name
    f.write_text("#!/bin/sh\n" + "".join(f'echo "{ln}"\n' for ln in lines) + f"exit {code}\n")
    f.chmod(0o755)


@pytest.mark.skipif(has_gpu(), reason="a GPU is present: the script would run every test for real")
def test_summary_without_a_gpu(tmp_path):
    built = [REPO / GPU_BUILD / "tests" / f"test_gpt_gpu_vanilla_{p}" for p in ("bf16", "fp32")]
    if not all(b.exists() for b in built):
        pytest.skip(f"the GPU test binaries are not built in {GPU_BUILD} (make gpu-compile-check-fast needs nvcc)")
    summary, rows = device_check(tmp_path, REAL)
    assert "- commit: test" in summary and "| check | result |" in summary
    assert rows["build: 2 targets (sm_90a)"] == "ok"
    assert rows["test_gpt vanilla bf16"] == rows["test_gpt vanilla fp32"] == "skipped: no CUDA device"
    assert not (tmp_path / "summary.md.tmp").exists()
    assert len(os.listdir(tmp_path)) <= 8  # the device tool brings back at most 8 files


def test_a_failing_binary_is_rerun_with_launch_blocking(tmp_path):
    bins = tmp_path / "bins"
    bins.mkdir()
    stub(bins, "test_gpt_gpu_vanilla_bf16", ["FAIL forward_backward", "     test_gpt.cu:9: CHECK(ok) launch blocking=$CUDA_LAUNCH_BLOCKING",
                                             "0 passed, 1 failed"], 1)
    stub(bins, "test_gpt_gpu_vanilla_fp32", ["PASS forward_backward", "1 passed, 0 failed"], 0)
    out = tmp_path / "out"
    out.mkdir()
    _, rows = device_check(out, {**QUIET, "TEST_GPT_DIR": str(bins), "SKIP_BUILD": "1", "TIME_LIMIT": "200"})
    assert rows["test_gpt vanilla bf16"] == "FAILED (exit 1) (0 passed, 1 failed)"
    assert rows["test_gpt vanilla fp32"] == "ok (1 passed, 0 failed)"
    rerun = rows[f"rerun of {bins}/test_gpt_gpu_vanilla_bf16, CUDA_LAUNCH_BLOCKING=1"]
    assert "CHECK(ok) launch blocking=1" in rerun
    # the last row: each step's seconds, what the next device session plans its call by
    (times_key, times), = [(k, v) for k, v in rows.items() if k.startswith("seconds per step")]
    assert re.fullmatch(r"seconds per step, \d+ s in all", times_key)
    # (then step 2b: the bf16 suite again with the kernels the defaults leave out: attention version 4, BGRADB)
    assert re.fullmatch(r"test_gpt vanilla bf16 \d+s; rerun .*; test_gpt vanilla fp32 \d+s; test_gpt vanilla bf16 other kernels \d+s", times)
    assert rows["test_gpt vanilla bf16, other kernels"] == "FAILED (exit 1) (0 passed, 1 failed)"


def tree_copy(dst):
    """The tree as the device tool sends it: tracked and untracked files that git does not ignore."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, dst / f)
    return dst


@pytest.mark.skipif(shutil.which("xz") is None, reason="no xz for tar -J")
def test_a_bundle_is_used_only_for_its_own_sources(tmp_path):
    tree = tree_copy(tmp_path / "tree")
    src = tmp_path / "bundle"
    (src / "build" / "tests").mkdir(parents=True)
    for p in ("bf16", "fp32"):
        stub(src / "build" / "tests", f"test_gpt_gpu_vanilla_{p}", [f"PASS {p} from the bundle", "1 passed, 0 failed"], 0)
    # Open MPI as dev/device_bundle.sh adds it (the device image has none): its files are not
    # counted as binaries, and its mpirun comes first on PATH
    (src / "build" / "openmpi" / "bin").mkdir(parents=True)
    stub(src / "build" / "openmpi" / "bin", "mpirun", ["mpirun (Open MPI) 5.0.11"], 0)
    digest = subprocess.run(["bash", "dev/device_bundle.sh", "--hash"], cwd=tree, capture_output=True, text=True, check=True).stdout.strip()
    (src / "build" / "device_bundle.sources").write_text(digest + "\n")
    bundle = tmp_path / "bundle.tar.xz"
    subprocess.run(["tar", "-cJf", str(bundle), "-C", str(src), "build"], check=True)
    script = tree / "dev" / "device_check.sh"
    env = {**QUIET, "DEVICE_BUNDLE": str(bundle), "TIME_LIMIT": "200"}

    def run(out):
        out.mkdir()
        p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "OUT": str(out), "COMMIT": "test", **env})
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        return (out / "summary.md").read_text()

    summary = run(tmp_path / "out1")
    assert f"| build | from the bundle: 2 binaries built off the device from these sources ({digest[:12]}) |" in summary
    assert "| test_gpt vanilla bf16 | ok (1 passed, 0 failed) |" in summary
    assert "PASS bf16 from the bundle" in (tmp_path / "out1" / "test_gpt.log").read_text()
    assert "| MPI | mpirun (Open MPI) 5.0.11 in build/openmpi (brought by dev/device_bundle.sh) |" in summary
    # a source changed after the bundle was made: the bundle is refused (and the build is skipped
    # here only to keep this test from compiling)
    with open(tree / "kernels" / "gelu.cuh", "a") as f:
        f.write("// changed\n")
    env["SKIP_BUILD"] = "1"
    summary = run(tmp_path / "out2")
    assert f"| bundle {bundle} | not used: built from other sources ({digest[:12]} != " in summary
    assert "from the bundle" not in summary


def test_out_of_time_is_not_a_failure(tmp_path):
    bins = tmp_path / "bins"
    bins.mkdir()
    for p in ("bf16", "fp32"):
        stub(bins, f"test_gpt_gpu_vanilla_{p}", ["1 passed, 0 failed"], 0)
    out = tmp_path / "out"
    out.mkdir()
    _, rows = device_check(out, {**QUIET, "TEST_GPT_DIR": str(bins), "TIME_LIMIT": "0"})
    assert rows["build: 2 targets (sm_90a)"].startswith("skipped: out of time")
    assert rows["test_gpt vanilla bf16"].startswith("skipped: out of time")
    assert not any("FAILED" in v for v in rows.values())


@pytest.mark.skipif(has_gpu(), reason="a GPU is present: the script would run the benchmarks for real")
def test_bench_parts_run_only_what_they_name(tmp_path):
    """BENCH_PARTS=attention (a call that only times the attention versions): steps 4, 8 and 9 stay
    out, and step 7 runs both labs and its A/B of the benchmark step (version 2/3 against the trainer's
    4 in one process, which needs nothing of step 4), not the memory-bound labs; BENCH_PARTS=memory
    runs only those. Without a GPU every binary says it skipped, so the comparison row says so."""
    built = [REPO / GPU_BUILD / "dev" / "cuda" / "bf16" / b for b in ("attention_forward", "attention_backward", "bench_gpt_vanilla", "layernorm", "rmsnorm", "gelu", "depth_attention")]
    if not all(b.exists() for b in built):
        pytest.skip(f"the GPU lab and bench binaries are not built in {GPU_BUILD} (make gpu-compile-check-fast needs nvcc)")
    env = {**REAL, "SKIP_TESTS": "1", "SKIP_BUILD": "1", "TIME_LIMIT": "200"}
    del env["SKIP_BENCH"]
    out = tmp_path / "out"
    out.mkdir()
    summary, rows = device_check(out, {**env, "BENCH_PARTS": "attention"})
    assert rows["step with attention version 2/3"] == "did not finish (see bench.txt)"
    bench = (out / "bench.txt").read_text()
    assert "== bench_gpt_vanilla --attention-version 2: A/B in one process" in bench and "(attention version 4)" not in bench
    assert "== make bench" not in bench and "ncu" not in summary
    timed = (out / "labs_timed.log").read_text()
    assert "== lab attention_forward (timed)" in timed and "== lab attention_backward (timed)" in timed
    assert "== lab layernorm (timed)" not in timed
    assert len(os.listdir(out)) <= 8
    # BENCH_PARTS=memory: only the memory-bound labs, into the same log; no bench step
    out3 = tmp_path / "out3"
    out3.mkdir()
    device_check(out3, {**env, "BENCH_PARTS": "memory"})
    timed3 = (out3 / "labs_timed.log").read_text()
    assert all(f"== lab {lab} (timed)" in timed3 for lab in ("layernorm", "rmsnorm", "gelu", "depth_attention"))
    assert "attention_forward" not in timed3 and "attention_backward" not in timed3 and not (out3 / "bench.txt").exists()
    # SKIP_BENCH=1 overrides BENCH_PARTS: nothing of steps 4, 7, 8, 9
    out2 = tmp_path / "out2"
    out2.mkdir()
    _, rows2 = device_check(out2, {**env, "SKIP_BENCH": "1", "BENCH_PARTS": "attention profile"})
    assert not (out2 / "bench.txt").exists() and not (out2 / "labs_timed.log").exists()
    assert "step with attention version 2/3" not in rows2


def test_continue_runs_only_what_the_first_call_left(tmp_path):
    """CONTINUE=1, the second call on a warm machine: a unit with a verdict in the first call (here a
    test binary that passed) is not run again and its row is copied, marked; a unit cut off there
    (a binary that exits 124, as timeout does) runs. State from other sources is not trusted."""
    bins = tmp_path / "bins"
    bins.mkdir()
    runs = tmp_path / "bf16_runs"
    passing = '#!/bin/sh\necho run >> "{}"\necho "1 passed, 0 failed"\nexit 0\n'
    (bins / "test_gpt_gpu_vanilla_bf16").write_text(passing.format(runs))
    stub(bins, "test_gpt_gpu_vanilla_fp32", ["0 passed, 0 failed"], 124)
    for f in bins.iterdir():
        f.chmod(0o755)
    state = tmp_path / "state"
    env = {**QUIET, "TEST_GPT_DIR": str(bins), "SKIP_BUILD": "1", "TIME_LIMIT": "200", "STATE_DIR": str(state)}

    def call(name, **extra):
        out = tmp_path / name
        out.mkdir()
        return device_check(out, {**env, **extra})[1]

    rows = call("out1")
    assert rows["test_gpt vanilla bf16"] == "ok (1 passed, 0 failed)"
    assert rows["test_gpt vanilla bf16, other kernels"] == "ok (1 passed, 0 failed)"  # step 2b: the same binary
    assert rows["test_gpt vanilla fp32"].startswith("TIMED OUT")
    assert runs.read_text().count("run") == 2
    stub(bins, "test_gpt_gpu_vanilla_fp32", ["1 passed, 0 failed"], 0)
    rows = call("out2", CONTINUE="1")
    assert rows["CONTINUE=1"].endswith("its 2 finished units are not run again")
    assert rows["test_gpt vanilla bf16"] == "ok (1 passed, 0 failed) (earlier call)"
    assert rows["test_gpt vanilla fp32"] == "ok (1 passed, 0 failed)"
    assert runs.read_text().count("run") == 2
    # the record is of other sources (the tree changed between the calls): everything runs again
    (state / "sources").write_text("0" * 64 + "\n")
    rows = call("out3", CONTINUE="1")
    assert rows["CONTINUE=1"].startswith("no earlier call of these sources")
    assert rows["test_gpt vanilla bf16"] == "ok (1 passed, 0 failed)"
    assert runs.read_text().count("run") == 4


def variant_stubs(tmp_path):
    """Stand-in benchmarks for step 4b: the plain bench_gpt of each path the variants of
    dev/bench_variants.list use, and a build of each variant without bench_gpt flags. Each prints
    the BENCH line of dev/cuda/bench_gpt.cu (the plain one 140.0 ms, a variant 133.0) and records
    its label in order; the plain one run with --ab-rounds R and flags (a variant that is bench_gpt
    flags) records the flags and prints bench_gpt's BENCH_AB line instead (133.0 against 140.0 in
    R rounds of 5 steps). Returns the build folder, the order file, the variants' paths and labels."""
    lines = [ln.split("|") for ln in (REPO / "dev" / "bench_variants.list").read_text().splitlines() if re.match(r"[a-z]", ln)]
    paths = {f[0].strip(): (f[3].strip() if len(f) > 3 and f[3].strip() else "vanilla") for f in lines}
    run_flags = {f[0].strip(): (f[4].strip() if len(f) > 4 else "") for f in lines}
    assert paths, "dev/bench_variants.list names no variant"
    gb = tmp_path / "gpu_build"
    order = tmp_path / "order"

    def bench_stub(path, label, ms):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'#!/bin/sh\nms={ms}\nlabel={label}\nshift 4\n'
                        f'if [ "$1" = --ab-rounds ]; then rounds=$2; shift 2; echo "flags:$(echo "$*" | tr " " _)" >> "{order}"\n'
                        f'  echo "BENCH_AB impl=valuepath path=vanilla B=64 T=1024 variant_ms=133.000 plain_ms=140.000 ratio=0.9500 '
                        f'rounds=$rounds steps_per_round=5 bias_grad_refused=0"; exit 0; fi\n'
                        f'if [ $# -gt 0 ]; then label="flags:$(echo "$*" | tr " " _)"; ms=133.0; fi\n'
                        f'echo "$label" >> "{order}"\n'
                        f'echo "BENCH impl=valuepath path=vanilla precision=bf16 B=64 T=1024 ms_per_step=$ms tok_per_s=1"\n')
        path.chmod(0o755)

    for p in set(paths.values()):
        bench_stub(gb / "dev" / "cuda" / "bf16" / f"bench_gpt_{p}", "plain", "140.0")
    for v in paths:
        if not run_flags[v]:
            bench_stub(gb / "variants" / v / "bench_gpt", v, "133.0")
    label = {v: ("flags:" + run_flags[v].replace(" ", "_")) if run_flags[v] else v for v in paths}
    env = {**QUIET, "SKIP_TESTS": "1", "SKIP_BUILD": "1", "GPU_BUILD": str(gb), "BENCH_PARTS": "variants", "TIME_LIMIT": "200"}
    del env["SKIP_BENCH"]
    return env, order, paths, label


def expected_variant(v, label, by_flags):
    """What step 4b runs for variant v (the order file's labels) and the figures its row gives:
    a variant that is bench_gpt flags, one A/B process; a build of its own, four runs alternating."""
    if by_flags:
        return [label[v]], "133.000 ms/step against the plain way's 140.000 in one process (ratio 0.9500; 4 rounds of 5 steps each way, ABBA)"
    return [label[v], "plain", label[v], "plain"], "133.0 and 133.0 ms/step against the plain build's 140.0 and 140.0 (mean ratio 0.950)"


def test_build_variants_are_timed_against_the_plain_build(tmp_path):
    """Step 4b: every variant of dev/bench_variants.list with a build of its own runs alternately
    with its path's plain benchmark (the fourth column, vanilla if left out), twice each, and its
    row gives both pairs of figures and the ratio of their means. A variant with bench_gpt flags
    (the fifth column) runs once, as the plain binary's A/B of those flags (--ab-rounds 4), and its
    row gives that run's two medians and their ratio."""
    env, order, paths, label = variant_stubs(tmp_path)
    names = list(paths)
    by_flags = {v: label[v].startswith("flags:") for v in names}
    assert any(by_flags.values()) and not all(by_flags.values()), "the list should have variants of both kinds"
    out = tmp_path / "out"
    out.mkdir()
    _, rows = device_check(out, env)
    for v in names:
        assert rows[f"variant {v} ({paths[v]}, B=64 T=1024)"] == expected_variant(v, label, by_flags[v])[1]
    assert order.read_text().split() == [x for v in names for x in expected_variant(v, label, by_flags[v])[0]]
    bench = (out / "bench.txt").read_text()
    assert "ms_per_step=133.0" in bench and "BENCH_AB " in bench


def test_variant_row_says_where_cublaslt_refused_bgradb(tmp_path):
    """A bench_gpt run with --bias-grad-epilogue 1 counts in its BENCH line the GEMM shapes for
    which cuBLASLt had no BGRADB algorithm (bias_grad_refused); there the bias gradient kept its
    own pass, so the variant bias_bgradb's row must say so next to its figures."""
    env, order, paths, label = variant_stubs(tmp_path)
    assert paths.get("bias_bgradb") == "vanilla"
    plain = tmp_path / "gpu_build" / "dev" / "cuda" / "bf16" / "bench_gpt_vanilla"
    plain.write_text('#!/bin/sh\n'
                     'case "$*" in *"--ab-rounds 4 --bias-grad-epilogue 1"*) echo "BENCH_AB impl=valuepath path=vanilla B=64 T=1024 variant_ms=133.000 '
                     'plain_ms=140.000 ratio=0.9500 rounds=4 steps_per_round=5 bias_grad_refused=3";; esac\n')
    out = tmp_path / "out"
    out.mkdir()
    _, rows = device_check(out, {**env, "ONLY_VARIANTS": "bias_bgradb"})
    assert rows["variant bias_bgradb (vanilla, B=64 T=1024)"] == \
        "133.000 ms/step against the plain way's 140.000 in one process (ratio 0.9500; 4 rounds of 5 steps each way, ABBA); " \
        "cuBLASLt had no BGRADB for 3 GEMM shapes"


def test_ab_run_without_its_line_is_a_failure(tmp_path):
    """An A/B run (a variant that is bench_gpt flags) that exits 0 without its BENCH_AB line has
    measured nothing: its row must say FAILED, not ok."""
    env, order, paths, label = variant_stubs(tmp_path)
    plain = tmp_path / "gpu_build" / "dev" / "cuda" / "bf16" / "bench_gpt_vanilla"
    plain.write_text('#!/bin/sh\necho "median over 20 steps: 140.00 ms/step"\n')
    out = tmp_path / "out"
    out.mkdir()
    _, rows = device_check(out, {**env, "ONLY_VARIANTS": "att_fwd5"})
    assert rows["variant att_fwd5"] == "FAILED (no BENCH_AB line: bench.txt)"


def test_only_variants_picks_and_orders_the_variants(tmp_path):
    """ONLY_VARIANTS times just the variants it names, in its order (a short device call spends
    its minutes on the ones that matter); a name the list does not have stops the script with an
    error that names the list's variants, before anything runs."""
    env, order, paths, label = variant_stubs(tmp_path)
    names = list(paths)
    assert len(names) >= 2
    pick = [names[-1], names[0]]  # the last and the first: not the list's order
    out = tmp_path / "out"
    out.mkdir()
    _, rows = device_check(out, {**env, "ONLY_VARIANTS": " ".join(pick)})
    assert sorted(k for k in rows if k.startswith("variant ")) == sorted(f"variant {v} ({paths[v]}, B=64 T=1024)" for v in pick)
    assert order.read_text().split() == [x for v in pick for x in expected_variant(v, label, label[v].startswith("flags:"))[0]]
    bad = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env, "OUT": str(tmp_path / "out2"), "COMMIT": "test", "ONLY_VARIANTS": "no_such_variant"})
    assert bad.returncode == 2
    assert "ONLY_VARIANTS names no_such_variant" in bad.stdout and names[0] in bad.stdout


def test_lab_checks_say_ok_failed_or_not_run(tmp_path):
    """Step 3: each lab of gpu.mk's DEV_CUDA_LABS runs with --check; its row says ok when it exits
    0, the failure otherwise, and what the lab printed when it could not run on this GPU (the
    wgmma probe off Hopper), not "ok", which would claim a check that did not happen."""
    labs_list = subprocess.run(["make", "-s", "print-dev-cuda-labs"], cwd=REPO, capture_output=True, text=True).stdout.split()
    assert "wgmma" in labs_list and "gelu" in labs_list
    gb = tmp_path / "gpu_build"
    labs = gb / "dev" / "cuda" / "bf16"
    labs.mkdir(parents=True)
    for lab in labs_list:
        if lab == "wgmma":
            stub(labs, lab, ["wgmma: not run (needs a compute capability 9.0 GPU, an H100/H200, and a build for sm_90a)"], 0)
        elif lab == "gelu":
            stub(labs, lab, ["gelu: N=8232 OC=3072 (bf16)", "MISMATCH"], 1)
        else:
            stub(labs, lab, [f"{lab}: ...", "All results match."], 0)
    env = {**QUIET, "SKIP_TESTS": "1", "SKIP_BUILD": "1", "GPU_BUILD": str(gb), "TIME_LIMIT": "200"}
    del env["SKIP_LABS"]
    out = tmp_path / "out"
    out.mkdir()
    _, rows = device_check(out, env)
    assert rows["lab wgmma --check (bf16)"] == "wgmma: not run (needs a compute capability 9.0 GPU, an H100/H200, and a build for sm_90a)"
    assert rows["lab gelu --check (bf16)"] == "FAILED (exit 1)"
    assert rows["lab layernorm --check (bf16)"] == "ok: all versions match the CPU"


def test_timed_labs_give_a_row_per_shape_and_one_for_a_failure(tmp_path):
    """Step 8: the memory-bound labs' timings become one row per shape; the depth lab's deferred
    backward and its gathers join their shape's row, its GPT-2 step estimate and its timings fused
    into the attention kernels get their own; a lab
    that fails or runs out of time gets a row saying so (in the 2026-11-27 H100 call the depth
    lab timed out and the summary said nothing). Stand-in labs print the real labs' lines."""
    gb = tmp_path / "gpu_build"
    labs = gb / "dev" / "cuda" / "bf16"
    labs.mkdir(parents=True)
    stub(labs, "depth_attention", [
        "depth_attention: B*T=65536 H=12 Hkv=12 D=64 stride=6 layer=7 |S|=2 (bf16)",
        "  version 1: forward 0.6160 ms, 1323 GB/s; backward 1.4393 ms, 2035 GB/s",
        "  version 2 deferred: backward 0.6659 ms, 2140 GB/s",
        "  depth_anchor_gather, 11 readers: 1.0273 ms, 2615 GB/s",
        "GPT-2 124M step (B=64, T=1024, stride 6), the depth backward: accumulate 9.642 ms; deferred 8.292 ms (gathers 1.571 ms)",
        "depth fused into attention: B=64 T=1024 H=12 Hkv=12 D=64 stride=6 layer=7 |S|=2",
        "  forward:  attention alone 0.8000 ms, + depth kernel 1.1000 ms, fused 0.9000 ms (saves 0.2000, depth inside costs 0.1000)",
        "  backward: attention alone 2.0000 ms, + depth kernel 2.7000 ms, fused 2.2000 ms (saves 0.5000, depth inside costs 0.2000)"], 0)
    stub(labs, "gelu", ["gelu: N=65536 OC=3072 (bf16)", "  backward version 1: 0.5637 ms, 2857 GB/s"], 1)
    env = {**QUIET, "SKIP_TESTS": "1", "SKIP_BUILD": "1", "GPU_BUILD": str(gb), "BENCH_PARTS": "memory",
           "MEMORY_LABS": "gelu depth_attention", "TIME_LIMIT": "200"}
    del env["SKIP_BENCH"]
    out = tmp_path / "out"
    out.mkdir()
    _, rows = device_check(out, env)
    assert rows["lab depth_attention B*T=65536 D=64 stride=6 layer=7"] == (
        "version 1: forward 0.6160 ms, 1323 GB/s; backward 1.4393 ms, 2035 GB/s; version 2 deferred: backward 0.6659 ms, 2140 GB/s; "
        "depth_anchor_gather, 11 readers: 1.0273 ms, 2615 GB/s")
    assert rows["lab depth_attention, GPT-2 124M step (B=64, T=1024, stride 6)"] == "accumulate 9.642 ms; deferred 8.292 ms (gathers 1.571 ms)"
    assert rows["lab depth_attention fused into attention B=64 T=1024 layer=7"] == (
        "forward: attention alone 0.8000 ms, + depth kernel 1.1000 ms, fused 0.9000 ms (saves 0.2000, depth inside costs 0.1000); "
        "backward: attention alone 2.0000 ms, + depth kernel 2.7000 ms, fused 2.2000 ms (saves 0.5000, depth inside costs 0.2000)")
    assert rows["lab gelu N=65536 OC=3072"] == "backward v1: 0.5637 ms, 2857 GB/s"
    assert rows["lab gelu (timed)"].startswith("FAILED (exit 1)")
    assert "lab depth_attention (timed)" not in rows
