# emu.mk: the GPU trainer run on the CPU by the CUDA emulator (tests/emu/, docs/gpu.md "Without a
# GPU"). Included by the Makefile after gpu.mk; needs g++ and python3, not nvcc.
#
#   make test-emu              every value path's test_gpt, both precisions, every test, under the
#                              emulator (minutes per binary: run it before a GPU session)
#   make test-emu EMU_TESTS=forward_backward   only the tests whose names contain it (comma-separated)
#   make emu-train             build/emu/<path>/train_<prec>: ./train's main under the emulator
#   make test-emu-labs         the kernel labs of dev/cuda, every version checked against the CPU
#   make test-emu-race         test-emu under the race detector (docs/gpu.md, "Races")
#   make test-emu-labs-race    test-emu-labs under the race detector
#
# `make test` runs EMU_CI_RUN, a subset sized for CI's 2 cores: the emulator's own tests
# (test_emu); every path and precision on forward_backward (every config: logits, loss, every
# gradient, each layer's q/k/v), the attention head-range hook and the kernel-version tests of
# EMU_CI_FILTER; vanilla bf16's 10 steps and its check of the global norm's grid; and the race
# detector's own tests plus Depth bf16's depth_fused with every kernel access checked for races.
# make test-sanitize runs the vanilla bf16 suite under AddressSanitizer + UBSan with the threads
# between barriers in reverse order (VP_EMU_ORDER=forward|reverse overrides either build's order).
# make test also builds the emulated ./train for tests/python/test_gpu_trainer_emu.py and, where MPI exists, the emulated
# data-parallel ./train for tests/python/test_distributed_gpu_emu.py (NCCL carried over MPI:
# tests/emu/nccl_emu.cpp).
#
# The emulated build compiles the real sources: tests/emu/rewrite_cuda.py rewrites the <<<...>>>
# launches and `extern __shared__` of test_gpt.cu, train_gpt.cu and kernels/*.cuh into
# build/emu/src/ (same names, #line kept), and tests/emu/include/ stands in for the CUDA headers.

# Debug information: none in the plain builds (test_gpt, the trainers, bench_gpt, test_emu), where
# nothing reads it: 40 s against 57 s with -g1 for a test_gpt on the 2-core machine (2026-11-30),
# over the 24 emulated builds of make test. The race detector's and the sanitizers' builds take
# -g1 (EMU_REPORT_DEBUG, in EMU_RACE and EMU_SANITIZE): line tables and function names, which
# addr2line gives the race detector and ASan and UBSan give their reports; no variables, a third
# less compile time than -g (19 s against 12 s for a test_gpt, 2026-11-28). For gdb, any build:
# make -B <target> EMU_DEBUG=-g
EMU_DEBUG ?=
EMU_REPORT_DEBUG := $(or $(EMU_DEBUG),-g1)
# -fstrict-aliasing (GCC turns it on only from -O2): the kernels are compiled as a compiler that
# acts on type-based alias analysis sees them, as NVVM may. Without it, bias_backward_kernel2's read
# of a uint4 through a floatX* (undefined behaviour) passed at -O1 and gave zero bias gradients at
# -O2 (2026-11-28); -Werror=strict-aliasing turns GCC's warnings about such casts into errors.
# -Og, not -O1: a third less compile time (2026-11-30, 2-core machine: SLA's bf16 test_gpt in 25 s
# against 37 s; make test's emulated builds about 170 CPU-seconds less). The emulated kernels run
# about a tenth slower; the CPU reference's GEMM kernel, every test_gpt's oracle, is compiled at
# -O3 whatever the file's level (cpu/gemm.h), so make test's emulated suites took 316 s of CPU in
# all, against 356 s with -O1 (and 400 s with -Og and the GEMM at -Og).
EMU_CXXFLAGS := -std=c++17 -Og -fstrict-aliasing -Werror=strict-aliasing $(EMU_DEBUG) -march=native -fopenmp -Wall -Wno-unused-parameter -Wno-unused-function -Wno-unknown-pragmas
EMU_SANITIZE := $(EMU_REPORT_DEBUG) -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
EMU_INCLUDES := -Itests/emu/include -Ibuild/emu/src -I.
EMU_RUNTIME_SRC := tests/emu/cuda_emu.cpp tests/emu/cuda_emu.h tests/emu/cublaslt_emu.h
EMU_SOURCES := $(addprefix build/emu/src/,test_gpt.cu train_gpt.cu $(KERNEL_HEADERS))
EMU_TESTS ?=
EMU_BENCH_BINS := $(foreach p,$(GPU_VALUE_PATHS),build/emu/dev/cuda/bench_gpt_$(p))

