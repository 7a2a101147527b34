/*
Kernel lab (a probe): Hopper's warpgroup MMA as the version-6 and -7 attention kernels use it,
kernels/wgmma_probe.cuh over kernels/wgmma.cuh.

Compile and run (an H100/H200, built for sm_90a; elsewhere it says so and exits 0):
  make build/dev/cuda/bf16/wgmma        (all labs: make dev-cuda)
  ./build/dev/cuda/bf16/wgmma --check   (dev/device_check.sh's step 3, the emulator: the same)

Why: the attention kernels' version 6 reads its operands through matrix descriptors whose
meaning (the 128-byte swizzle, K-major and MN-major, the leading and stride byte offsets) comes
from the PTX ISA's tables, checked so far only by the CUDA emulator, which implements those
tables. If version 6 fails on a GPU, this says which piece the hardware reads differently: each
shape and layout once, D = A B on one warpgroup, 64 x 64 small integers, so the products and
sums are exact and the comparison with a CPU matmul is equality.
  SS_KMAJOR   m64n64k16, A and B^T K-major from swizzled shared tiles   (S = Q K^T, forward and dQ)
  RS_MNMAJOR  m64n64k16, A from registers, B MN-major                  (O = P V, dQ += dS K, dK/dV's products)
  SS_N32      m64n32k16, A and B^T K-major, 32 columns                 (the dK/dV kernel's S^T = K Q^T)
  RS_KMAJOR   m64n64k16, A from registers, B^T K-major                  (version 7's S = Q K^T, dP = dO V^T)
  RS_N32      m64n32k16, A from registers, B^T K-major, 32 columns      (version 7's dK/dV S^T = K Q^T)
No timings: the attention labs time the kernels that use these.
*/
#include "dev/cuda/common.h"
#include "kernels/attention.cuh"
#include "kernels/wgmma_probe.cuh"

int main(int argc, char** argv) {
    if (!lab_has_device()) return 0;
    (void)lab_flag(argc, argv, "--check");  // the same work either way
#ifndef ENABLE_BF16
    printf("wgmma: the probe is the BF16 build's (build/dev/cuda/bf16/wgmma)\n");
    return 0;
#else
    if (!gpu::attention_wgmma_available()) {
        printf("wgmma: not run (needs a compute capability 9.0 GPU, an H100/H200, and a build for sm_90a)\n");
        return 0;
    }
    const char* names[5] = {"SS_KMAJOR  m64n64k16, A and B^T K-major (S = Q K^T)", "RS_MNMAJOR m64n64k16, A from registers, B MN-major (O = P V)",
                            "SS_N32     m64n32k16, A and B^T K-major (dK/dV's S^T = K Q^T)",
                            "RS_KMAJOR  m64n64k16, A from registers, B^T K-major (version 7's S = Q K^T)",
                            "RS_N32     m64n32k16, A from registers, B^T K-major (version 7's dK/dV S^T = K Q^T)"};
    bool ok = true;
    for (int mode = 0; mode <= gpu::WGMMA_PROBE_RS_N32; mode++) {
        gpu::WgmmaProbeResult r = gpu::wgmma_probe_check(mode, 0, 0x9E3779B97F4A7C15ull * (mode + 1));
        if (r.bad)
            printf(" %s: FAILED, %d of 4096 elements differ (first: row %d, column %d)\n", names[mode], r.bad, r.first_bad / 64, r.first_bad % 64);
        else
            printf(" %s: ok (exact)\n", names[mode]);
        ok &= r.bad == 0;
    }
    printf(ok ? "All results match.\n" : "MISMATCH\n");
    return ok ? 0 : 1;
#endif
}
