"""dev/reference/model.py: an independent PyTorch reference of the valuepath models.

Both families (GPT-2 and Llama) and all five value paths (vanilla, ResFormer, SVFormer,
Skip-Layer Attention, Depth-Attention), written in plain PyTorch straight from
`docs/value_paths.md` (the project's spec; section 10 holds its decisions) and the papers, NOT
translated from the C++ trainer. Its purpose is to catch the errors that the CPU and the GPU
builds would share: finite differences prove that a backward matches its forward, but not that
the forward is the paper's model.

What is shared with the C++ side is only the interface: the flat parameter layout (one fp32
array, tensors in a fixed order, per-layer tensors stacked along L) and the checkpoint file
format (host/checkpoint.h), both in scripts/vp_data/checkpoint.py (numpy only), which this file
imports and scripts/hf_convert.py uses too. Gradients come from torch.autograd, so there is no
hand-written backward here at all.

scripts/hf_convert.py copies this file, as valuepath_model.py, into the Hugging Face model it
exports for a value path other than vanilla: that model's forward is forward_tensors below.

Dimension legend (as in host/config.h): L layers, C model dim, H query heads, Hkv key/value
heads, G = H/Hkv, D head dim, F MLP hidden dim, V vocab, Vp = V padded to a multiple of 128,
B batch, T sequence length.
"""

import math
import os
import sys
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# The config, the flat layout and the checkpoint files: the interface with the C++ builds, shared
# with the project's user scripts (scripts/vp_data/checkpoint.py, numpy only).

try:  # in the repository
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts"))
    from vp_data.checkpoint import (ARCHS, CHECKPOINT_HEADER_BYTES, DECAY, PATHS, Config, f32, lround,  # noqa: F401
                                    make_config, num_params, param_layout, param_offsets, read_checkpoint,
                                    write_checkpoint)
except ImportError:  # copied into an exported HF model directory (scripts/vp_data/hf.py), beside it
    from .valuepath_checkpoint import (ARCHS, CHECKPOINT_HEADER_BYTES, DECAY, PATHS, Config, f32,  # noqa: F401
                                       lround, make_config, num_params, param_layout, param_offsets,
                                       read_checkpoint, write_checkpoint)


def unflatten(cfg, flat):
    """Views of the flat parameter vector, by name (missing names = tensors of 0 elements).
    Because they are views, autograd on `flat` gives the gradient directly in the flat layout."""
    return {name: flat[off:off + n].view(shape) for name, shape, off, n in param_offsets(cfg)[0]}


def decay_mask(cfg, dtype=torch.float64):
    m = torch.zeros(num_params(cfg), dtype=dtype)
    for name, _, off, n in param_offsets(cfg)[0]:
        if name in DECAY:
            m[off:off + n] = 1
    return m


# ---------------------------------------------------------------------------------------------
# Building blocks


