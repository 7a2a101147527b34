"""dev/reference/make_states.py: writes the reference states the C++ builds are tested against.

One small file per (family x value path) in tests/reference_states/: config, parameters,
inputs/targets, logits, loss, every parameter gradient, and a 10-step AdamW trajectory, all
computed by the independent PyTorch reference (model.py) in float64.

    .venv/bin/python dev/reference/make_states.py            # (re)writes tests/reference_states/
    .venv/bin/python dev/reference/make_states.py --check    # recomputes, compares, writes nothing
    .venv/bin/python dev/reference/make_states.py --only llamatied_vanilla   # writes one new state

Prefer --only when adding a state. A full rewrite on another machine can change the other
states' last float64 bits, and even which batch a state draws: the batch search below keeps a
batch only if float32 follows float64 closely, and float32 rounding differs between CPUs
(seen 2026-11-26: llama_vanilla and llama_depth drew other batches on a 2-core development
machine than on the one that wrote them). --check recomputes each state from its recorded batch,
so it passes on either.

State file format (version 1, little-endian):
    bytes 0..7    magic "VPSTATE1"
    bytes 8..11   uint32 format version (1)
    bytes 12..15  uint32 J: length of the JSON header in bytes (padded with spaces to a multiple of 8)
    bytes 16..    JSON header (UTF-8), see below
    16 + J ..     data block: the arrays, each at its "offset" (bytes from the start of the data
                  block, 8-aligned), "f32" (float32) or "i32" (int32), C order
JSON header keys:
    name, format_version, generator (torch version, dtype, seeds), B, T,
    config      every ModelConfig / ValuePathConfig field (arch and path as names and as ids)
    layout      the flat parameter layout: [{name, shape, offset, count, decay}] in storage order,
                tensors with 0 elements left out; offsets/counts in elements
    num_params
    loss        mean cross-entropy (float64, printed with 17 digits)
    train       (null in the extreme-regime states, EXTREME below) the trajectory setting (lr, warmup_steps, max_steps, min_lr_frac, beta1, beta2,
                eps, weight_decay, grad_clip, steps: all hyperparameters are float32 values, as
                AdamWSettings holds them) and its results: lrs[k] and grad_norms[k] (before
                clipping) of step k = 0..steps-1, losses[k] = loss after k updates (k = 0..steps)
    zero_grad_ranges  [[offset, count]] of the flat gradient that is zero by construction
                (padded vocab rows, unseen positions/tokens, lambda_0, SLA dead slices:
                model.structural_zero_grads), for an exact-zero check
    fp32_noise  what the same reference computed in float32 differs from float64 by (for the
                test bounds, informative only)
    fp32_check, fp32_sensitivity   (only in the random states of fuzz_states.py) false: the C++
                compares its float64 run only, since float32 rounding alone would move this
                state by more than a tenth of a bound; what one float32 rounding of the
                parameters moves the float64 results by (forward_state)
    arrays      [{name, dtype, shape, offset}] for: params (num_params), grads (num_params),
                inputs (B,T) i32, targets (B,T) i32, logits (B,T,V) over the real vocab,
                losses (B,T) per-position cross-entropy
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402

MAGIC = b"VPSTATE1"
FORMAT_VERSION = 1
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
STATES_DIR = os.path.join(REPO, "tests", "reference_states")

B, T = 2, 8
V = 97  # Vp = 128: 31 padded rows, random, that must stay out of the softmax

# The two families, small (value_paths.md section 7: L >= 4; GQA group 2 for llama).
FAMILIES = {
    "gpt2": dict(arch="gpt2", L=5, H=4, C=16, V=V, max_seq_len=16),   # D = 4, F = 4C = 64, wpe rows T..15 unused
    "llama": dict(arch="llama", L=5, H=4, Hkv=2, C=16, V=V, max_seq_len=16, F=32, qk_norm=1, rope_theta=500.0),
    # llama with the output head tied to wte (--tie-embeddings 1, Qwen3's small models). The tie
    # changes only the head and the embedding's gradient, the same code for every value path, so
    # one variant covers it.
    "llamatied": dict(arch="llama", L=5, H=4, Hkv=2, C=16, V=V, max_seq_len=16, F=32, qk_norm=1, rope_theta=500.0,
                      tie_embeddings=1),
}
# The extreme regime: the same families with the embeddings and output head scaled by 12 and the
# query/key projection by 3, so that the mean loss is 63-76 nats (many targets' probabilities are
# below 1e-30, where the CPU build once capped a token's loss at 69 nats) and GPT-2's attention
# scores are 9x larger (q and k both x3; the llama's QK-norm normalizes that scale away). No
# trajectory: the batch search below finds no batch on which float32 follows float64 along it, so
# these states hold the forward and the gradients only ("train": null).
EXTREME = {"gpt2x": ("gpt2", {"wte": 12.0, "lm_head": 12.0, "qk_w": 3.0}),
           "llamax": ("llama", {"wte": 12.0, "lm_head": 12.0, "qk_w": 3.0})}
for _fam, (_base, _) in EXTREME.items():
    FAMILIES[_fam] = FAMILIES[_base]
# released Qwen3's shape (--head-dim): heads wider than C / H (H*D = 32 in C = 16), tied, QK-norm.
# Every tensor that touches the attention is H*D wide on one side and C on the other, so a build
# that confuses the two reads the wrong rows. (After the extreme families: state order is seed order.)
FAMILIES["qwen3"] = dict(arch="llama", L=5, H=4, Hkv=2, C=16, head_dim=8, V=V, max_seq_len=16, F=32, qk_norm=1,
                         rope_theta=500.0, tie_embeddings=1)
# The value paths with settings that exercise the cross-layer routes: SLA with 2*n_l < L so ORIG
# and CHAIN differ, n_h a multiple of G and below H (so both own and skip heads exist); Depth with
# s = 2 so anchor 2's mixed value (which holds v^0) is read by layers 3 and 4 (the recursion).
VARIANTS = {
    "vanilla": dict(path="vanilla"),
    "resformer_fixed": dict(path="resformer", resformer_lambda="fixed"),
    "resformer_learn": dict(path="resformer", resformer_lambda="learn", resformer_lambda_lr=0.02),
    "svformer": dict(path="svformer"),
    "sla_orig": dict(path="sla", sla_layers=2, sla_heads=2, sla_chain=0),
    "sla_chain": dict(path="sla", sla_layers=2, sla_heads=2, sla_chain=1),
    "depth": dict(path="depth", depth_stride=2),
}

# The 10-step trajectory: same batch every step (as llm.c's test), warmup 2 then cosine to 0.1x
# at step 10, AdamW (0.9, 0.95), eps 1e-8, wd 0.1, global-norm clip 2.0. The gradient norm starts
# at 6..15 and ends near 1, so in every state clipping is on for the first steps and off for the
# last ones. lr 1e-2 makes the optimizer's details visible: a wrong decay mask or lambda lr moves
# the losses by > 2e-3 relative (measured), while float32 rounding moves them by ~1e-6.
TRAIN = dict(steps=10, lr=1e-2, warmup=2, max_steps=10, min_lr_frac=0.1, beta1=0.9, beta2=0.95, eps=1e-8,
             weight_decay=0.1, grad_clip=2.0)


# the variants of each family (all of them unless listed). New states go at the end of
# state_names(): a state's seeds come from its index there, so appending keeps the others' bytes.
FAMILY_VARIANTS = {"llamatied": ["vanilla"], "gpt2x": ["vanilla"], "llamax": ["depth"], "qwen3": ["depth"]}


def state_names():
    return [f"{fam}_{var}" for fam in FAMILIES for var in FAMILY_VARIANTS.get(fam, VARIANTS)]


def state_config(name):
    fam, var = name.split("_", 1)
    kw = dict(FAMILIES[fam])
    arch = kw.pop("arch")
    L, H, C, Vv, maxT = kw.pop("L"), kw.pop("H"), kw.pop("C"), kw.pop("V"), kw.pop("max_seq_len")
    return M.make_config(arch, L, H, C, Vv, maxT, **kw, **VARIANTS[var])


def train_setting():
    """The trajectory hyperparameters as float32 values (AdamWSettings holds floats)."""
    t = dict(TRAIN)
    for k in ("lr", "min_lr_frac", "beta1", "beta2", "eps", "weight_decay", "grad_clip"):
        t[k] = M.f32(t[k])
    return t


def trajectory(cfg, params, idx, tgt, dtype):
    t = train_setting()
    return M.train_steps(cfg, params, idx, tgt, steps=t["steps"], lr=t["lr"], warmup=t["warmup"],
                         max_steps=t["max_steps"], min_lr_frac=t["min_lr_frac"], beta1=t["beta1"],
                         beta2=t["beta2"], eps=t["eps"], weight_decay=t["weight_decay"],
                         grad_clip=t["grad_clip"], dtype=dtype, hp_round=M.f32)


def scaled_err(a, ref):
    """max |a - ref| / max |ref|: the error relative to the tensor's scale."""
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    s = np.abs(ref).max()
    return float(np.abs(a - ref).max() / s) if s > 0 else float(np.abs(a).max())


