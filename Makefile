# valuepath Makefile
#
#   make train_cpu [VALUE_PATH=vanilla|resformer|svformer|sla|depth]   the CPU reference trainer
#   make all-paths        one CPU binary per value path: train_cpu_<path>
#   make train_cpu USE_MPI=1   the data-parallel CPU trainer (mpicxx; build/<path>-mpi/; docs/distributed.md)
#   make test             build and run every test (C++ units, model gradient checks, CLI, Python,
#                         the GPU trainer under the CPU CUDA emulator: emu.mk)
#   make test-sanitize    the CPU C++ suites under ASan + UBSan (sanitize.mk; not part of make test)
#   make bench-cpu        ms per step of the CPU trainer at GPT-2 124M shapes, B=4, T=64
#   make quickstart       venv + TinyShakespeare + a small training run with samples (GPU if present)
#
# Build outputs of different value paths live in build/<path>/, so they never clobber each other;
# ./train_cpu is a copy of the binary of the VALUE_PATH of the last plain build.

VALUE_PATH ?= vanilla
VALUE_PATHS := vanilla resformer svformer sla depth
ifeq ($(filter $(VALUE_PATH),$(VALUE_PATHS)),)
$(error unknown VALUE_PATH '$(VALUE_PATH)': choose one of $(VALUE_PATHS))
endif
VP_ID_vanilla := VP_VANILLA
VP_ID_resformer := VP_RESFORMER
VP_ID_svformer := VP_SVFORMER
VP_ID_sla := VP_SLA
VP_ID_depth := VP_DEPTH

CXX ?= g++
# -march=native: the GEMM micro-kernel is built for the host's widest SIMD (AVX-512 or AVX2: the
# CI machines have had both, cpu/gemm.h). No -ffast-math: the reference must be IEEE-faithful.
# -fno-math-errno, the one part of it that changes no result: sqrt and the like no longer set
# errno, so GCC vectorizes the loops that call them. With errno, AdamW's loop (its sqrt) stayed
# scalar: 182 ms of a GPT-2 124M step on a 2-core Zen 5 against 52 ms without, the checkpoints
# bit-identical (2026-11-30, dev/results/2026-11-30-cpu-zen5.md).
# -ffp-contract=off: GCC fuses a * b + c into one FMA at -O2 and above only (and clang within an
# expression), so the reference's bits depended on the optimization level: the -O1 test builds and
# the -O3 trainer differed in their last bits. Off, every FMA is an explicit std::fma or
# __builtin_fma (the GEMM, fast_exp, the attention core) and a training run's checkpoint is
# byte-identical built at -O1 or -O3, or with clang (tests/python/test_trainer_cli.py); no
# measurable speed difference on the Zen 5.
CXXFLAGS ?= -O3 -march=native -fno-math-errno -ffp-contract=off -std=c++17 -Wall -Wextra -Wno-unused-parameter
OMPFLAGS := -fopenmp
INCLUDES := -I.
PYTHON ?= python3
VENV := .venv
VENV_PY := $(VENV)/bin/python