def rmsnorm(x, w, eps):
    """RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * w."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(cfg, T, dtype):
    """cos, sin of shape (T, D): angle(t, i) = t * theta^(-2i/D) for i < D/2, repeated for the
    second half (the HF rotate_half pairing: element i rotates with element i + D/2)."""
    D = cfg.head_dim
    i = torch.arange(D // 2, dtype=torch.float64)
    inv_freq = float(cfg.rope_theta) ** (-2.0 * i / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, D/2)
    ang = torch.cat([ang, ang], dim=-1)                                       # (T, D)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rope(x, cos, sin):
    """x: (B, nh, T, D). HF apply_rotary_pos_emb: x*cos + rotate_half(x)*sin."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def attention_core(q, k, v, G):
    """The shared causal core A(q, K, V) of value_paths.md section 0.
    q: (B, H, T, D); k, v: (B, Hkv, T, D) at native KV heads; query head h reads KV head h // G
    (HF repeat_kv). Scale 1/sqrt(D)."""
    k = k.repeat_interleave(G, dim=1)
    v = v.repeat_interleave(G, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# ---------------------------------------------------------------------------------------------
# Value paths: each returns the (K, V) that layer l's attention core reads, both (B, Hkv, T, D),
# from the layer's own (k, v) (v is None for SVFormer layers >= 1, which have no v_proj), its
# query q (B, H, T, D) (Depth-Attention uses it), and `st`, the state carried across layers.


def vp_vanilla(cfg, P, l, q, k, v, st, opt):
    return k, v  # section 1


def vp_resformer(cfg, P, l, q, k, v, st, opt):
    """Section 2a: v^ = (1 - lam_l) v^l + lam_l v^0 for l >= 1, on native KV heads; v^0 is layer 0's
    raw value projection (bias included, no norm, no RoPE). Keys unchanged."""
    if l == 0:
        st["v0"] = v
        return k, v
    lam = P["vp_lambda"][l] if cfg.resformer_learn else 0.5  # lambda_0 exists but is unused
    return k, (1 - lam) * v + lam * st["v0"]


def vp_svformer(cfg, P, l, q, k, v, st, opt):
    """Section 3a: every layer l >= 1 attends with its own keys over layer 0's values."""
    if l == 0:
        st["v0"] = v
        return k, v
    return k, st["v0"]


def vp_sla(cfg, P, l, q, k, v, st, opt):
    """Section 4a with the GQA extension of section 10: the last n_h/G KV heads (serving the last
    n_h query heads) of every layer l >= n_l read layer l - n_l's K/V. ORIG: the source layer's own
    projections (after its QK-norm and RoPE, i.e. the keys its own attention used). CHAIN: the
    source layer's effective K/V (already skipped), which resolves recursively."""
    n_l, Hs = cfg.sla_layers, cfg.sla_heads // cfg.G  # Hs skip KV heads
    split = cfg.n_kv_head - Hs                         # KV heads [split, Hkv) are skip heads
    k_eff, v_eff = k, v
    if l >= n_l and Hs > 0:
        src = st[l - n_l]["eff" if cfg.sla_chain else "own"]
        k_eff = torch.cat([k[:, :split], src[0][:, split:]], dim=1)
        v_eff = torch.cat([v[:, :split], src[1][:, split:]], dim=1)
    st[l] = {"own": (k, v), "eff": (k_eff, v_eff)}
    return k_eff, v_eff


def vp_depth(cfg, P, l, q, k, v, st, opt):
    """Section 5b (LUMIA SDPA path, decisions of section 10). Anchors are layers 0, s, 2s, ...;
    layer l mixes, per (b, KV head g, position t), its raw value with the stored mixed values of
    the anchors j < l, with softmax weights over depth:
        qbar = mean of the group's G query heads (the q the main attention uses: after QK-norm
               and RoPE; RoPE does not change a same-position dot product)
        e_n = <qbar, kappa^n> / sqrt(D), alpha = softmax_n(e), v~^l = sum_n alpha_n nu^n
    with candidates n in S(l) U {l}: (kappa^j, v~^j) for anchors, (k^l, v^l raw) for l itself.
    Anchors store (kappa^l, v~^l), so the mixing is recursive. The keys stay k^l.
    opt["depth_anchor_bias"] is added to the anchors' logits (a test hook: -inf gives vanilla)."""
    s = cfg.depth_stride
    B, H, T, D = q.shape
    anchors = list(range(0, l, s))  # S(l) = {j < l : j mod s = 0}
    v_mix = v
    if anchors:
        qbar = q.view(B, cfg.n_kv_head, cfg.G, T, D).mean(dim=2)           # (B, Hkv, T, D)
        keys = torch.stack([st[j][0] for j in anchors] + [k], dim=-2)       # (B, Hkv, T, N, D)
        vals = torch.stack([st[j][1] for j in anchors] + [v], dim=-2)       # (B, Hkv, T, N, D)
        e = (keys * qbar.unsqueeze(-2)).sum(-1) / math.sqrt(D)              # (B, Hkv, T, N)
        bias = opt.get("depth_anchor_bias", 0.0)
        if bias != 0.0:
            e = e + torch.tensor([bias] * len(anchors) + [0.0], dtype=e.dtype)
        alpha = torch.softmax(e, dim=-1)
        v_mix = (alpha.unsqueeze(-1) * vals).sum(dim=-2)                   # (B, Hkv, T, D)
    if l % s == 0:
        st[l] = (k, v_mix)
    return k, v_mix


VALUE_PATHS = {"vanilla": vp_vanilla, "resformer": vp_resformer, "svformer": vp_svformer,
               "sla": vp_sla, "depth": vp_depth}


# ---------------------------------------------------------------------------------------------
# The model


def forward(cfg, flat, idx, targets=None, **opt):
    """flat: (num_params,) parameters in the valuepath layout; idx, targets: (B, T) int64.
    Returns (logits over the real vocab (B, T, V), mean cross-entropy loss or None).
    The dtype of `flat` is the compute dtype (the states are made in float64)."""
    return forward_tensors(cfg, unflatten(cfg, flat), idx, targets, **opt)


def forward_tensors(cfg, P, idx, targets=None, **opt):
    """forward() on the parameters as separate tensors {name: tensor of its param_layout shape}
    (what unflatten gives; the HF wrapper of an exported model holds them as nn.Parameters)."""
    cfg.validate()
    B, T = idx.shape
    L, C, H, Hkv, D, V = cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.vocab_size
    gpt2 = cfg.arch == "gpt2"
    eps = cfg.norm_eps
    get = lambda name, l: P[name][l] if name in P else None  # noqa: E731 (a bias, or None)

    def norm(x, wname, bname, l=None):
        w = P[wname] if l is None else P[wname][l]
        if gpt2:
            b = P[bname] if l is None else P[bname][l]
            return F.layer_norm(x, (C,), w, b, eps)
        return rmsnorm(x, w, eps)

    assert T <= cfg.max_seq_len, "T exceeds the model's max_seq_len"
    x = P["wte"][idx]                                                   # (B, T, C)
    if gpt2:
        x = x + P["wpe"][:T]
    else:
        cos, sin = rope_tables(cfg, T, P["wte"].dtype)
    vp = VALUE_PATHS[cfg.path]
    st = {}
    for l in range(L):
        # attention: x = x + attproj(attn(norm1(x)))
        h = norm(x, "ln1_w", "ln1_b", l)
        qk = F.linear(h, P["qk_w"][l], get("qk_b", l))                  # (B, T, (H+Hkv)*D)
        q = qk[..., :H * D].view(B, T, H, D).transpose(1, 2)            # (B, H, T, D)
        k = qk[..., H * D:].view(B, T, Hkv, D).transpose(1, 2)          # (B, Hkv, T, D)
        v = None
        if l < P["v_w"].shape[0]:                                       # SVFormer: layer 0 only
            v = F.linear(h, P["v_w"][l], get("v_b", l)).view(B, T, Hkv, D).transpose(1, 2)
        if not gpt2:
            if cfg.qk_norm:                                             # section 10: before RoPE
                q = rmsnorm(q, P["q_norm_w"][l], eps)
                k = rmsnorm(k, P["k_norm_w"][l], eps)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        k_att, v_att = vp(cfg, P, l, q, k, v, st, opt)
        y = attention_core(q, k_att, v_att, cfg.G)                      # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, H * D)
        x = x + F.linear(y, P["attproj_w"][l], get("attproj_b", l))
        # MLP: x = x + fcproj(act(fc(norm2(x))))
        h = norm(x, "ln2_w", "ln2_b", l)
        u = F.linear(h, P["fc_w"][l], get("fc_b", l))                   # (B, T, FW)
        if gpt2:
            a = F.gelu(u, approximate="tanh")
        else:
            gate, up = u.split(cfg.ffn_dim, dim=-1)                     # rows [W1 | W3]
            a = F.silu(gate) * up
        x = x + F.linear(a, P["fcproj_w"][l], get("fcproj_b", l))
    x = norm(x, "lnf_w", "lnf_b")
    head = P["wte"] if cfg.tied_head else P["lm_head"]                  # gpt2, tied llama: wte
    logits = x @ head[:V].t()                # (B, T, V): the padded rows V..Vp are not in the softmax
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T))
    return logits, loss


