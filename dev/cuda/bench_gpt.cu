/*
Benchmark of the GPU trainer: tok/s, ms per step, MFU and peak memory of full training steps.
A figure, never a test. `make bench` runs it at GPT-2 124M shapes, B=64, T=1024, bf16, and then
dev/bench_pytorch.py (the same model in plain PyTorch) in the same call, on the same device.

  ./build/dev/cuda/bench_gpt [--batch-size 64] [--seq-len 1024] [--steps 20] [--warmup 5]
                             [--arch gpt2|llama] [--recompute 0|1|2] [--peak-tflops X]
                             [--attention-version 4|2] [--attention-forward 4|5|6] [--attention-dq 4|6]
                             [--attention-dkdv 4|6] [--bias-grad-epilogue 0|1]
                             [--depth-fused-forward 0|1] [--depth-fused-backward 0|1] [--ab-rounds R]

A step is exactly what host/train_loop.h does per optimizer step: zero_grad, forward (with the
loss copied to the host), backward, global gradient norm, AdamW. Random tokens. Each step is
timed with CUDA events around it (the host waits for the loss and the norm anyway); we report the
median of the timed steps after the warmup steps.

MFU. FLOPs per token = 6 N + 12 L C T: the PaLM paper's formula (appendix B), as used by nanoGPT
and llm.c. N = parameters excluding the position table wpe (nanoGPT's count; the tied token
embedding counts because it is also the LM head), and 12 L C T counts the attention scores and
their backward without the causal halving. FLOPs per step = that x B x T. MFU divides the
achieved FLOP/s by the dense bf16 tensor-core peak of the device: 989.4 TFLOP/s for an H100 SXM
(and H200), 756 for an H100 PCIe, 312 for an A100 (NVIDIA datasheets, without sparsity); FP32
builds use the fp32 non-tensor-core peak (67 H100 SXM, 19.5 A100). --peak-tflops overrides.
dev/bench_pytorch.py uses the same formula and the same N.

--attention-version 2 runs the tensor-core attention kernels without cp.async double buffering
(versions 2 and 3 of kernels/attention.cuh) instead of the trainer's version 4: the same bits,
so the difference in ms/step is what the asynchronous loads buy (dev/device_check.sh runs both).
--attention-forward 4|5|6|7, --attention-dq 4|6|7 and --attention-dkdv 4|6|7 choose the version of
each attention kernel: 6 (Hopper's wgmma, head dim 64; version 4 where it cannot run) is the
default for all three, 7 is 6 with the block's own rows held in registers (the variants att_v7 and
att_v7_bwd), 4 is mma.sync (the variant att_v4 of dev/bench_variants.list runs all three at 4),
5 the forward with 32 query rows per warp (the variant att_fwd5), the dQ kernel's 8 dQ = dS K from
the dS^T tiles that the dK/dV kernel (any version) writes to scratch (variants att_dq8,
att_v7_dq8). --bias-grad-epilogue 1 takes the bias gradients from the weight-gradient GEMMs'
BGRADB epilogue instead of bias_backward's own pass over dout (variant bias_bgradb;
kernels/matmul.cuh); the BENCH line counts the GEMM shapes for which cuBLASLt had no such
algorithm (bias_grad_refused), where the own pass stayed.
--depth-fused-forward 1 (Depth's binary) makes the depth softmax and mix inside the attention
forward instead of by a kernel before it, --depth-fused-backward 1 its backward inside the
attention backward's dK/dV kernel instead of after it (kernels/depth_attention.cuh). The fused
forward joins version 4's forward only (elsewhere the depth kernel runs before it); the fused
backward joins the dK/dV kernel of versions 4, 6 and 7.

--ab-rounds R: an A/B of the kernel flags given (the variant) against the binary's defaults (the
plain build) in this one process: warmup steps each way, then R rounds, each running steps / R
timed steps (rounded up) one way and as many the other, the order flipping every round (variant
first in rounds 0, 2, ...: ABBA, so a drift in clocks or temperature falls on both). It prints
each way's median and their ratio (a BENCH_AB line) instead of the BENCH line. dev/device_check.sh
times the variants of dev/bench_variants.list that are bench_gpt flags so: the two ways share the
allocation, the cuBLASLt state and the machine's moment, and one process start instead of four.

Peak memory: the device memory the model allocated (parameters, gradients, AdamW state,
activations and scratch, the cuBLASLt workspace), and the device's used memory (total - free)
at the end, which also counts the CUDA context; and, of the allocation, the value path's own
buffers (train_gpt.cu ValuePathBuffers: accumulators, Depth's v~ and alpha).

Value paths: one binary per path (build/dev/cuda/bf16/bench_gpt_<path>, VALUE_PATH at compile
time, the path's default settings: SLA (n_l, n_h) = (9, 9), Depth stride 6 on GPT-2 124M,
ResFormer lambda fixed at 1/2). dev/bench_paths.sh runs them all in one call and prints each
path's step time relative to vanilla's.
*/
#define TESTING
#include "train_gpt.cu"