def compute_state(name, index, batch_seed=None):
    """Everything a state holds, computed in float64 from float32 parameters. batch_seed given:
    use that batch (as recorded in a state) instead of searching for one."""
    extreme = EXTREME.get(name.split("_", 1)[0])
    seeds = [batch_seed] if batch_seed is not None else [2000 + 100 * index + a for a in range(50)]
    return state_of_config(name, state_config(name), B, T, 1000 + index, seeds, scale=extreme[1] if extreme else None,
                           with_train=not extreme)


def draw_batch(cfg, Bn, Tn, batch_seed):
    g = torch.Generator().manual_seed(batch_seed)
    idx = torch.randint(0, cfg.vocab_size, (Bn, Tn), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (Bn, Tn), generator=g)
    return idx, tgt


def perturbed(params, rng):
    """The float32 parameters, each moved by one float32 rounding (a relative 2^-24, random
    sign), in float64: the least that any float32 computation perturbs its inputs by."""
    return np.asarray(params, np.float64) * (1 + 2.0**-24 * rng.choice([-1.0, 1.0], size=len(params)))


def forward_state(cfg, params, idx, tgt, exact_zero=None, sensitivity_trials=0):
    """The forward and backward of a batch in float64 and float32, the structural zeros, and the
    float32 noise (what float32 moves each result by). exact_zero(cfg, idx): a mask of gradient
    elements that are 0 in exact arithmetic but not by construction in torch (its autograd leaves
    rounding there, ~1e-17 of the largest gradient): they are checked to be rounding, stored as 0
    and left out of every noise figure. sensitivity_trials > 0 adds "sensitivity": how far the float64
    results move when the parameters are perturbed by one float32 rounding (perturbed())."""
    loss, logits, per_pos, grads = M.forward_backward(cfg, params, idx, tgt, torch.float64)
    loss32, logits32, per_pos32, grads32 = M.forward_backward(cfg, params, idx, tgt, torch.float32)
    layout, n = M.param_offsets(cfg)
    zero = M.structural_zero_grads(cfg, idx)
    assert torch.all(grads[zero] == 0), "a structurally zero gradient is not zero"
    ez = None
    if exact_zero is not None:
        ez = exact_zero(cfg, idx) & ~zero
        if ez.any():
            noise_there = float(grads[ez].abs().max())
            assert noise_there <= 1e-12 * float(grads.abs().max()), f"an exactly zero gradient is {noise_there:.3g}, not rounding"
            grads[ez] = 0
            grads32[ez] = 0
    norm = float(grads.norm())

    def deviation(loss_b, logits_b, per_pos_b, grads_b):
        if ez is not None:
            grads_b = grads_b.clone()
            grads_b[ez] = 0
        return {"loss": abs(loss_b - loss) / abs(loss), "logits": scaled_err(logits_b, logits),
                "losses": scaled_err(per_pos_b, per_pos), "norm0": abs(float(grads_b.norm()) - norm) / norm,
                "grads": {nm: scaled_err(grads_b[o:o + c], grads[o:o + c]) for nm, _, o, c in layout}}

    noise32 = deviation(loss32, logits32, per_pos32, grads32)
    # (the states' fp32_noise has no norm0; train's grad_norms[0] covers it)
    noise = {k: v for k, v in noise32.items() if k != "norm0"}
    out = {"loss": loss, "logits": logits, "per_pos": per_pos, "grads": grads, "zero": zero, "noise": noise}
    if sensitivity_trials:
        rng = np.random.default_rng(0)
        sens = [deviation(*M.forward_backward(cfg, perturbed(params, rng), idx, tgt, torch.float64)) for _ in range(sensitivity_trials)]
        out["sensitivity"] = worst_of(sens)
        out["yardstick"] = worst_of(sens + [noise32])
    return out