def forward_backward(cfg, params, idx, targets, dtype=torch.float64, **opt):
    """Loss, logits, per-position losses and the flat gradient, computed in `dtype`."""
    flat = torch.as_tensor(np.asarray(params)).to(dtype).clone().requires_grad_(True)
    logits, loss = forward(cfg, flat, torch.as_tensor(idx).long(), torch.as_tensor(targets).long(), **opt)
    loss.backward()
    B, T, V = logits.shape
    per_pos = F.cross_entropy(logits.detach().reshape(B * T, V), torch.as_tensor(targets).long().reshape(-1), reduction="none")
    return loss.item(), logits.detach(), per_pos.view(B, T), flat.grad.detach()


def structural_zero_grads(cfg, idx):
    """Boolean mask over the flat gradient: the elements that get no gradient at all, by
    construction, for a batch with inputs idx (B, T). (Gradients that vanish only by cancellation,
    such as the key bias under softmax shift invariance, are not included.)
      * padded vocab rows V..Vp of wte and lm_head (never in the softmax; never looked up)
      * untied llama: wte rows of tokens not in idx (only the lookup reads wte; tied, the
        classifier reads every real row)
      * gpt2: wpe rows T..maxT
      * ResFormer learn: lambda_0 (a no-op, section 2a)
      * SLA: the skip-head slices of W_k, b_k, W_v, b_v of the layers nobody reads (section 4b):
        l >= n_l and (CHAIN or l + n_l >= L)"""
    mask = torch.zeros(num_params(cfg), dtype=torch.bool)
    M = {name: mask[off:off + n].view(shape) for name, shape, off, n in param_offsets(cfg)[0]}  # views
    V, T = cfg.vocab_size, idx.shape[1]
    M["wte"][V:] = True
    if not cfg.tied_head:
        M["lm_head"][V:] = True
        unseen = torch.ones(cfg.padded_vocab_size, dtype=torch.bool)
        unseen[torch.as_tensor(idx).reshape(-1)] = False
        M["wte"][unseen] = True
    if cfg.arch == "gpt2":
        M["wpe"][T:] = True
    if "vp_lambda" in M:
        M["vp_lambda"][0] = True
    if cfg.path == "sla" and cfg.sla_heads > 0:
        L, H, Hkv, D, n_l = cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.sla_layers
        split = Hkv - cfg.sla_heads // cfg.G  # KV heads [split, Hkv) are skip heads
        for l in range(n_l, L):
            if cfg.sla_chain or l + n_l >= L:
                M["qk_w"][l, (H + split) * D:] = True
                M["v_w"][l, split * D:] = True
                if "qk_b" in M:
                    M["qk_b"][l, (H + split) * D:] = True
                    M["v_b"][l, split * D:] = True
    return mask


