// dev/bench_gemm.cpp: how fast is cpu/gemm.h on the shapes the GPT-2 124M trainer actually runs?
//
// Every matmul of the model is one of three forms over BT = B*T = 256 rows (B=4, T=64):
//   forward  out(BT,OC)  = inp(BT,C) . W(OC,C)^T     M=BT, N=OC, K=C
//   dinp     dinp(BT,C) += dout(BT,OC) . W(OC,C)     M=BT, N=C,  K=OC
//   dweight  dW(OC,C)   += dout(BT,OC)^T . inp(BT,C) M=OC, N=C,  K=BT
// for (C,OC) = (768,2304) qkv, (768,768) attention proj, (768,3072) fc, (3072,768) fc proj
// (12 of each per step) and (768,50304) the LM head (once per step).
// We print ms and GFLOP/s per shape (median of several runs) and what one training step's worth
// of matmuls costs: 12 layers x 4 shapes x 3 forms + the LM head's 3 forms.
//
// build: g++ -O3 -march=native -fopenmp -std=c++17 -I. dev/bench_gemm.cpp -o bench_gemm
// run:   ./bench_gemm [threads=2] [runs=7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/gemm.h"

struct Shape {
    int C, OC;
    const char* name;
    int per_step;  // how many times per training step
};

int main(int argc, char** argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2;
    const int runs = argc > 2 ? atoi(argv[2]) : 7;
#ifdef _OPENMP
    omp_set_num_threads(threads);
#else
    if (threads != 1) printf("(built without -fopenmp: running single-threaded)\n");
#endif
    const int BT = 256;
    const Shape shapes[] = {{768, 2304, "qkv", 12},
                            {768, 768, "attproj", 12},
                            {768, 3072, "fc", 12},
                            {3072, 768, "fcproj", 12},
                            {768, 50304, "lm_head", 1}};

    // One set of buffers big enough for the largest shape, filled with small random values.
    const size_t max_w = 768 * 50304, max_act = (size_t)BT * 50304;
    std::vector<float> W(max_w), dW(max_w), inp(max_act), dinp(max_act), out(max_act), dout(max_act);
    std::mt19937 rng(1337);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto* v : {&W, &dW, &inp, &dinp, &out, &dout})
        for (float& x : *v) x = 0.01f * dist(rng);

    printf("gemm bench: float, %d thread(s), median of >= %d runs, BT=%d\n", threads, runs, BT);
    printf("%-8s %-8s %6s %6s %6s %9s %9s %9s\n", "shape", "form", "M", "N", "K", "ms", "GFLOP/s", "best ms");
    double step_ms = 0, step_best_ms = 0, step_flops = 0;
    for (const Shape& s : shapes) {
        const int C = s.C, OC = s.OC;
        for (int form = 0; form < 3; form++) {
            int M, N, K;
            auto run = [&]() {
                if (form == 0)  // out = inp . W^T
                    gemm<float>(BT, OC, C, inp.data(), C, 1, W.data(), 1, C, out.data(), OC, false);
                else if (form == 1)  // dinp += dout . W
                    gemm<float>(BT, C, OC, dout.data(), OC, 1, W.data(), C, 1, dinp.data(), C, true);
                else  // dW += dout^T . inp
                    gemm<float>(OC, C, BT, dout.data(), 1, OC, inp.data(), C, 1, dW.data(), C, true);
            };
            if (form == 0) M = BT, N = OC, K = C;
            else if (form == 1) M = BT, N = C, K = OC;
            else M = OC, N = C, K = BT;
            run();  // warm up: first-touch pages, packing buffers, thread pool
            std::vector<double> ms;
            // At least `runs` runs and at least half a second, so the small shapes get enough
            // samples for a stable median.
            double total_ms = 0;
            for (int r = 0; r < runs || total_ms < 500; r++) {
                auto t0 = std::chrono::steady_clock::now();
                run();
                auto t1 = std::chrono::steady_clock::now();
                ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
                total_ms += ms.back();
            }
            std::sort(ms.begin(), ms.end());
            const double med = ms[ms.size() / 2];
            const double flops = 2.0 * M * N * K;
            const char* form_name[] = {"forward", "dinp", "dweight"};
            printf("%-8s %-8s %6d %6d %6d %9.3f %9.1f %9.3f\n", s.name, form_name[form], M, N, K, med,
                   flops / (med * 1e-3) * 1e-9, ms[0]);
            step_ms += s.per_step * med;
            step_best_ms += s.per_step * ms[0];
            step_flops += s.per_step * flops;
        }
    }
    printf("one GPT-2 124M step of matmuls (12 layers x 4 x 3 + LM head x 3): %.1f GFLOP in %.0f ms = %.1f GFLOP/s\n",
           step_flops * 1e-9, step_ms, step_flops / (step_ms * 1e-3) * 1e-9);
    // The box may be shared (compilers, other jobs): the sum of the best runs is the number to
    // compare when tuning, the median what to expect.
    printf("same from the best of each shape's runs: %.0f ms = %.1f GFLOP/s\n", step_best_ms,
           step_flops / (step_best_ms * 1e-3) * 1e-9);
    return 0;
}
