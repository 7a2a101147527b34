"""dev/reference/fuzz_states.py: random reference states, for a differential check over many shapes.

The 18 committed states (make_states.py) fix one shape per family. This draws N random
configurations, deterministically from a seed, and writes one state per configuration in the
same format, computed the same way (make_states.state_of_config: the PyTorch reference in
float64, the same random weights and the same batch search), so that the corner shapes are
compared too: one layer, one head, odd head dims, D != C/H, GQA groups of 3, T = 1, a vocab of 2,
SLA with n_l >= L or n_h = 0 or n_h = H, Depth strides past L, and so on.

    .venv/bin/python dev/reference/fuzz_states.py --count 60 --seed 1 --out build/fuzz_states
    VP_REFERENCE_STATES_DIR=build/fuzz_states build/tests/test_reference_states   # compare the C++ with them

    .venv/bin/python dev/reference/fuzz_states.py --seed 1 --only 17 --out DIR       # one config again
    .venv/bin/python dev/reference/fuzz_states.py --seed 1 --count 60 --list         # the configs, nothing computed

Configuration i of seed S depends only on (S, i), so `--only i` writes exactly the state that
`--count N` (N > i) wrote. The file of configuration i is fuzz<S>_<iiii>_<family>_<path>.bin.

The bounds of tests/test_reference_states.cpp hold where float32 rounding alone moves the results
by at most a tenth of each bound (its header comment). The committed states were chosen so; a
random shape need not be (e.g. a gpt2 LayerNorm over C = 2 features, whose standard backward
loses most digits in float32: 1 - xhat^2 ~ eps/var by cancellation). So the batch search also asks
that the float32 yardstick stay within FP32_LIMITS: for each compared figure the larger of
  * the float32 noise: the same reference in float32 against float64, and
  * the sensitivity: how far float64 moves when the parameters are moved by one float32 rounding
    (3 random draws), the least any float32 computation perturbs its inputs by;
over 2379 states (seeds 2 to 6, 2026-12) the C++ float32 error of the logits and of the gradients
was at most 4.5x this yardstick (median 0.8), and the largest C++ float32 errors were a quarter of
a bound or less (logits 2.1e-6, gradients 1.1e-5, gradient norms 2.5e-5, 10-step losses 3.3e-6).
Where no batch in 50 draws has a trajectory that crosses the clip threshold with the 2% margin
and stays within the limits, the state is written without one ("train": null, as
make_states.py's extreme-regime states); where
none meets even the forward's, it is written with "fp32_check": false, and the C++ compares only
its float64 run. The generator prints how many of each it wrote.
"""

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_states as S  # noqa: E402
import model as M  # noqa: E402

# The sizes stay within what the bounds of tests/test_reference_states.cpp were derived for (its
# header comment): every sum the forward and backward compute has at most ~64 terms, so float32
# rounding stays at ~sqrt(K) u .. K u <= 4e-6 relative, and the bounds keep their >10x margin.
#   * B*T <= 16: the positions summed in every weight gradient
#   * C <= 16 and H*D <= 64 and (H + 2 Hkv)*D <= 64: the contractions of the qkv projection, of
#     attproj and of their input gradients (the committed qwen3 state has (4 + 2*2)*8 = 64)
#   * F <= 64 for gpt2 (fcproj sums F terms), F <= 32 for llama (fc has 2F rows, so the input
#     gradient of fc sums 2F <= 64 terms)
#   * T <= 8 keys in the attention's softmax, L <= 5 layers (as the committed states; Depth mixes
#     at most L candidates, SLA's chain at most L layers deep)
#   * V <= 97 (the committed states' vocab: the softmax and the head's input gradient sum V terms,
#     dominated by the few large probabilities)
MAX_BT, MAX_C, MAX_HD, MAX_QKV, MAX_F_GPT2, MAX_F_LLAMA, MAX_T, MAX_L, MAX_V = 16, 16, 64, 64, 64, 32, 8, 5, 97
BATCH_DRAWS = 50  # as make_states.compute_state
# A tenth of each float32 bound of tests/test_reference_states.cpp (BOUNDS_F32: loss, logits,
# per-position losses 1e-5, each gradient tensor 5e-5, first gradient norm 1e-5, gradient norms
# after updates 1e-4; keep them in step). The trajectory's losses have make_states' own 2e-6.
FP32_LIMITS = {"loss": 1e-6, "logits": 1e-6, "losses": 1e-6, "grads": 5e-6, "norm0": 1e-6, "grad_norms": 1e-5}