// one forward with targets; returns the mean loss (either build's model)
template <typename M>
static float forward_loss(M* m, const int* inputs, const int* targets, int B, int T) {
    gpt_forward(m, inputs, targets, B, T);
    return m->mean_loss;
}

// The run-time kernel switches a bench_gpt flag sets (the A/B's two ways)
struct KernelChoice {
    int attention_tc, attention_forward, attention_dq, attention_dkdv, bias_grad_epilogue, depth_fused_forward, depth_fused_backward;
};
static KernelChoice current_kernel_choice() {
    return {gpu::attention_tc_version, gpu::attention_forward_version, gpu::attention_dq_version, gpu::attention_dkdv_version,
            gpu::matmul_bias_grad_epilogue, gpu::depth_fused_forward, gpu::depth_fused_backward};
}
static void apply_kernel_choice(const KernelChoice& k) {
    gpu::attention_tc_version = k.attention_tc;
    gpu::attention_forward_version = k.attention_forward;
    gpu::attention_dq_version = k.attention_dq;
    gpu::attention_dkdv_version = k.attention_dkdv;
    gpu::matmul_bias_grad_epilogue = k.bias_grad_epilogue;
    gpu::depth_fused_forward = k.depth_fused_forward;
    gpu::depth_fused_backward = k.depth_fused_backward;
}

// The kernel switches' fields of the BENCH and BENCH_AB lines, and the line's end
static void print_kernel_fields(const KernelChoice& k) {
    printf("attention_version=%d attention_forward=%d attention_dq=%d attention_dkdv=%d bias_grad_epilogue=%d bias_grad_refused=%zu "
           "depth_fused_forward=%d depth_fused_backward=%d\n",
           k.attention_tc, k.attention_forward, k.attention_dq, k.attention_dkdv, k.bias_grad_epilogue, gpu::matmul_state().refused.size(),
           k.depth_fused_forward, k.depth_fused_backward);
}