.PHONY: test-emu emu-train
.SECONDARY: $(EMU_SOURCES)

build/emu/src/%: % tests/emu/rewrite_cuda.py
	@mkdir -p $(dir $@)
	@$(PYTHON) tests/emu/rewrite_cuda.py $< $@

# the runtime is optimised (its matmul is most of the emulator's time); the kernels are built -Og
# (EMU_CXXFLAGS) so that they stay debuggable and the sanitizers see every access
build/emu/cuda_emu.o: $(EMU_RUNTIME_SRC)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O3 -march=native -fopenmp $(EMU_DEBUG) -Itests/emu/include -c $< -o $@
build/emu/cuda_emu_asan.o: $(EMU_RUNTIME_SRC)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O1 -march=native -fopenmp $(EMU_SANITIZE) -DVP_EMU_REVERSE_DEFAULT -Itests/emu/include -c $< -o $@

# the race detector's runtime (cuda_emu.cpp, "Race detector"): not instrumented itself
build/emu/cuda_emu_race.o: $(EMU_RUNTIME_SRC)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 $(EMU_REPORT_DEBUG) -march=native -fopenmp -DVP_EMU_RACE -Itests/emu/include -c $< -o $@

build/emu/nccl_emu.o: tests/emu/nccl_emu.cpp tests/emu/nccl_emu.h tests/emu/cuda_emu.h
	@mkdir -p $(dir $@)
	$(MPICXX) -std=c++17 -O2 $(EMU_DEBUG) -Itests/emu/include -c $< -o $@

emu_prec_define = $(if $(filter fp32,$(1)),-DENABLE_FP32,-DENABLE_BF16)

# the _race builds: GCC's ThreadSanitizer pass puts a call before every load and store, and the
# emulator's race detector answers those calls (libtsan is not linked: compile and link are two
# steps, the link without -fsanitize). Fibers switch by hand, so libtsan could not follow them.
EMU_RACE := $(EMU_REPORT_DEBUG) -DVP_EMU_RACE -fsanitize=thread --param tsan-instrument-func-entry-exit=0 --param tsan-distinguish-volatile=0
# links $@ from $@.o, which was compiled with $(EMU_RACE)
EMU_RACE_LINK = $(CXX) $(EMU_CXXFLAGS) $@.o build/emu/cuda_emu_race.o -o $@ && rm -f $@.o

# build/emu/<path>/test_gpt_<prec>[_asan]
define EMU_TEST_RULES
build/emu/%/test_gpt_$(1): $$(EMU_SOURCES) build/emu/cuda_emu.o $$(CPU_SOURCES) tests/testing.h
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_CXXFLAGS) $$(EMU_INCLUDES) $(call emu_prec_define,$(1)) -DVP_ERRORS_THROW -DVALUE_PATH_ID=$$(VP_ID_$$*) -x c++ build/emu/src/test_gpt.cu -x none build/emu/cuda_emu.o -o $$@
build/emu/%/test_gpt_$(1)_asan: $$(EMU_SOURCES) build/emu/cuda_emu_asan.o $$(CPU_SOURCES) tests/testing.h
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_CXXFLAGS) $$(EMU_SANITIZE) $$(EMU_INCLUDES) $(call emu_prec_define,$(1)) -DVP_ERRORS_THROW -DVALUE_PATH_ID=$$(VP_ID_$$*) -x c++ build/emu/src/test_gpt.cu -x none build/emu/cuda_emu_asan.o -o $$@
build/emu/%/test_gpt_$(1)_race: $$(EMU_SOURCES) build/emu/cuda_emu_race.o $$(CPU_SOURCES) tests/testing.h
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_CXXFLAGS) $$(EMU_RACE) $$(EMU_INCLUDES) $(call emu_prec_define,$(1)) -DVP_ERRORS_THROW -DVALUE_PATH_ID=$$(VP_ID_$$*) -x c++ -c build/emu/src/test_gpt.cu -o $$@.o
	$$(EMU_RACE_LINK)
