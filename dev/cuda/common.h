// dev/cuda/common.h: what every kernel lab in dev/cuda/ shares.
//
// A lab is one standalone program per hard op (attention_forward.cu, attention_backward.cu,
// classifier.cu, layernorm.cu, rmsnorm.cu). It includes the CPU reference (train_gpt_cpu.cpp,
// never a copy of it) for the expected results and the production kernel headers (kernels/) for
// the promoted versions, adds its own unpromoted versions, checks EVERY version against the CPU,
// and only then times them. Error checking (cudaCheck, KERNEL_ASSERT) and floatX come from
// kernels/common.cuh: one definition in the repository.
//
//   validate_result    abs + rel tolerance per element (tol_abs + tol_rel * |ref|), first mismatches
//                      printed, plus the normwise relative error ||gpu - ref|| / ||ref||
//   benchmark_kernel   average time of a launch, with the L2 cache flushed before every repetition
//                      (a memset of an L2-sized buffer), timed with CUDA events
//   --check            every lab takes it: validate all versions, skip the timings (device_check.sh)
#pragma once

#define TESTING
#include "train_gpt_cpu.cpp"  // the CPU reference: every op's forward and backward, templated on the float type
#include "kernels/common.cuh"

#include <functional>
#include <string>

using gpu::floatX;

// Default per-element tolerances of floatX results: bf16 keeps 8 significant bits, so a correctly
// rounded result is within 2^-9 relative; a few roundings on the way give a few of those.
#ifdef ENABLE_FP32
static const float LAB_TOL_REL = 1e-5f, LAB_TOL_ABS = 1e-6f;
#else
static const float LAB_TOL_REL = 1.0f / 64, LAB_TOL_ABS = 1e-3f;
#endif

// ----------------------------------------------------------------------------
// host <-> device

template <typename T>
T* dev_alloc(size_t n) {
    T* p = nullptr;
    cudaCheck(cudaMalloc(&p, n * sizeof(T)));
    return p;
}

// floats (rounded to floatX) to a new device buffer
inline floatX* dev_upload_x(const std::vector<float>& h) {
    std::vector<floatX> tmp(h.size());
    for (size_t i = 0; i < h.size(); i++) tmp[i] = (floatX)h[i];
    floatX* d = dev_alloc<floatX>(h.size());
    cudaCheck(cudaMemcpy(d, tmp.data(), tmp.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
T* dev_upload(const std::vector<T>& h) {
    T* d = dev_alloc<T>(h.size());
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
std::vector<float> dev_download(const T* d, size_t n) {
    std::vector<T> tmp(n);
    cudaCheck(cudaMemcpy(tmp.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (size_t i = 0; i < n; i++) out[i] = (float)tmp[i];
    return out;
}

// the values a kernel actually sees: rounded to floatX and back
inline std::vector<float> round_to_floatx(std::vector<float> v) {
    for (float& x : v) x = (float)(floatX)x;
    return v;
}

inline std::vector<float> random_normal(size_t n, uint64_t seed, float scale = 1.0f) {
    Rng r = rng_stream(seed, 3);
    std::vector<float> v(n);
    for (float& x : v) x = scale * (float)rng_normal(&r);
    return v;
}

// Poisons a device output (NaN bytes) so that an element a kernel forgets to write fails validation.
template <typename T>
void poison(T* d, size_t n) {
    cudaCheck(cudaMemset(d, 0xff, n * sizeof(T)));
}

// ----------------------------------------------------------------------------
// validation

// skip_nonfinite_ref: leave out the elements whose reference is not finite (slots that nothing
// writes, as validate_result leaves them out)
inline double normwise_error(const std::vector<float>& got, const std::vector<float>& ref, bool skip_nonfinite_ref = false) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (skip_nonfinite_ref && !std::isfinite(ref[i])) continue;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// largest |got - ref|: FlashAttention's rule in the max norm (the attention labs)
inline double max_abs_error(const std::vector<float>& got, const std::vector<float>& ref) {
    double m = 0;
    for (size_t i = 0; i < ref.size(); i++) m = std::max(m, (double)std::fabs(got[i] - ref[i]));
    return m;
}

// Compares a device result with the CPU reference. Returns false (after printing the first
// mismatches) if any element is off by more than tol_abs + tol_rel * |ref| or not finite.
template <typename T>
bool validate_result(const T* device_result, const std::vector<float>& ref, const char* name, float tol_rel = LAB_TOL_REL, float tol_abs = LAB_TOL_ABS) {
    std::vector<float> got = dev_download(device_result, ref.size());
    int faults = 0;
    double max_err = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        float e = std::fabs(got[i] - ref[i]);
        if (!std::isfinite(ref[i])) continue;
        max_err = std::max(max_err, (double)e);
        if (!(e <= tol_abs + tol_rel * std::fabs(ref[i]))) {
            if (faults < 5) printf("  %s mismatch at %zu: ref %.6g gpu %.6g\n", name, i, ref[i], got[i]);
            faults++;
        }
    }
    // the normwise error over the compared elements (a reference that is not finite marks a slot
    // that nothing writes, such as the unused columns of Depth's de)
    printf("  %-12s max abs err %.3e, normwise rel err %.3e, %d of %zu outside tol (%.1e abs + %.1e rel)\n", name, max_err, normwise_error(got, ref, true), faults,
           ref.size(), tol_abs, tol_rel);
    return faults == 0;
}

// ----------------------------------------------------------------------------
// timing

// Average ms of launch() over `repeats` runs, each after flushing L2 (so every run reads its
// inputs from HBM, as in the trainer where the tensors are far larger than L2).
inline float benchmark_kernel(int repeats, const std::function<void()>& launch) {
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    size_t flush_bytes = (size_t)prop.l2CacheSize * 2;
    void* flush = nullptr;
    cudaCheck(cudaMalloc(&flush, flush_bytes));
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    launch();  // warm-up: module load, cudaFuncSetAttribute
    float total = 0;
    for (int i = 0; i < repeats; i++) {
        cudaCheck(cudaMemset(flush, i & 0xff, flush_bytes));
        cudaCheck(cudaEventRecord(start));
        launch();
        cudaCheck(cudaEventRecord(stop));
        cudaCheck(cudaEventSynchronize(stop));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        total += ms;
    }
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaFree(flush));
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return total / repeats;
}

inline bool lab_has_device() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("skipped: no CUDA device\n");
        return false;
    }
    return true;
}

inline bool lab_flag(int argc, char** argv, const char* flag) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], flag)) return true;
    return false;
}

// Two versions' results that must be the same bits under the CUDA emulator (it sums each k16 step
// of mma and wgmma alike in order) and may differ on a GPU (why_not: the reason, printed): prints
// "<what> bit-identical ..." and returns false only for a difference under the emulator.
inline bool lab_same_bits_emulated(const char* what, bool same, const char* why_not) {
#ifdef VP_CUDA_EMU
    (void)why_not;
    printf(" %s bit-identical under the emulator: %s\n", what, same ? "ok" : "FAILED");
    return same;
#else
    printf(" %s bit-identical: %s (not required on a GPU: %s)\n", what, same ? "yes" : "no", why_not);
    return true;
#endif
}