# ---------------------------------------------------------------------------------------------
# Initialisation for the reference states: deliberately NOT the training init (0.02-scaled),
# so that every nonlinearity works away from its linear regime.


def random_params(cfg, seed, dtype=torch.float32):
    """Random weights for tests: matrices N(0, 1/fan_in) (unit-scale activations), embeddings
    N(0, 0.5^2) (wpe 0.3), biases N(0, 0.1^2), norm gains 1 + N(0, 0.1^2), ResFormer lambdas
    spread over 0.2..0.8 (distinct per layer so d lambda is meaningful). The padded vocab rows
    are random too: a correct model never lets them into the softmax."""
    g = torch.Generator().manual_seed(seed)
    gains = {"ln1_w", "ln2_w", "lnf_w", "q_norm_w", "k_norm_w"}
    matrices = {"qk_w", "v_w", "attproj_w", "fc_w", "fcproj_w"}  # stored (out, in)
    parts = []
    for name, shape, _, n in param_offsets(cfg)[0]:
        r = torch.randn(n, generator=g, dtype=torch.float64)
        if name in ("wte", "lm_head"):
            t = 0.5 * r
        elif name == "wpe":
            t = 0.3 * r
        elif name in matrices:
            t = r / math.sqrt(shape[-1])                   # fan_in = in
        elif name in gains:
            t = 1.0 + 0.1 * r
        elif name == "vp_lambda":
            t = torch.linspace(0.2, 0.8, n, dtype=torch.float64)
        else:                                              # biases
            t = 0.1 * r
        parts.append(t)
    return torch.cat(parts).to(dtype)


# ---------------------------------------------------------------------------------------------
# AdamW and the schedule (host/schedule.h semantics), for the short training trajectories


