"""The PyTorch baseline of `make bench`: a plain GPT-2 124M in PyTorch, timed like the GPU trainer.

    python dev/bench_pytorch.py [--batch-size 64] [--seq-len 1024] [--steps 20] [--warmup 5]

The model is nanoGPT's GPT-2 (the same shapes as valuepath's --arch gpt2 defaults: L=12, C=768,
H=12, vocabulary 50257 padded to 50304, learned positions, biases, tied embeddings, GELU tanh),
trained the way a PyTorch user would do it fast on one GPU: fp32 weights with bf16 autocast,
F.scaled_dot_product_attention(is_causal=True) (FlashAttention kernels), torch.compile, fused
AdamW, global-norm clipping at 1.0. One step = zero_grad, forward, backward, clip, AdamW, the
loss read back to the host (as valuepath's step does); timed with CUDA events, median of the
timed steps after the warmup steps (the first steps include compilation).

MFU uses the same formula as dev/cuda/bench_gpt.cu: FLOPs per token = 6 N + 12 L C T (PaLM,
appendix B), N = parameters without the position table, divided by the device's dense bf16 peak
(989.4 TFLOP/s H100 SXM / H200, 835 H100 NVL / H200 NVL, 756 H100 PCIe, 312 A100; --peak-tflops
overrides).

If B=64 does not fit in memory, the step is split into micro-batches with gradient accumulation
(the same tokens per step); the line printed says so.
"""

import argparse
import math
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=-1)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()

    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError:
        print("skipped: no PyTorch (bench_pytorch)")
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA device (bench_pytorch)")
        return 0

    L, C, H, V, Vp, maxT = 12, 768, 12, 50257, 50304, 1024
    B, T = args.batch_size, args.seq_len

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)
            self.wpe = nn.Embedding(maxT, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, Vp, bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits[..., :V].reshape(-1, V).float(), targets.reshape(-1))

    torch.manual_seed(1337)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = GPT().to(dev)
    n_params = sum(p.numel() for p in model.parameters())  # the tied weight counted once
    N = n_params - model.wpe.weight.numel()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    cmodel = model if args.no_compile else torch.compile(model)
    name = torch.cuda.get_device_name(0)
    peak = args.peak_tflops
    if peak < 0:
        peak = (756.0 if "PCIe" in name else 835.0 if "NVL" in name else 989.4) if ("H100" in name or "H200" in name) else (312.0 if "A100" in name else 0.0)
    flops_per_step = (6.0 * N + 12.0 * L * C * T) * B * T

    def run(micro):
        steps_per = B // micro
        gen = torch.Generator(device=dev)
        gen.manual_seed(1)
        times = []
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for step in range(args.warmup + args.steps):
            idx = torch.randint(0, V, (B, T), device=dev, generator=gen)
            tgt = torch.randint(0, V, (B, T), device=dev, generator=gen)
            start.record()
            opt.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for s in range(steps_per):
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                    loss = cmodel(idx[s * micro:(s + 1) * micro], tgt[s * micro:(s + 1) * micro]) / steps_per
                loss.backward()
                loss_sum = loss_sum + loss.detach()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss_value = float(loss_sum)  # the host waits for the loss, as valuepath's step does
            stop.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(stop)
            print(f"step {step:2d}{' (warmup)' if step < args.warmup else ''}: loss {loss_value:.4f}, norm {float(norm):.3f}, {ms:.2f} ms, {B * T / (ms / 1000):.0f} tok/s", flush=True)
            if step >= args.warmup:
                times.append(ms)
        return times

    micro = B
    while True:
        try:
            torch.cuda.reset_peak_memory_stats()
            times = run(micro)
            break
        except torch.cuda.OutOfMemoryError:
            if micro == 1:
                raise
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            micro //= 2
            print(f"out of memory: retrying with micro-batches of {micro} and gradient accumulation", flush=True)
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    tok_s = B * T / (med / 1000)
    achieved = flops_per_step / (med / 1000) / 1e12
    mem = torch.cuda.max_memory_allocated() / 2**30
    print(f"torch {torch.__version__}, {name}, {n_params} parameters (N = {N} without wpe), B={B} (micro-batch {micro}) T={T}, compile={not args.no_compile}")
    print(f"median over {n} steps: {med:.2f} ms/step, {tok_s:.0f} tok/s, {achieved:.1f} TFLOP/s achieved" + (f", MFU {100 * achieved / peak:.1f}% of {peak:.1f} TFLOP/s" if peak > 0 else ""))
    print(f'BENCH impl=pytorch precision=bf16-autocast device="{name}" B={B} T={T} micro_batch={micro} ms_per_step={med:.3f} tok_per_s={tok_s:.0f} '
          f"tflops={achieved:.1f} mfu={achieved / peak if peak > 0 else 0:.4f} peak_mem_gib={mem:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