HOST_HEADERS := $(wildcard host/*.h)
CPU_HEADERS := $(wildcard cpu/*.h)
CPU_SOURCES := train_gpt_cpu.cpp $(HOST_HEADERS) $(CPU_HEADERS)

.PHONY: train_cpu all-paths test bench-cpu quickstart venv clean reference-states test-reference

# ---------------------------------------------------------------------------
# trainers

build/%/train_cpu: $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVALUE_PATH_ID=$(VP_ID_$*) train_gpt_cpu.cpp -o $@

# data parallel over MPI (OpenMPI: apt-get install libopenmpi-dev openmpi-bin): its own objects in
# build/<path>-mpi/, so the plain build is never clobbered
MPICXX ?= mpicxx
HAVE_MPI := $(shell command -v $(MPICXX) >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && echo 1)
MPI_SUFFIX := $(if $(filter 1,$(USE_MPI)),-mpi,)

build/%-mpi/train_cpu: $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(MPICXX) $(CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DUSE_MPI -DVALUE_PATH_ID=$(VP_ID_$*) train_gpt_cpu.cpp -o $@

train_cpu: build/$(VALUE_PATH)$(MPI_SUFFIX)/train_cpu
	cp $< train_cpu
	@echo "✓ ./train_cpu is VALUE_PATH=$(VALUE_PATH)$(if $(MPI_SUFFIX), with MPI (run it under mpirun),)"

train_cpu_%: build/%/train_cpu
	cp $< $@

all-paths: $(addprefix train_cpu_,$(VALUE_PATHS))

# ---------------------------------------------------------------------------
# the GPU build (train_gpt.cu, kernels/, test_gpt.cu, dev/cuda/): gpu.mk. Included here, before the
# tests, because `make test` depends on its GPU_TEST_TARGETS (compile every GPU target, so a build
# break fails CI even without a GPU; unoptimized into build/check/ where there is no GPU) and runs
# its GPU_TEST_RUN (test_gpt prints "skipped: no CUDA device" and exits 0 where there is no GPU).
include gpu.mk
# the GPU trainer's real source on the CPU, through the CUDA emulator of tests/emu (no nvcc needed):
# make test runs its EMU_CI_RUN subset; make test-emu runs everything
include emu.mk
# fuzzing the trainer's inputs (dev/fuzz/): make fuzz builds the libFuzzer targets (clang); make
# test replays the committed corpus under ASan + UBSan (FUZZ_REPLAY_RUN)
include fuzz.mk
# the CPU C++ suites under ASan + UBSan (build/sanitize/): make test-sanitize, a developer target
# that make test does not run
include sanitize.mk

# ---------------------------------------------------------------------------
# tests

build/tests/test_gemm: tests/test_gemm.cpp cpu/gemm.h tests/testing.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(OMPFLAGS) $(INCLUDES) $< -o $@

# The same suite on the micro-kernel this machine does not build natively (cpu/gemm.h), so both
# are tested wherever make test runs: AVX2's intrinsics on an AVX-512 machine (-mno-avx512f), the
# loops on any other (-DGEMM_AVX2_KERNEL=0). Their bits must be the same. Deferred (=, not :=): the
# compiler is asked only when this target is built, not at every make.
NATIVE_AVX512 = $(shell $(CXX) $(CXXFLAGS) -dM -E -x c++ /dev/null 2>/dev/null | grep -c '__AVX512F__')
OTHER_GEMM_KERNEL = $(if $(filter 0,$(NATIVE_AVX512)),-DGEMM_AVX2_KERNEL=0,-mno-avx512f)
build/tests/test_gemm_other_kernel: tests/test_gemm.cpp cpu/gemm.h tests/testing.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(OTHER_GEMM_KERNEL) $(OMPFLAGS) $(INCLUDES) $< -o $@

# cpu/fast_exp.h against double exp and tanh; -O3 -march=native, as the trainer, so that its
# vectorized loops are the ones whose bits it compares with one element at a time
build/tests/test_fast_exp: tests/test_fast_exp.cpp cpu/fast_exp.h tests/testing.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(INCLUDES) $< -o $@

# Suites that run for a second or two at -O3 are built at -O1 (QUICK_CXXFLAGS): half the compile
# time (test_host 13 s against 25 s, test_reference_states 13 s against 25 s, test_gpt_cpu 9 s
# against 17 s on the 2-core machine, 2026-11-30) for at most 3 s more of running. The trainers,
# test_gemm and test_value_paths (30 s at -O3, 50 s at -O1) keep -O3.
QUICK_CXXFLAGS := $(patsubst -O3,-O1,$(CXXFLAGS))

build/tests/test_host: tests/test_host.cpp $(HOST_HEADERS) tests/testing.h
	@mkdir -p $(dir $@)
	$(CXX) $(QUICK_CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVP_ERRORS_THROW $< -o $@

# the vanilla trainer at -O1 (QUICK_CXXFLAGS): test_trainer_cli.py checks that its checkpoints are
# byte-identical to the -O3 trainer's (no result may depend on the optimization level)
build/tests/train_cpu_O1: $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(CXX) $(QUICK_CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVALUE_PATH_ID=VP_VANILLA train_gpt_cpu.cpp -o $@

build/tests/test_gpt_cpu_%: tests/test_gpt_cpu.cpp tests/gradcheck.h $(CPU_SOURCES) tests/testing.h
	@mkdir -p $(dir $@)
	$(CXX) $(QUICK_CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVP_ERRORS_THROW -DVALUE_PATH_ID=$(VP_ID_$*) $< -o $@

build/tests/test_value_paths: tests/test_value_paths.cpp tests/gradcheck.h $(CPU_SOURCES) tests/testing.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVP_ERRORS_THROW $< -o $@

# the CPU build against the committed PyTorch reference states (dev/reference/; torch not needed)
build/tests/test_reference_states: tests/test_reference_states.cpp dev/reference/reference_state.h $(CPU_SOURCES) tests/testing.h $(wildcard tests/reference_states/*.bin)
	@mkdir -p $(dir $@)
	$(CXX) $(QUICK_CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVP_ERRORS_THROW $< -o $@

# the prompt encoder as a filter, which tests/python/test_prompt_encode.py diffs against the Python tokenizers
build/tests/encode_text: tests/encode_text.cpp $(HOST_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(INCLUDES) $< -o $@

CPP_TESTS := build/tests/test_gemm build/tests/test_gemm_other_kernel build/tests/test_fast_exp build/tests/test_host build/tests/test_gpt_cpu_vanilla build/tests/test_value_paths \
	build/tests/test_reference_states

# Every suite prints "N passed, N failed"; tests/run_all.sh adds them up and fails if any failed.
# Where nvidia-smi sees a GPU, VP_REQUIRE_GPU=1 makes test_gpt fail, not skip, if CUDA finds none.
# every path's trainer: the CLI tests train and resume each one
PATH_TRAINERS := $(addprefix build/,$(addsuffix /train_cpu,$(VALUE_PATHS)))
# every path's MPI trainer, where mpicxx and mpirun exist (tests/python/test_distributed.py)
MPI_TRAINERS := $(if $(HAVE_MPI),$(addprefix build/,$(addsuffix -mpi/train_cpu,$(VALUE_PATHS))),)

# `make test` builds with one job per core by itself (TEST_JOBS; the ~60 binaries, most of them
# nvcc and emulator builds, are most of CI's time), then runs the suites in order, the emulated
# ones TEST_JOBS at a time (each single-threaded but for its cuBLASLt; run_all.sh --jobs).
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test:
	@start=$$(date +%s); $(MAKE) --no-print-directory -j$(TEST_JOBS) test-build || exit 1; \
		echo "(the build took $$(($$(date +%s) - start))s)"
	@$(if $(HAVE_MPI),true,echo "✗ no mpicxx/mpirun: the distributed tests are skipped (apt-get install libopenmpi-dev openmpi-bin)")
	@$(if $(HAVE_GPU),VP_REQUIRE_GPU=1) bash tests/run_all.sh $(CPP_TESTS) $(FUZZ_REPLAY_RUN) $(GPU_TEST_RUN) --jobs $(TEST_JOBS) $(EMU_CI_RUN)

.PHONY: test-build
test-build: $(CPP_TESTS) build/tests/encode_text build/tests/train_cpu_O1 $(FUZZ_REPLAYS) $(PATH_TRAINERS) $(MPI_TRAINERS) $(GPU_TEST_TARGETS) $(EMU_CI_TARGETS) venv

# The MPI trainer under a real Slurm (tests/python/test_slurm.py, about 9 minutes): with SLURM_CONF
# unset it starts a one-node cluster on this machine first (dev/slurm_local.sh; root, slurm-wlm and
# munge needed). Not part of `make test`: CI has no Slurm, and the tests wait on Slurm's minutes.
.PHONY: test-slurm
test-slurm: build/vanilla-mpi/train_cpu venv
	@$(if $(SLURM_CONF),,bash dev/slurm_local.sh start &&) \
		SLURM_CONF=$(or $(SLURM_CONF),$(CURDIR)/build/slurm/slurm.conf) VP_TEST_SLURM=1 OMP_WAIT_POLICY=passive \
		$(VENV_PY) -m pytest -q -rs --durations=10 tests/python/test_slurm.py

venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m pip install --quiet --upgrade pip
	$(VENV_PY) -m pip install --quiet -r requirements.txt
	touch $@

# The PyTorch reference (optional: .venv/bin/pip install -r requirements-reference.txt)
reference-states: venv
	$(VENV_PY) dev/reference/make_states.py
# test-reference: what make test skips without those: the reference's own tests, the committed
# states against a fresh run of it, the checks inside transformers and lm-eval (hf_convert.py's
# exports, --eval-mc against the harness, compare_paths.sh TASKS=), and the randomized
# differential check: REFERENCE_FUZZ_COUNT random shapes of seed REFERENCE_FUZZ_SEED
# (dev/reference/fuzz_states.py: about 55 s on 2 cores for 500) compared with the CPU build by
# test_reference_states. VENV=DIR for another venv.
REFERENCE_FUZZ_SEED ?= 1
REFERENCE_FUZZ_COUNT ?= 500
test-reference: venv $(PATH_TRAINERS) build/tests/test_reference_states
	@$(VENV_PY) -c "import torch, transformers, lm_eval" 2>/dev/null || { echo "error: make test-reference needs PyTorch, transformers and lm-eval, which $(VENV) lacks" >&2; \
		echo "---> HINT: $(VENV)/bin/pip install -r requirements-reference.txt (about 5 GB: torch with its CUDA wheels, which run on the CPU too), then run it again" >&2; exit 1; }
	$(VENV_PY) -m pytest -q -rs dev/reference tests/python/test_hf_convert.py tests/python/test_mc_eval_vs_harness.py && \
		$(VENV_PY) dev/reference/make_states.py --check && \
		$(VENV_PY) dev/reference/fuzz_states.py --quiet --seed $(REFERENCE_FUZZ_SEED) --count $(REFERENCE_FUZZ_COUNT) --jobs $(TEST_JOBS) --out build/reference_fuzz && \
		VP_REFERENCE_STATES_DIR=build/reference_fuzz build/tests/test_reference_states

# ---------------------------------------------------------------------------
# benchmarks (figures, never pass/fail)

build/dev/bench_cpu: dev/bench_cpu.cpp $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(OMPFLAGS) $(INCLUDES) $< -o $@

build/dev/bench_gemm: dev/bench_gemm.cpp cpu/gemm.h
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(OMPFLAGS) $(INCLUDES) $< -o $@

bench-cpu: build/dev/bench_cpu
	./build/dev/bench_cpu

# ---------------------------------------------------------------------------
# the main job: a small GPT-2 on TinyShakespeare, from a clean clone

QUICKSTART_FLAGS := --arch gpt2 --layers 4 --heads 4 --dim 128 --max-seq 128 --seq-len 128 --batch-size 8 \
	--max-steps 300 --lr 1e-3 --warmup-steps 20 --eval-every 100 --eval-batches 8 \
	--sample-every 150 --sample-tokens 96

# The GPU trainer where a GPU and nvcc are there (HAVE_GPU, gpu.mk), else the CPU one: the same
# flags and outputs either way. QUICKSTART_CPU=1 keeps it on the CPU.
QUICKSTART_TRAINER := $(if $(and $(HAVE_GPU),$(if $(QUICKSTART_CPU),,1)),train,train_cpu)
quickstart: venv $(QUICKSTART_TRAINER)
	$(VENV_PY) scripts/prepare_tinyshakespeare.py
	rm -rf runs/quickstart
	@echo "quickstart: training with ./$(QUICKSTART_TRAINER)$(if $(filter train,$(QUICKSTART_TRAINER)), (the GPU trainer; QUICKSTART_CPU=1 for the CPU one))"
	./$(QUICKSTART_TRAINER) --train-data 'data/tinyshakespeare/tinyshakespeare_train_*.bin' \
		--val-data 'data/tinyshakespeare/tinyshakespeare_val_*.bin' \
		--tokenizer data/tinyshakespeare/gpt2.vptok --out-dir runs/quickstart $(QUICKSTART_FLAGS)
	$(VENV_PY) scripts/plot_runs.py runs/quickstart --out runs/quickstart/plot.png

clean:
	rm -rf build train_cpu train_cpu_*