def lr_at_step(step, lr, warmup, max_steps, min_frac):
    """Linear warmup lr*(step+1)/warmup, then cosine from lr to lr*min_frac at max_steps."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if max_steps <= warmup:
        return lr
    ratio = min(1.0, (step - warmup) / (max_steps - warmup))
    min_lr = lr * min_frac
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


class AdamW:
    """torch.optim.AdamW semantics on the flat vector (bias-corrected moments, decoupled weight
    decay p -= lr*wd*p), with per-element weight decay (DECAY tensors only) and the ResFormer
    lambdas on their own learning rate lambda_lr * lr(step) / peak_lr without decay."""

    def __init__(self, cfg, beta1, beta2, eps, weight_decay, dtype=torch.float64, hp_round=float):
        n = num_params(cfg)
        self.b1, self.b2, self.eps, self.wd = beta1, beta2, eps, weight_decay
        self.m = torch.zeros(n, dtype=dtype)
        self.v = torch.zeros(n, dtype=dtype)
        self.decay = decay_mask(cfg, dtype)
        self.lam = torch.zeros(n, dtype=torch.bool)  # elements on the lambda learning rate
        for name, _, off, cnt in param_offsets(cfg)[0]:
            if name == "vp_lambda":
                self.lam[off:off + cnt] = True
        self.lambda_lr = cfg.resformer_lambda_lr
        self.hp_round = hp_round  # f32: lambda_lr * (lr / peak) in float32, as the C++ optimizer computes it
        self.t = 0

    def step(self, p, g, lr, peak_lr):
        """p, g: flat tensors (p updated in place); lr: this step's lr."""
        self.t += 1
        r = self.hp_round
        lambda_lr = r(self.lambda_lr * r(lr / peak_lr)) if peak_lr else 0.0
        lr_el = torch.where(self.lam, torch.tensor(lambda_lr, dtype=p.dtype), torch.tensor(lr, dtype=p.dtype))
        p.mul_(1 - lr_el * self.wd * self.decay)
        self.m.mul_(self.b1).add_((1 - self.b1) * g)
        self.v.mul_(self.b2).add_((1 - self.b2) * g * g)
        m_hat = self.m / (1 - self.b1 ** self.t)
        v_hat = self.v / (1 - self.b2 ** self.t)
        p.sub_(lr_el * m_hat / (v_hat.sqrt() + self.eps))


def clip_scale(grad_norm, grad_clip):
    """Global-norm clipping: scale = clip/norm if the norm exceeds clip (no epsilon), else 1."""
    return grad_clip / grad_norm if grad_clip > 0 and grad_norm > grad_clip else 1.0


def train_steps(cfg, params, idx, targets, steps, lr, warmup, max_steps, min_lr_frac,
                beta1, beta2, eps, weight_decay, grad_clip, dtype=torch.float64, hp_round=float):
    """`steps` AdamW steps on the same batch. Returns (losses, lrs, grad_norms): losses[k] is the
    loss with the parameters after k updates (k = 0..steps, so steps + 1 values); lrs[k] and
    grad_norms[k] (before clipping) of step k. hp_round rounds the per-step hyperparameters (the
    lr, the clip scale, the lambdas' lr) as the trainer hands them to its optimizer: f32 for the
    C++ AdamWSettings, which holds floats."""
    p = torch.as_tensor(np.asarray(params)).to(dtype).clone()
    opt = AdamW(cfg, beta1, beta2, eps, weight_decay, dtype, hp_round)
    losses, lrs, norms = [], [], []
    for step in range(steps + 1):
        flat = p.clone().requires_grad_(True)
        _, loss = forward(cfg, flat, torch.as_tensor(idx).long(), torch.as_tensor(targets).long())
        losses.append(loss.item())
        if step == steps:
            break
        loss.backward()
        g = flat.grad.detach()
        norm = g.norm().item()
        g = g * hp_round(clip_scale(norm, grad_clip))
        lr_t = hp_round(lr_at_step(step, lr, warmup, max_steps, min_lr_frac))
        opt.step(p, g, lr_t, lr)
        lrs.append(lr_t)
        norms.append(norm)
    return losses, lrs, norms


__all__ = ["Config", "make_config", "param_layout", "param_offsets", "num_params", "unflatten", "decay_mask",
           "forward", "forward_tensors", "forward_backward", "structural_zero_grads", "random_params", "lr_at_step", "AdamW", "clip_scale", "train_steps",
           "read_checkpoint", "write_checkpoint", "replace", "PATHS", "ARCHS", "DECAY"]