def worst_of(devs):
    """The largest of each figure over several deviation dicts (nested dicts too)."""
    out = {}
    for k, v in devs[0].items():
        out[k] = worst_of([d[k] for d in devs]) if isinstance(v, dict) else max(d[k] for d in devs)
    return out


def find_trajectory(cfg, params, idx, tgt, norm_limit=None, sensitivity_trials=0):
    """The batch search's test of a batch: its AdamW trajectory is well conditioned in float32,
    i.e. clipping is on in some steps and off in others, every gradient norm is >= 2% away from the
    clip threshold, and the same reference in float32 follows the float64 losses to 2e-6. AdamW
    turns the sign of a near-zero gradient into a full lr step, so a rare batch amplifies float32
    rounding ~100x; such a batch would test the conditioning of the problem, not the
    implementation. norm_limit: also the gradient norms must move by at most that much, relative,
    in float32 and (sensitivity_trials > 0) in float64 from parameters perturbed by one float32
    rounding. Returns (losses, lrs, norms, traj_dev, norm_dev), or None if the batch fails."""
    losses, lrs, norms = trajectory(cfg, params, idx, tgt, torch.float64)
    clip = train_setting()["grad_clip"]
    margin_ok = min(abs(n / clip - 1) for n in norms) >= 0.02 and min(norms) < clip < max(norms)
    if not margin_ok and norm_limit is not None:
        return None  # (make_states computes float32 first, whatever the margin: the same answer)
    losses32, _, norms32 = trajectory(cfg, params, idx, tgt, torch.float32)
    traj_dev = float(np.max(np.abs(np.array(losses32) - losses) / np.abs(losses)))
    norm_dev = float(np.max(np.abs(np.array(norms32) - norms) / np.abs(norms)))
    if not (margin_ok and traj_dev < 2e-6):
        return None
    if norm_limit is not None:
        if norm_dev > norm_limit:
            return None
        rng = np.random.default_rng(0)
        for _ in range(sensitivity_trials):
            losses_p, _, norms_p = trajectory(cfg, perturbed(params, rng), idx, tgt, torch.float64)
            if (np.max(np.abs(np.array(norms_p) - norms) / np.abs(norms)) > norm_limit
                    or np.max(np.abs(np.array(losses_p) - losses) / np.abs(losses)) > 2e-6):
                return None
    return losses, lrs, norms, traj_dev, norm_dev