def exact_zero_grads(cfg, idx):
    """The gradient elements that are 0 in exact arithmetic, where torch's autograd leaves rounding
    (make_states.forward_state stores them as 0, after checking that torch's values are rounding).
    T = 1: the attention of a single key has the weight 1 whatever q and k are, so the main
    attention gives q and k no gradient (torch's SDPA backward leaves ~1e-17 there, for some head
    dims); every q, k weight, bias and QK-norm gain gets none, except Depth's: its depth softmax
    reads the q of every layer l >= 1 and the k of every layer when L > 1 (layer 0's as anchor)."""
    mask = torch.zeros(M.num_params(cfg), dtype=torch.bool)
    if idx.shape[1] != 1:
        return mask
    V = {name: mask[off:off + n].view(shape) for name, shape, off, n in M.param_offsets(cfg)[0]}
    L, HD = cfg.n_layer, cfg.n_head * cfg.head_dim
    q_layers, k_layers = range(L), range(L)
    if cfg.path == "depth":
        q_layers, k_layers = [0], ([0] if L == 1 else [])
    for l in q_layers:
        V["qk_w"][l, :HD] = True
        if "qk_b" in V:
            V["qk_b"][l, :HD] = True
        if "q_norm_w" in V:
            V["q_norm_w"][l] = True
    for l in k_layers:
        V["qk_w"][l, HD:] = True
        if "qk_b" in V:
            V["qk_b"][l, HD:] = True
        if "k_norm_w" in V:
            V["k_norm_w"][l] = True
    return mask