static double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int main(int argc, char** argv) {
    int B = 64, T = 1024, steps = 20, warmup = 5, recompute = 0, attention_version = 4, attention_forward = gpu::attention_forward_version,
        attention_dq = gpu::attention_dq_version, attention_dkdv = gpu::attention_dkdv_version, bias_grad_epilogue = gpu::matmul_bias_grad_epilogue, depth_fused_forward = gpu::depth_fused_forward,
        depth_fused_backward = gpu::depth_fused_backward, ab_rounds = 0;
    const KernelChoice plain_choice = current_kernel_choice();  // the binary's defaults: the A/B's plain way
    double peak = -1;
    std::string arch = "gpt2";
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string f = argv[i];
        if (f == "--batch-size") B = atoi(argv[i + 1]);
        else if (f == "--seq-len") T = atoi(argv[i + 1]);
        else if (f == "--steps") steps = atoi(argv[i + 1]);
        else if (f == "--warmup") warmup = atoi(argv[i + 1]);
        else if (f == "--arch") arch = argv[i + 1];
        else if (f == "--recompute") recompute = atoi(argv[i + 1]);
        else if (f == "--peak-tflops") peak = atof(argv[i + 1]);
        else if (f == "--attention-version") attention_version = atoi(argv[i + 1]);
        else if (f == "--attention-forward") attention_forward = atoi(argv[i + 1]);
        else if (f == "--attention-dq") attention_dq = atoi(argv[i + 1]);
        else if (f == "--attention-dkdv") attention_dkdv = atoi(argv[i + 1]);
        else if (f == "--bias-grad-epilogue") bias_grad_epilogue = atoi(argv[i + 1]);
        else if (f == "--depth-fused-forward") depth_fused_forward = atoi(argv[i + 1]);
        else if (f == "--depth-fused-backward") depth_fused_backward = atoi(argv[i + 1]);
        else if (f == "--ab-rounds") ab_rounds = atoi(argv[i + 1]);
        else usage_error("flags: --batch-size --seq-len --steps --warmup --arch --recompute --peak-tflops --attention-version --attention-forward --attention-dq "
                         "--attention-dkdv --bias-grad-epilogue --depth-fused-forward --depth-fused-backward --ab-rounds",
                         "unknown flag %s", argv[i]);
    }
    if (argc % 2 == 0) usage_error("flags come in pairs: --flag value", "%s has no value", argv[argc - 1]);
    if (ab_rounds < 0 || steps < 1 || warmup < 0) usage_error("--ab-rounds >= 0 (0: no A/B), --steps >= 1, --warmup >= 0", "--ab-rounds %d --steps %d --warmup %d", ab_rounds, steps, warmup);
    if (attention_version != 4 && attention_version != 2)
        usage_error("--attention-version 4 (cp.async double buffering, the trainer's) or 2 (without)", "--attention-version %d", attention_version);
    gpu::attention_tc_version = attention_version;
    // the attention kernels' versions: 4 (mma.sync), 6 (wgmma, the default where it can run) or 7
    // (6 with the block's own rows as A fragments in registers); the forward also 5 (version 4
    // with 32 query rows per warp), the dQ kernel also 8 (dQ from the dS^T that the dK/dV kernel
    // writes to scratch)
    enum { FORWARD, DQ, DKDV };
    auto kernel_version = [](const char* flag, int version, int kernel, int* dst) {
        bool ok = version == 4 || version == 6 || version == 7 || (kernel == FORWARD && version == 5) || (kernel == DQ && version == 8);
        if (!ok)
            usage_error(kernel == FORWARD ? "use 4 (mma.sync), 5 (32 query rows per warp), 6 (wgmma, Hopper, head dim 64; the default) or 7 (6 with Q in registers)"
                        : kernel == DQ    ? "use 4 (mma.sync), 6 (wgmma, Hopper, head dim 64; the default), 7 (6 with the block's rows in registers) or 8 "
                                            "(dQ from the dK/dV kernel's dS)"
                                          : "use 4 (mma.sync), 6 (wgmma, Hopper, head dim 64; the default) or 7 (6 with the block's rows in registers)",
                        "%s %d", flag, version);
        *dst = version;
    };
    kernel_version("--attention-forward", attention_forward, FORWARD, &gpu::attention_forward_version);
    kernel_version("--attention-dq", attention_dq, DQ, &gpu::attention_dq_version);
    kernel_version("--attention-dkdv", attention_dkdv, DKDV, &gpu::attention_dkdv_version);
    // the bias gradients: 0 (bias_backward's own pass, the default) or 1 (the weight-gradient GEMM's BGRADB epilogue)
    if (bias_grad_epilogue != 0 && bias_grad_epilogue != 1)
        usage_error("--bias-grad-epilogue 0 (bias_backward, the default) or 1 (cuBLASLt's BGRADB epilogue)", "--bias-grad-epilogue %d", bias_grad_epilogue);
    gpu::matmul_bias_grad_epilogue = bias_grad_epilogue;
    // Depth's depth softmax and its backward: 0 (their own kernels, the default) or 1 (inside the
    // attention kernels)
    if (depth_fused_forward != 0 && depth_fused_forward != 1)
        usage_error("--depth-fused-forward 0 (its own kernel, the default) or 1 (in the attention forward)", "--depth-fused-forward %d", depth_fused_forward);
    if (depth_fused_backward != 0 && depth_fused_backward != 1)
        usage_error("--depth-fused-backward 0 (its own kernel, the default) or 1 (in the dK/dV kernel)", "--depth-fused-backward %d", depth_fused_backward);
    gpu::depth_fused_forward = depth_fused_forward;
    gpu::depth_fused_backward = depth_fused_backward;
    const KernelChoice variant_choice = current_kernel_choice();
    if (ab_rounds > 0 && memcmp(&plain_choice, &variant_choice, sizeof(KernelChoice)) == 0)
        usage_error("--ab-rounds compares the kernel flags given against the defaults: give at least one that differs from them", "--ab-rounds %d and no such flag", ab_rounds);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("skipped: no CUDA device (bench_gpt)\n");
        return 0;
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    if (peak < 0) peak = gpu::device_peak_tflops(prop);

    RunConfig rc;
    const char* no_args[] = {"bench_gpt"};
    parse_command_line(&rc, 1, (char**)no_args);  // the defaults: GPT-2 124M shapes
    rc.arch = arch;
    ModelConfig c = model_config_from_flags(rc);
    GpuModel m;
    m.options.recompute = recompute;
    // dQ version 8's scratch, in the one allocation, where either way of an A/B runs it
    gpu::attention_ds_reserve = variant_choice.attention_dq == 8 || plain_choice.attention_dq == 8;
    gpt_build(&m, c);
    gpt_init_params(&m, 1337);
    double N = (double)params_for_flops(c, m.num_params);
    double flops_per_token = training_flops_per_token(c, m.num_params, T);
    double flops_per_step = flops_per_token * B * T;
    printf("bench_gpt: %s %s L=%d C=%d H=%d V=%d, %zu parameters (N = %.0f without wpe), B=%d T=%d, --recompute %d, attention version %d, %s\n", PRECISION_NAME,
           arch_name(c.arch), c.n_layer, c.n_embd, c.n_head, c.vocab_size, m.num_params, N, B, T, recompute, attention_version, prop.name);

    Rng r = rng_stream(1, 2);
    std::vector<int> inp((size_t)B * T), tgt((size_t)B * T);
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    // one training step as host/train_loop.h runs it (new random tokens each), timed by events
    int step = 0;
    auto timed_step = [&](const char* label) {
        for (size_t i = 0; i < inp.size(); i++) {
            inp[i] = (int)(rng_next_u64(&r) % c.vocab_size);
            tgt[i] = (int)(rng_next_u64(&r) % c.vocab_size);
        }
        cudaCheck(cudaEventRecord(e0, m.stream));
        gpt_zero_grad(&m);
        float loss = forward_loss(&m, inp.data(), tgt.data(), B, T);
        gpt_backward(&m, 1.0f);
        float norm = (float)gpt_grad_norm(&m);
        AdamWSettings s = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, norm > 1.0f ? 1.0f / norm : 1.0f, 6e-4f};
        gpt_update(&m, s, step + 1);
        cudaCheck(cudaEventRecord(e1, m.stream));
        cudaCheck(cudaEventSynchronize(e1));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        printf("step %2d%s: loss %.4f, norm %.3f, %.2f ms, %.0f tok/s\n", step, label, loss, norm, ms, B * T / (ms / 1000.0));
        step++;
        return (double)ms;
    };
    if (ab_rounds > 0) {
        // A/B in this process (--ab-rounds): warmup each way, then ABBA rounds of per_round steps
        int per_round = CEIL_DIV(steps, ab_rounds);
        std::vector<double> t_variant, t_plain;
        for (int way = 0; way < 2; way++) {
            apply_kernel_choice(way == 0 ? plain_choice : variant_choice);
            for (int i = 0; i < warmup; i++) timed_step(way == 0 ? " (warmup, plain)" : " (warmup, variant)");
        }
        for (int round = 0; round < ab_rounds; round++)
            for (int half = 0; half < 2; half++) {
                bool variant = (round % 2 == 0) == (half == 0);
                apply_kernel_choice(variant ? variant_choice : plain_choice);
                for (int i = 0; i < per_round; i++) (variant ? t_variant : t_plain).push_back(timed_step(variant ? " [variant]" : " [plain]"));
            }
        double med_v = median_of(t_variant), med_p = median_of(t_plain);
        printf("A/B over %d rounds of %d steps each way (ABBA): variant %.2f ms/step, plain %.2f ms/step (medians)", ab_rounds, per_round, med_v, med_p);
        if (med_p > 0) printf(", ratio %.4f", med_v / med_p);
        printf("\n");
        // one machine-readable line for dev/device_check.sh (ratio 0: no time measured, the emulator)
        printf("BENCH_AB impl=valuepath path=%s precision=%s device=\"%s\" B=%d T=%d variant_ms=%.3f plain_ms=%.3f ratio=%.4f rounds=%d steps_per_round=%d ",
               value_path_name(c.vp.path), PRECISION_NAME, prop.name, B, T, med_v, med_p, med_p > 0 ? med_v / med_p : 0.0, ab_rounds, per_round);
        print_kernel_fields(variant_choice);
        gpt_free(&m);
        return 0;
    }
    std::vector<double> times;
    for (int i = 0; i < warmup; i++) timed_step(" (warmup)");
    for (int i = 0; i < steps; i++) times.push_back(timed_step(""));
    double med = median_of(times);
    double tok_s = B * T / (med / 1000.0);
    double achieved = flops_per_step / (med / 1000.0) / 1e12;
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    double model_gib = (m.bytes_allocated + gpu::matmul_state().workspace_bytes) / 1073741824.0, used_gib = (total_b - free_b) / 1073741824.0;
    printf("median over %zu steps: %.2f ms/step, %.0f tok/s, %.1f TFLOP/s achieved", times.size(), med, tok_s, achieved);
    if (peak > 0) printf(", MFU %.1f%% of %.1f TFLOP/s", 100.0 * achieved / peak, peak);
    gpu::ValuePathBuffers vp_plan_only;  // value_path_plan only records where pointers would go
    double vp_gib = gpu::plan_bytes(gpu::value_path_plan(vp_plan_only, c, B, T)) / 1073741824.0;
    printf("\nmemory: %.2f GiB allocated by the trainer (value path %s: %.3f GiB of it), %.2f GiB used on the device\n", model_gib,
           value_path_name(c.vp.path), vp_gib, used_gib);
    // one machine-readable line for make bench / dev/device_check.sh
    printf("BENCH impl=valuepath path=%s precision=%s device=\"%s\" B=%d T=%d ms_per_step=%.3f tok_per_s=%.0f tflops=%.1f mfu=%.4f peak_mem_gib=%.2f "
           "vp_mem_gib=%.3f ",
           value_path_name(c.vp.path), PRECISION_NAME, prop.name, B, T, med, tok_s, achieved, peak > 0 ? achieved / peak : 0.0, used_gib, vp_gib);
    print_kernel_fields(variant_choice);
    gpt_free(&m);
    return 0;
}