build/emu/%/train_$(1): $$(EMU_SOURCES) build/emu/cuda_emu.o $$(CPU_SOURCES)
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_CXXFLAGS) $$(EMU_INCLUDES) $(call emu_prec_define,$(1)) -DVALUE_PATH_ID=$$(VP_ID_$$*) -x c++ build/emu/src/train_gpt.cu -x none build/emu/cuda_emu.o -o $$@
# build/emu/<path>-mpi/train_<prec>: the data-parallel trainer, one emulated GPU per MPI rank,
# NCCL's collectives carried over MPI (tests/emu/nccl_emu.cpp); the shorter stem wins over the
# rule above, as in gpu.mk
build/emu/%-mpi/train_$(1): $$(EMU_SOURCES) build/emu/cuda_emu.o build/emu/nccl_emu.o $$(CPU_SOURCES)
	@$$(if $$(HAVE_MPI),true,echo "✗ $$@ needs MPI (mpicxx, mpirun: apt-get install libopenmpi-dev openmpi-bin)"; exit 1)
	@mkdir -p $$(dir $$@)
	$$(MPICXX) $$(EMU_CXXFLAGS) $$(EMU_INCLUDES) $(call emu_prec_define,$(1)) -DUSE_MPI -DVALUE_PATH_ID=$$(VP_ID_$$*) -x c++ build/emu/src/train_gpt.cu -x none build/emu/cuda_emu.o build/emu/nccl_emu.o -o $$@
endef
$(eval $(call EMU_TEST_RULES,fp32))
$(eval $(call EMU_TEST_RULES,bf16))

# the emulator's own tests (bf16: the tensor-core helpers exist only there)
build/emu/test_emu: build/emu/src/tests/emu/test_emu.cu $(EMU_SOURCES) build/emu/cuda_emu.o $(HOST_HEADERS) tests/testing.h
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_INCLUDES) -DENABLE_BF16 -DVP_ERRORS_THROW -x c++ $< -x none build/emu/cuda_emu.o -o $@

# the emulator's own tests once more under the race detector: its planted races must be named
build/emu/test_emu_race: build/emu/src/tests/emu/test_emu.cu $(EMU_SOURCES) build/emu/cuda_emu_race.o $(HOST_HEADERS) tests/testing.h
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_RACE) $(EMU_INCLUDES) -DENABLE_BF16 -DVP_ERRORS_THROW -x c++ -c $< -o $@.o
	$(EMU_RACE_LINK)

EMU_TEST_BINS := $(foreach p,$(GPU_VALUE_PATHS),build/emu/$(p)/test_gpt_fp32 build/emu/$(p)/test_gpt_bf16)

# run_all.sh entries are BINARY[@FILTER]
EMU_CI_FILTER := forward_backward,attention_head_ranges,attention_head_dim_128_versions,attention_wgmma_versions,attention_sum_kept,matmul_forward_lerp_bias,matmul_backward_dgelu,matmul_forward_gelu_epilogue,bias_grad_epilogue,depth_fused,classifier_threads_fit_v
# under the race detector: its own tests, and Depth bf16's depth_fused (the fused kernels, whose
# blocks wait on each other's flags, and then forward_backward's first config with them: the
# attention kernels every path runs). The rest of EMU_CI_FILTER there (96 s), SLA bf16 and ResFormer
# fp32 were here too until 2026-11-29 (159 s of runs, 66 s of builds, where CI's 25 minutes on a
# slow hour had run out): make test-emu-race runs every test of every path and precision.
EMU_CI_RACE_RUN := build/emu/test_emu_race build/emu/depth/test_gpt_bf16_race@depth_fused
# Longest first, so that neither of make test's two slots is left with a long suite at the end.
# (vanilla bf16's 10 steps stay; Depth fp32's, 92 s, and the ASan + UBSan build, now make
# test-sanitize's, left make test on 2026-11-29 for CI's time)
EMU_CI_RUN := build/emu/vanilla/test_gpt_bf16@steps $(EMU_CI_RACE_RUN) \
	build/emu/depth/test_gpt_bf16@$(EMU_CI_FILTER) $(addsuffix @$(EMU_CI_FILTER),$(filter-out build/emu/depth/test_gpt_bf16,$(EMU_TEST_BINS))) \
	build/emu/vanilla/test_gpt_bf16@global_norm_grid_fits_n build/emu/test_emu