def draw_config(seed, i):
    """Configuration i of seed `seed`: (cfg, B, T, param_seed, batch seeds, a short description).
    Only what the C++ trainer accepts (host/config.h model_config_from_flags and
    model_config_problem, host/value_path.h value_path_config_from_flags): gpt2 has G = 1, no
    QK-norm, no tie, D = C/H (odd D allowed); a llama has an even D (RoPE), given by --head-dim or
    C/H; SLA's n_h is a multiple of G and at most H; n_l and the Depth stride are >= 1."""
    rng = np.random.default_rng([seed, i])
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    arch = pick(["gpt2", "llama"])
    path = pick(M.PATHS)
    L = int(rng.integers(1, MAX_L + 1))
    T = int(rng.integers(1, MAX_T + 1))
    B = int(rng.integers(1, MAX_BT // T + 1))
    max_seq_len = T + int(rng.integers(0, 9))     # gpt2: wpe rows T.. get no gradient
    V = int(rng.integers(2, MAX_V + 1))           # Vp = 128: never a multiple of the padding
    kw = {}
    if arch == "gpt2":
        G = 1
        H = int(rng.integers(1, 7))
        # C = H*D in 2..16, D odd or even. Not C = 1: LayerNorm over one feature outputs its bias,
        # so the model ignores its input (every block's gradient is 0 in exact arithmetic)
        D = int(rng.integers(1 + (H == 1), MAX_C // H + 1))
        C, Hkv = H * D, H
        F = 4 * C if rng.random() < 0.5 else int(rng.integers(1, MAX_F_GPT2 + 1))  # --ffn-dim or 4C
    else:
        G = pick([1, 2, 3])
        Hkv = int(rng.integers(1, 6 // G + 1))
        H = G * Hkv                               # H <= 6
        if rng.random() < 0.5:                    # --head-dim D: free of C (Qwen3), even
            D = pick([d for d in (2, 4, 6, 8, 10, 12, 16) if H * d <= MAX_HD and (H + 2 * Hkv) * d <= MAX_QKV])
            C = int(rng.integers(2, MAX_C + 1))
            kw["head_dim"] = D
        else:                                     # D = C/H, even
            D = pick([d for d in (2, 4, 6, 8, 16) if H * d <= MAX_C])
            C = H * D
        F = int(rng.integers(1, MAX_F_LLAMA + 1))
        kw.update(Hkv=Hkv, qk_norm=int(rng.integers(2)), tie_embeddings=int(rng.integers(2)),
                  rope_theta=pick([10.0, 500.0, 10000.0, 1e6]))
    if path == "resformer":
        kw["resformer_lambda"] = pick(["fixed", "learn"])
        if kw["resformer_lambda"] == "learn":
            kw["resformer_lambda_lr"] = pick([0.02, 0.0, 0.1])
    elif path == "sla":
        kw.update(sla_layers=int(rng.integers(1, L + 2)),                  # 1..L+1: n_l >= L is vanilla
                  sla_heads=G * int(rng.integers(0, Hkv + 1)),             # 0..H in whole KV groups
                  sla_chain=int(rng.integers(2)))
    elif path == "depth":
        kw["depth_stride"] = int(rng.integers(1, L + 2))                   # 1..L+1
    cfg = M.make_config(arch, L, H, C, V, max_seq_len, F=F, path=path, **kw)
    param_seed = int(rng.integers(2**31))
    first = int(rng.integers(2**31 - BATCH_DRAWS))
    seeds = [first + a for a in range(BATCH_DRAWS)]
    return cfg, B, T, param_seed, seeds, describe(cfg, B, T)


def describe(cfg, B, T):
    s = f"{cfg.arch} {cfg.path} L{cfg.n_layer} H{cfg.n_head}/{cfg.n_kv_head} D{cfg.head_dim} C{cfg.n_embd} F{cfg.ffn_dim} V{cfg.vocab_size} B{B} T{T}"
    if cfg.arch == "llama":
        s += f" qkn{cfg.qk_norm} tie{cfg.tie_embeddings} theta{cfg.rope_theta:g}"
    if cfg.path == "resformer":
        s += f" lambda={'learn lr ' + format(cfg.resformer_lambda_lr, 'g') if cfg.resformer_learn else 'fixed'}"
    elif cfg.path == "sla":
        s += f" n_l{cfg.sla_layers} n_h{cfg.sla_heads} chain{cfg.sla_chain}"
    elif cfg.path == "depth":
        s += f" s{cfg.depth_stride}"
    return s


def state_name(seed, i, cfg):
    return f"fuzz{seed}_{i:04d}_{cfg.arch}_{cfg.path}"


def write_one(args):
    """Computes and writes state i; returns its report line (a worker of the pool)."""
    seed, i, out = args
    torch.set_num_threads(1)  # tiny tensors: threads would only spin
    t0 = time.time()
    cfg, B, T, param_seed, seeds, desc = draw_config(seed, i)
    name = state_name(seed, i, cfg)
    header, arrays = S.state_of_config(name, cfg, B, T, param_seed, seeds, fp32_limits=FP32_LIMITS, exact_zero=exact_zero_grads,
                                       generator={"script": "dev/reference/fuzz_states.py", "fuzz_seed": seed, "fuzz_index": i})
    with open(os.path.join(out, name + ".bin"), "wb") as f:
        f.write(S.encode_state(header, arrays))
    nz, sens = header["fp32_noise"], header["fp32_sensitivity"]
    kind = "fp64 only" if not header["fp32_check"] else "no trajectory" if header["train"] is None else "full"
    traj = "" if header["train"] is None else f" traj {nz['trajectory']:.1e} norms {nz['grad_norms']:.1e}"
    return (f"{name:34s} {desc}\n    {time.time() - t0:5.1f} s  {kind:13s} fp32 noise: logits {nz['logits']:.1e} "
            f"grads {max(nz['grads'].values()):.1e}{traj}  sensitivity: logits {sens['logits']:.1e} "
            f"grads {max(sens['grads'].values()):.1e}"), kind


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=0, help="configurations 0..N-1 of the seed")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--only", type=int, nargs="+", metavar="I", help="only these configuration indices")
    ap.add_argument("--out", help="directory for the states (made if missing; its fuzz<seed>_* files are replaced)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (each single-threaded)")
    ap.add_argument("--list", action="store_true", help="print the configurations only")
    ap.add_argument("--quiet", action="store_true", help="print only the summary, not a line per state")
    args = ap.parse_args()
    indices = args.only if args.only else list(range(args.count))
    if not indices:
        ap.error("give --count N or --only I...")
    if args.list:
        for i in indices:
            cfg, B, T, _, _, desc = draw_config(args.seed, i)
            print(f"{state_name(args.seed, i, cfg):34s} {desc}")
        return
    if not args.out:
        ap.error("--out DIR is required")
    os.makedirs(args.out, exist_ok=True)
    if not args.only:  # a rerun with a smaller count must not leave older states of this seed behind
        for f in os.listdir(args.out):
            if f.startswith(f"fuzz{args.seed}_") and f.endswith(".bin"):
                os.remove(os.path.join(args.out, f))
    t0 = time.time()
    work = [(args.seed, i, args.out) for i in indices]
    if args.jobs > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            results = pool.map(write_one, work, chunksize=1)
    else:
        results = [write_one(w) for w in work]
    for line, _ in results if not args.quiet else []:
        print(line)
    kinds = [r[1] for r in results]
    print(f"{len(results)} states of seed {args.seed} written to {args.out} in {time.time() - t0:.0f} s: "
          f"{kinds.count('full')} with a trajectory, {kinds.count('no trajectory')} without (no batch's trajectory within "
          f"the float32 limits), {kinds.count('fp64 only')} compared in float64 only (not even the forward within them)")


if __name__ == "__main__":
    main()
