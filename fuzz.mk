# fuzz.mk: fuzzing the trainer's inputs (dev/fuzz/fuzz_inputs.cpp), included by the Makefile.
#
#   make fuzz                                  build/fuzz/fuzz_<target> with clang's libFuzzer
#   build/fuzz/fuzz_checkpoint dev/fuzz/corpus/checkpoint -max_total_time=600 -rss_limit_mb=4096
#                                              fuzz one target, growing its corpus (dev/fuzz/README.md)
#   make test                                  builds build/fuzz/replay (g++, ASan + UBSan; every
#                                              target, run as its links build/fuzz/replay_<target>)
#                                              and replays the committed corpus: no input may crash
#
# Targets: checkpoint, shard, tokenizer, flags, mc. OpenMP is left out: one thread is what a fuzzer
# wants, and clang's OpenMP runtime is not installed everywhere.

FUZZ_TARGETS := checkpoint shard tokenizer flags mc
FUZZ_DEFINE_checkpoint := FUZZ_CHECKPOINT
FUZZ_DEFINE_shard := FUZZ_SHARD
FUZZ_DEFINE_tokenizer := FUZZ_TOKENIZER
FUZZ_DEFINE_flags := FUZZ_FLAGS
FUZZ_DEFINE_mc := FUZZ_MC
FUZZ_CLANG ?= clang++
FUZZ_SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_REPLAYS := $(addprefix build/fuzz/replay_,$(FUZZ_TARGETS))
# what make test runs: each replay binary on its corpus directory (tests/run_all.sh BINARY@ARG)
FUZZ_REPLAY_RUN := $(foreach t,$(FUZZ_TARGETS),build/fuzz/replay_$(t)@dev/fuzz/corpus/$(t))

.PHONY: fuzz
fuzz: $(addprefix build/fuzz/fuzz_,$(FUZZ_TARGETS))

build/fuzz/fuzz_%: dev/fuzz/fuzz_inputs.cpp $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(FUZZ_CLANG) -std=c++17 -O1 -g -fsanitize=fuzzer $(FUZZ_SANITIZE) -Wno-unknown-pragmas $(INCLUDES) -D$(FUZZ_DEFINE_$*) $< -o $@

# One binary for the five targets, -O0, -g1 (line tables for ASan's and UBSan's reports, without
# -g's variables): CI's compile time. Five -O1 binaries, one per target, took 99 s of the 2-core
# machine's build; this one took 21 (2026-11-30). The replays themselves take well under a
# second at -O0, where the sanitizers see every access as written.
build/fuzz/replay: dev/fuzz/fuzz_inputs.cpp $(CPU_SOURCES)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O0 -g1 $(FUZZ_SANITIZE) -Wno-unknown-pragmas $(INCLUDES) -DFUZZ_REPLAY $< -o $@
build/fuzz/replay_%: build/fuzz/replay
	ln -sf replay $@
