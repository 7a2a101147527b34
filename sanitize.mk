# sanitize.mk: the CPU C++ test suites under AddressSanitizer + UndefinedBehaviorSanitizer,
# included by the Makefile.
#
#   make test-sanitize      builds build/sanitize/<suite> (-O1 -g1, ASan + UBSan, OpenMP) for
#                           test_gemm, test_fast_exp, test_host, test_gpt_cpu_<path> for all five value paths,
#                           test_value_paths and test_reference_states, and the emulated GPU
#                           build's vanilla bf16 test_gpt (SANITIZE_EMU_RUN below), and runs them
#                           with tests/run_all.sh: any failed test or sanitizer report fails it
#
# A developer target, not part of `make test` (CI's time is limited; how long it takes: README's
# Tests section). The flags are fuzz.mk's FUZZ_SANITIZE: UBSan aborts on its first report, ASan on
# its first error, and LeakSanitizer's report at exit makes the suite exit nonzero, which
# run_all.sh counts as a failure even when the suite's own counts are clean. Each suite is built
# with the same defines as its `make test` twin (VP_ERRORS_THROW, VALUE_PATH_ID); no -march=native
# and -O1, so the GEMM runs unvectorised: slower, but every access instrumented.

SANITIZE_CXXFLAGS := -O1 -g1 -ffp-contract=off -std=c++17 -Wall -Wextra -Wno-unused-parameter $(FUZZ_SANITIZE)
SANITIZE_TESTS := build/sanitize/test_gemm build/sanitize/test_fast_exp build/sanitize/test_host \
	$(addprefix build/sanitize/test_gpt_cpu_,$(VALUE_PATHS)) \
	build/sanitize/test_value_paths build/sanitize/test_reference_states

build/sanitize/test_gemm: tests/test_gemm.cpp cpu/gemm.h tests/testing.h sanitize.mk
	@mkdir -p $(dir $@)
	$(CXX) $(SANITIZE_CXXFLAGS) $(OMPFLAGS) $(INCLUDES) $< -o $@

build/sanitize/test_fast_exp: tests/test_fast_exp.cpp cpu/fast_exp.h tests/testing.h sanitize.mk
	@mkdir -p $(dir $@)
	$(CXX) $(SANITIZE_CXXFLAGS) $(INCLUDES) $< -o $@

build/sanitize/test_host: tests/test_host.cpp $(HOST_HEADERS) tests/testing.h sanitize.mk
	@mkdir -p $(dir $@)
	$(CXX) $(SANITIZE_CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVP_ERRORS_THROW $< -o $@

build/sanitize/test_gpt_cpu_%: tests/test_gpt_cpu.cpp tests/gradcheck.h $(CPU_SOURCES) tests/testing.h sanitize.mk
	@mkdir -p $(dir $@)
	$(CXX) $(SANITIZE_CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVP_ERRORS_THROW -DVALUE_PATH_ID=$(VP_ID_$*) $< -o $@

build/sanitize/test_value_paths: tests/test_value_paths.cpp tests/gradcheck.h $(CPU_SOURCES) tests/testing.h sanitize.mk
	@mkdir -p $(dir $@)
	$(CXX) $(SANITIZE_CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVP_ERRORS_THROW $< -o $@

build/sanitize/test_reference_states: tests/test_reference_states.cpp dev/reference/reference_state.h $(CPU_SOURCES) tests/testing.h $(wildcard tests/reference_states/*.bin) sanitize.mk
	@mkdir -p $(dir $@)
	$(CXX) $(SANITIZE_CXXFLAGS) $(OMPFLAGS) $(INCLUDES) -DVP_ERRORS_THROW $< -o $@

# The GPU kernels under the same sanitizers: vanilla bf16's test_gpt under the CUDA emulator
# (emu.mk: ASan + UBSan, the threads between barriers in reverse order), on make test's emulated
# subset (EMU_CI_FILTER). It was in make test until 2026-11-29: 218 of CI's CPU-seconds (build
# and run), where CI's 25 minutes on 2 cores had run out.
SANITIZE_EMU_RUN := build/emu/vanilla/test_gpt_bf16_asan@$(EMU_CI_FILTER)

# OMP_WAIT_POLICY=passive (unless set; tests/run_all.sh sets it too): the suites run two OpenMP
# threads, ASan and libgomp give no false reports together, but the finite-difference checks open
# thousands of parallel regions on tiny tensors, and libgomp's default spin-wait at each barrier,
# with a thread descheduled on a busy machine, made test_value_paths' fd_vanilla take 469 s instead
# of 71 s (51 s on one thread; the 2-core machine of 2026-11-29, shared with another build).
# Passive waiting keeps both threads, and what they share, under the sanitizers.
.PHONY: test-sanitize
test-sanitize: $(SANITIZE_TESTS) build/emu/vanilla/test_gpt_bf16_asan
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} bash tests/run_all.sh --no-python $(SANITIZE_TESTS) $(SANITIZE_EMU_RUN)