# plus ./train's main under the emulator, for tests/python/test_gpu_trainer_emu.py, and its
# data-parallel build where MPI exists (tests/python/test_distributed_gpu_emu.py)
EMU_CI_TARGETS := build/emu/test_emu $(EMU_TEST_BINS) $(foreach e,$(EMU_CI_RACE_RUN),$(firstword $(subst @, ,$(e)))) build/emu/vanilla/train_fp32 build/emu/vanilla/train_bf16 \
	build/emu/resformer/train_fp32 build/emu/resformer/train_bf16 build/emu/depth/train_fp32 \
	$(if $(HAVE_MPI),build/emu/vanilla-mpi/train_fp32 build/emu/depth-mpi/train_bf16 build/emu/resformer-mpi/train_bf16) $(EMU_BENCH_BINS)

test-emu: build/emu/test_emu $(EMU_TEST_BINS)
	@bash tests/run_all.sh --no-python build/emu/test_emu $(if $(EMU_TESTS),$(addsuffix @$(EMU_TESTS),$(EMU_TEST_BINS)),$(EMU_TEST_BINS))

# the same under the race detector (cuda_emu.cpp "Race detector"; two to five times as long:
# 6 to 23 minutes per binary on two cores, dev/results/2026-11-24-emu-race.md)
EMU_RACE_BINS := $(addsuffix _race,$(EMU_TEST_BINS))
.PHONY: test-emu-race
test-emu-race: build/emu/test_emu_race $(EMU_RACE_BINS)
	@bash tests/run_all.sh --no-python build/emu/test_emu_race $(if $(EMU_TESTS),$(addsuffix @$(EMU_TESTS),$(EMU_RACE_BINS)),$(EMU_RACE_BINS))

emu-train: $(foreach p,$(GPU_VALUE_PATHS),build/emu/$(p)/train_fp32 build/emu/$(p)/train_bf16)

.PHONY: print-emu-ci-targets print-emu-ci-run
print-emu-ci-targets:
	@echo $(EMU_CI_TARGETS)
print-emu-ci-run:
	@echo $(EMU_CI_RUN)

# the kernel labs of dev/cuda under the emulator: every version against the CPU (--check; no
# timings). Not in `make test`: the attention and classifier labs take minutes at their sizes.
EMU_LABS := $(addprefix build/emu/dev/cuda/,$(DEV_CUDA_LABS))
build/emu/dev/cuda/%: build/emu/src/dev/cuda/%.cu build/emu/src/dev/cuda/common.h $(EMU_SOURCES) build/emu/cuda_emu.o $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_INCLUDES) -DENABLE_BF16 -x c++ $< -x none build/emu/cuda_emu.o -o $@

# dev/cuda/bench_gpt per path, for the dry run at full size (VP_EMU_DRY_RUN=1: every launcher,
# cuBLASLt call and allocation of a GPT-2 124M training step checked, nothing computed;
# tests/python/test_gpu_trainer_emu.py)
build/emu/dev/cuda/bench_gpt_%: build/emu/src/dev/cuda/bench_gpt.cu $(EMU_SOURCES) build/emu/cuda_emu.o $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_INCLUDES) -DENABLE_BF16 -DVALUE_PATH_ID=$(VP_ID_$*) -x c++ $< -x none build/emu/cuda_emu.o -o $@
.PHONY: test-emu-labs test-emu-labs-race
test-emu-labs: $(EMU_LABS)
	@fail=0; for l in $^; do echo "== $$l --check"; ./$$l --check || { echo "✗ $$l"; fail=1; }; done; exit $$fail
# every version of every lab under the race detector (versions the trainer does not use included)
build/emu/dev/cuda/%_race: build/emu/src/dev/cuda/%.cu build/emu/src/dev/cuda/common.h $(EMU_SOURCES) build/emu/cuda_emu_race.o $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_RACE) $(EMU_INCLUDES) -DENABLE_BF16 -x c++ -c $< -o $@.o
	$(EMU_RACE_LINK)
test-emu-labs-race: $(addsuffix _race,$(EMU_LABS))
	@fail=0; for l in $^; do echo "== $$l --check"; ./$$l --check || { echo "✗ $$l"; fail=1; }; done; exit $$fail