def fp32_within(yardstick, limits):
    """Whether every figure of a forward's float32 yardstick is within its limit (grads: per tensor)."""
    return all(all(v <= limits[k] for v in y.values()) if isinstance(y, dict) else y <= limits[k] for k, y in yardstick.items())


def state_of_config(name, cfg, Bn, Tn, param_seed, seeds, scale=None, with_train=True, generator=None,
                    fp32_limits=None, exact_zero=None, sensitivity_trials=3):
    """compute_state for any config (dev/reference/fuzz_states.py draws them): random_params(cfg,
    param_seed), multiplied tensor by tensor by `scale` ({name: factor}, the extreme regime), a
    (Bn, Tn) batch, the first of `seeds` that the batch search accepts (find_trajectory); without
    with_train, the first seed and no trajectory. No batch accepted: RuntimeError.
    fp32_limits (the fuzz states): {figure: limit} on the float32 yardstick of forward_state (the
    larger of the float32 noise and the sensitivity to one rounding of the parameters), which the
    batch must meet too, as must its gradient norms along the trajectory ("grad_norms"). If no
    batch meets everything, the state is written without a trajectory from the first batch that
    meets the forward's limits, or else from the first batch with "fp32_check": false (the C++
    then compares only its float64 run: float32 rounding alone would move this state's results
    by more than a tenth of a bound). `generator` adds entries to the header's "generator"."""
    params = M.random_params(cfg, seed=param_seed)
    if scale:
        P = M.unflatten(cfg, params)
        for tensor, factor in scale.items():
            if tensor in P:
                P[tensor].mul_(factor)  # exact in float32: the factors' products stay representable
    params = params.numpy()  # float32: what the C++ loads exactly
    fuzz = fp32_limits is not None
    chosen = forward_only = first = None  # (seed, idx, tgt, forward_state, trajectory or None)
    for batch_seed in (seeds if with_train else seeds[:1]):
        idx, tgt = draw_batch(cfg, Bn, Tn, batch_seed)
        fwd = forward_state(cfg, params, idx, tgt, exact_zero, sensitivity_trials if fuzz else 0)
        first = first or (batch_seed, idx, tgt, fwd, None)
        if fuzz and not fp32_within(fwd["yardstick"], fp32_limits):
            continue
        forward_only = forward_only or (batch_seed, idx, tgt, fwd, None)
        if not with_train:
            chosen = forward_only
            break
        traj = find_trajectory(cfg, params, idx, tgt, fp32_limits["grad_norms"] if fuzz else None, sensitivity_trials if fuzz else 0)
        if traj:
            chosen = (batch_seed, idx, tgt, fwd, traj)
            break
    fp32_check = True
    if chosen is None:
        if not fuzz:
            raise RuntimeError(f"{name}: no well-conditioned batch found")
        chosen = forward_only
        if chosen is None:  # the first batch, whose forward the loop computed
            chosen = first
            fp32_check = False
    batch_seed, idx, tgt, fwd, traj = chosen
    layout, n = M.param_offsets(cfg)
    zero = fwd["zero"]
    # as [offset, count] ranges of the flat array
    edges = torch.diff(torch.cat([torch.tensor([0]), zero.int(), torch.tensor([0])])).nonzero().view(-1).tolist()
    zero_ranges = [[a, b - a] for a, b in zip(edges[0::2], edges[1::2])]
    noise = dict(fwd["noise"], trajectory=traj[3] if traj else None, grad_norms=traj[4] if traj else None)
    noise = {k: noise[k] for k in ("loss", "logits", "losses", "trajectory", "grad_norms", "grads")}  # (the order of the states)
    t = None
    if traj:
        t = train_setting()
        t.update(lrs=traj[1], grad_norms=traj[2], losses=traj[0])
    gen = {"script": "dev/reference/make_states.py", "torch": torch.__version__, "dtype": "float64",
           "param_seed": param_seed, "batch_seed": batch_seed}
    gen.update(generator or {})
    header = {
        "name": name,
        "format_version": FORMAT_VERSION,
        "generator": gen,
        "B": Bn, "T": Tn,
        "config": dict(vars(cfg), arch_id=M.ARCHS.index(cfg.arch), path_id=M.PATHS.index(cfg.path)),
        "layout": [{"name": nm, "shape": list(sh), "offset": o, "count": c, "decay": int(nm in M.DECAY)}
                   for nm, sh, o, c in layout],
        "num_params": n,
        "loss": fwd["loss"],
        "train": t,
        "zero_grad_ranges": zero_ranges,
        "fp32_noise": noise,
    }
    if fuzz:
        header["fp32_check"] = fp32_check
        header["fp32_sensitivity"] = fwd["sensitivity"]
    arrays = [
        ("params", "f32", [n], params.astype(np.float32)),
        ("grads", "f32", [n], fwd["grads"].numpy().astype(np.float32)),
        ("inputs", "i32", [Bn, Tn], idx.numpy().astype(np.int32)),
        ("targets", "i32", [Bn, Tn], tgt.numpy().astype(np.int32)),
        ("logits", "f32", [Bn, Tn, cfg.vocab_size], fwd["logits"].numpy().astype(np.float32)),
        ("losses", "f32", [Bn, Tn], fwd["per_pos"].numpy().astype(np.float32)),
    ]
    return header, arrays


