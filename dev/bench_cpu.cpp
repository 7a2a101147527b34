// dev/bench_cpu.cpp: ms per training step of the CPU reference at GPT-2 124M shapes.
//
// llm.c's CPU configuration: B=4, T=64, random init, random tokens; one step = forward,
// backward, AdamW update. Prints every step and the median of the timed steps (the first step
// allocates activations and optimizer state and is reported as warmup). A figure, never a test.
//   make bench-cpu            (flags: --steps N --batch-size B --seq-len T --arch gpt2|llama)
#define TESTING
#include "train_gpt_cpu.cpp"

int main(int argc, char** argv) {
    int steps = 6, B = 4, T = 64;
    std::string arch = "gpt2";
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string f = argv[i];
        if (f == "--steps") steps = atoi(argv[i + 1]);
        else if (f == "--batch-size") B = atoi(argv[i + 1]);
        else if (f == "--seq-len") T = atoi(argv[i + 1]);
        else if (f == "--arch") arch = argv[i + 1];
        else usage_error("flags: --steps N --batch-size B --seq-len T --arch gpt2|llama", "unknown flag %s", argv[i]);
    }
    RunConfig rc;
    const char* no_args[] = {"bench_cpu"};
    parse_command_line(&rc, 1, (char**)no_args);  // defaults: GPT-2 124M shapes
    rc.arch = arch;
    ModelConfig c = model_config_from_flags(rc);
    GPT<float> m;
    gpt_build(&m, c);
    gpt_init_params(&m, 1337);
    Rng r = rng_stream(1, 2);
    std::vector<int> inp(B * T), tgt(B * T);
    printf("bench_cpu: %s L=%d C=%d H=%d V=%d, %zu parameters, B=%d T=%d, %d OpenMP threads\n", arch_name(c.arch), c.n_layer, c.n_embd, c.n_head,
           c.vocab_size, m.num_params, B, T, omp_get_max_threads());
    std::vector<double> times;
    for (int step = 0; step <= steps; step++) {
        for (int i = 0; i < B * T; i++) {
            inp[i] = (int)(rng_next_u64(&r) % c.vocab_size);
            tgt[i] = (int)(rng_next_u64(&r) % c.vocab_size);
        }
        auto t0 = std::chrono::steady_clock::now();
        gpt_forward(&m, inp.data(), tgt.data(), B, T);
        auto t1 = std::chrono::steady_clock::now();
        gpt_zero_grad(&m);
        gpt_backward(&m, 1.0f);
        auto t2 = std::chrono::steady_clock::now();
        AdamWSettings s = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1e-4f};
        gpt_update(&m, s, step + 1);
        auto t3 = std::chrono::steady_clock::now();
        auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
        printf("step %d%s: loss %.4f | forward %.0f ms, backward %.0f ms, update %.0f ms | total %.0f ms\n", step, step == 0 ? " (warmup)" : "", m.mean_loss,
               ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t0, t3));
        if (step > 0) times.push_back(ms(t0, t3));
    }
    std::sort(times.begin(), times.end());
    double median = times.size() % 2 ? times[times.size() / 2] : 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
    printf("median step time: %.0f ms over %zu steps (%.0f tok/s)\n", median, times.size(), B * T / (median / 1000.0));
    gpt_free(&m);
    return 0;
}