def encode_state(header, arrays):
    header = dict(header)
    header["arrays"] = []
    blob = b""
    for name, dtype, shape, a in arrays:
        a = np.ascontiguousarray(a, dtype={"f32": "<f4", "i32": "<i4"}[dtype])
        assert list(a.shape) == list(shape), (name, a.shape, shape)
        header["arrays"].append({"name": name, "dtype": dtype, "shape": list(shape), "offset": len(blob)})
        blob += a.tobytes()
        blob += b"\0" * (-len(blob) % 8)
    js = json.dumps(header, indent=1, sort_keys=False).encode()
    js += b" " * (-len(js) % 8)
    return MAGIC + struct.pack("<II", FORMAT_VERSION, len(js)) + js + blob


def read_state(path):
    """Returns (header dict, {array name: numpy array})."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != MAGIC:
        raise ValueError(f"{path}: not a valuepath reference state")
    version, jlen = struct.unpack_from("<II", raw, 8)
    if version != FORMAT_VERSION:
        raise ValueError(f"{path}: state format {version}, this reader knows {FORMAT_VERSION}")
    header = json.loads(raw[16:16 + jlen])
    data = 16 + jlen
    arrays = {}
    for a in header["arrays"]:
        dt = {"f32": "<f4", "i32": "<i4"}[a["dtype"]]
        count = int(np.prod(a["shape"]))
        arrays[a["name"]] = np.frombuffer(raw, dtype=dt, count=count, offset=data + a["offset"]).reshape(a["shape"])
    return header, arrays


def config_of(header):
    c = dict(header["config"])
    c.setdefault("tie_embeddings", 0)  # states written before the field existed
    c.pop("arch_id")
    c.pop("path_id")
    return M.Config(**c).validate()


def compare_states(new, old):
    """Problems (a list of strings) between a recomputed state and a stored one. The setting must
    match exactly; computed values to float32 rounding (other BLAS/torch builds may differ in the
    last float64 bits, never by more)."""
    (hn, an), (ho, ao) = new, old
    ho = dict(ho, config=dict(ho["config"]))
    ho["config"].setdefault("tie_embeddings", 0)  # states written before the field existed: untied
    problems = []
    for key in ("name", "B", "T", "config", "layout", "num_params", "zero_grad_ranges"):
        if hn[key] != ho[key]:
            problems.append(f"{key} differs")
    if (hn["train"] is None) != (ho["train"] is None):
        problems.append("train differs (a trajectory in one, none in the other)")
    trains = hn["train"] is not None and ho["train"] is not None
    for key in ("steps", "lr", "warmup", "max_steps", "min_lr_frac", "beta1", "beta2", "eps", "weight_decay", "grad_clip"):
        if trains and hn["train"][key] != ho["train"][key]:
            problems.append(f"train.{key} differs")
    for key in ("params", "inputs", "targets"):
        if not np.array_equal(an[key], ao[key]):
            problems.append(f"{key} differ")
    if abs(hn["loss"] - ho["loss"]) > 1e-12 * abs(ho["loss"]):
        problems.append(f"loss {hn['loss']!r} vs {ho['loss']!r}")
    for key in ("losses", "lrs", "grad_norms") if trains else ():
        a, b = np.array(hn["train"][key]), np.array(ho["train"][key])
        if a.shape != b.shape or np.abs(a - b).max() > 1e-9 * np.abs(b).max():
            problems.append(f"train.{key} differ")
    for key in ("logits", "losses"):
        if scaled_err(an[key], ao[key]) > 1e-6:
            problems.append(f"{key} differ by {scaled_err(an[key], ao[key]):.1e}")
    for e in hn["layout"]:
        o, c = e["offset"], e["count"]
        err = scaled_err(an["grads"][o:o + c], ao["grads"][o:o + c])
        if err > 1e-6:
            problems.append(f"grad {e['name']} differs by {err:.1e}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default=STATES_DIR)
    ap.add_argument("--check", action="store_true",
                    help="recompute every state from its recorded batch and compare with the files; write nothing")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=state_names(),
                    help="write only these states (a new one), leaving the others' files as they are")
    args = ap.parse_args()
    torch.set_num_threads(1)  # tiny tensors: threads would only spin
    os.makedirs(args.out_dir, exist_ok=True)
    total, bad = 0, 0
    for i, name in enumerate(state_names()):
        path = os.path.join(args.out_dir, name + ".bin")
        if args.only and name not in args.only and not args.check:
            continue
        if args.check:
            try:
                old = read_state(path)
            except (OSError, ValueError) as e:
                print(f"BAD     {name}: {e}")
                bad += 1
                continue
            header, arrays = compute_state(name, i, batch_seed=old[0]["generator"]["batch_seed"])
            problems = compare_states((header, {a[0]: a[3] for a in arrays}), old)
            bad += bool(problems)
            print(f"{'same' if not problems else 'DIFFERS':8s}{name}" + "".join(f"\n    {p}" for p in problems))
            continue
        header, arrays = compute_state(name, i)
        blob = encode_state(header, arrays)
        total += len(blob)
        with open(path, "wb") as f:
            f.write(blob)
        nz = header["fp32_noise"]
        after = f"{header['train']['losses'][-1]:.4f}" if header["train"] else "  none"
        traj = f"{nz['trajectory']:.1e}" if nz["trajectory"] is not None else "none"
        print(f"{name:24s} {len(blob) / 1024:6.1f} KiB  params {header['num_params']:6d}  loss {header['loss']:.6f}"
              f"  after 10 steps {after}  batch seed {header['generator']['batch_seed']}"
              f"  fp32 noise: logits {nz['logits']:.1e} grads {max(nz['grads'].values()):.1e} traj {traj}")
    if args.check:
        print(f"{len(state_names()) - bad} of {len(state_names())} states match the reference")
        sys.exit(1 if bad else 0)
    print(f"{len(args.only or state_names())} states, {total / 1024:.1f} KiB in all, written to {args.out_dir}")


if __name__ == "__main__":
    main()
