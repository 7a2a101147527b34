"""dev/reference/test_reference.py: the reference itself is tested against known facts.

    .venv/bin/python -m pytest -q dev/reference        (skipped cleanly if torch is not installed)

Parameter counts from the papers and value_paths.md, the equivalences between the paths
(value_paths.md section 7), autograd checks in float64, the optimizer against torch.optim.AdamW,
the checkpoint layout against host/checkpoint.h, and that the committed states are what this
reference computes.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_states as S  # noqa: E402
import model as M  # noqa: E402
from vp_data import checkpoint as CK  # noqa: E402 (model.py put scripts/ on the path)

REPO = S.REPO
torch.set_num_threads(1)  # tiny tensors: extra threads only spin (1 s instead of 4 ms per step on a busy machine)


def small(arch, path="vanilla", L=5, **kw):
    """The reference states' shapes: gpt2 MHA; llama GQA G=2 with QK-norm."""
    if arch == "gpt2":
        return M.make_config("gpt2", L, 4, 16, 97, 16, path=path, **kw)
    return M.make_config("llama", L, 4, 16, 97, 16, Hkv=2, F=32, qk_norm=1, rope_theta=500.0, path=path, **kw)


def batch(seed=0, V=97, B=2, T=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def run(cfg, params, seed=0, **opt):
    idx, tgt = batch(seed, cfg.vocab_size)
    return M.forward_backward(cfg, params, idx, tgt, torch.float64, **opt)


def grads_by_name(cfg, flat_grad):
    return {name: flat_grad[off:off + n] for name, _, off, n in M.param_offsets(cfg)[0]}


def params_by_name(cfg, flat):
    return {name: np.asarray(flat[off:off + n]) for name, _, off, n in M.param_offsets(cfg)[0]}


def transplant(src_cfg, src_params, dst_cfg, fill=None):
    """dst_cfg's flat vector with src's tensors, cut to dst's shapes (v_w/v_b: the first layers);
    tensors src lacks are filled by `fill(name, count)`."""
    src = params_by_name(src_cfg, src_params)
    parts = []
    for name, _, _, n in M.param_offsets(dst_cfg)[0]:
        parts.append(src[name][:n] if name in src else fill(name, n))
    return np.concatenate(parts).astype(np.float32)


FAMILIES = ["gpt2", "llama"]


# ---------------------------------------------------------------------------------------------
# Parameter counts


def test_gpt2_124m_param_count():
    cfg = M.make_config("gpt2", 12, 12, 768, 50257, 1024)
    assert cfg.padded_vocab_size == 50304
    assert M.num_params(cfg) == 124_475_904  # llm.c's GPT-2 124M with Vp = 50304
    # value_paths.md section 1: attention params per layer 4C^2 + 4C = 2,362,368
    per_layer = {name: n // 12 for name, _, _, n in M.param_offsets(cfg)[0]
                 if name in ("qk_w", "qk_b", "v_w", "v_b", "attproj_w", "attproj_b")}
    assert sum(per_layer.values()) == 2_362_368


@pytest.mark.parametrize("arch", FAMILIES)
def test_svformer_param_count(arch):
    for L in (2, 5, 7):
        van, sv = small(arch, L=L), small(arch, "svformer", L=L)
        C, Hkv, D = van.n_embd, van.n_kv_head, van.head_dim
        bias = Hkv * D if arch == "gpt2" else 0  # llama has no biases
        assert M.num_params(van) - M.num_params(sv) == (L - 1) * (C * Hkv * D + bias)


def test_svformer_paper_sizes():
    # value_paths.md section 3d: GPT-2 124M (with bias) -6,496,512; the ResFormer repo's 82M Llama
    # (d=512, L=8, MHA, no bias) -1,835,008.
    van, sv = M.make_config("gpt2", 12, 12, 768, 50257, 1024), M.make_config("gpt2", 12, 12, 768, 50257, 1024, path="svformer")
    assert M.num_params(van) - M.num_params(sv) == 6_496_512
    van = M.make_config("llama", 8, 8, 512, 50277, 2048, F=1792)
    sv = M.make_config("llama", 8, 8, 512, 50277, 2048, F=1792, path="svformer")
    assert M.num_params(van) - M.num_params(sv) == 1_835_008


def test_other_paths_add_no_params():
    for arch in FAMILIES:
        n = M.num_params(small(arch))
        assert M.num_params(small(arch, "resformer")) == n
        assert M.num_params(small(arch, "resformer", resformer_lambda="learn")) == n + 5  # one lambda per layer
        assert M.num_params(small(arch, "sla", sla_layers=2, sla_heads=2)) == n
        assert M.num_params(small(arch, "depth", depth_stride=2)) == n


def test_tied_llama_drops_lm_head():
    """--tie-embeddings 1: the same layout as untied llama less lm_head's Vp x C."""
    untied, tied = small("llama"), small("llama", tie_embeddings=1)
    assert M.num_params(untied) - M.num_params(tied) == untied.padded_vocab_size * untied.n_embd
    assert [e[0] for e in M.param_offsets(untied)[0] if e[0] != "lm_head"] == [e[0] for e in M.param_offsets(tied)[0]]
    with pytest.raises(AssertionError):
        small("gpt2", tie_embeddings=1)  # gpt2 is always tied; the flag is llama's


def test_tied_llama_is_untied_with_lm_head_set_to_wte():
    """The tied model is the untied one whose lm_head holds a copy of wte: the same logits and loss,
    wte's gradient the sum of the untied wte's (the lookup) and lm_head's (the classifier), every
    other gradient the same. Computed by autograd on both, so this checks the layout and the head
    choice, not a hand-written gradient."""
    tied, untied = small("llama", tie_embeddings=1), small("llama")
    p_tied = M.random_params(tied, 21).numpy()
    wte = params_by_name(tied, p_tied)["wte"]
    p_untied = transplant(tied, p_tied, untied, fill=lambda name, n: wte)  # lm_head := wte
    lt, logits_t, _, gt = run(tied, p_tied, seed=5)
    lu, logits_u, _, gu = run(untied, p_untied, seed=5)
    assert lt == lu and torch.equal(logits_t, logits_u)
    gt, gu = grads_by_name(tied, gt), grads_by_name(untied, gu)
    assert torch.allclose(gt["wte"], gu["wte"] + gu["lm_head"], rtol=1e-12, atol=1e-15)
    assert gu["lm_head"].abs().max() > 0 and gu["wte"].abs().max() > 0  # both parts are there
    for name in gt:
        if name != "wte":
            assert torch.equal(gt[name], gu[name]), name


def test_default_settings():
    # value_paths.md section 10 defaults
    c = M.make_config("gpt2", 12, 12, 768, 50257, 1024, path="sla")
    assert (c.sla_layers, c.sla_heads) == (9, 9)
    c = M.make_config("llama", 12, 8, 512, 1000, 64, Hkv=2, path="sla")  # G = 4: round(3*2/4) = 2 KV heads
    assert (c.sla_layers, c.sla_heads) == (9, 8)
    assert M.make_config("gpt2", 12, 12, 768, 50257, 1024, path="depth").depth_stride == 6
    assert M.make_config("gpt2", 1, 1, 8, 10, 8, path="depth").depth_stride == 1
    c = M.make_config("gpt2", 4, 4, 16, 10, 8, path="resformer")
    assert (c.resformer_learn, c.resformer_lambda_lr) == (0, M.f32(0.02))


# ---------------------------------------------------------------------------------------------
# Equivalences between the paths (value_paths.md section 7)


def assert_same(a, b, tol=1e-12):
    (la, lga, _, ga), (lb, lgb, _, gb) = a, b
    assert abs(la - lb) <= tol * abs(lb)
    assert torch.allclose(lga, lgb, rtol=tol, atol=tol)
    if ga is not None:
        assert torch.allclose(ga, gb, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("arch", FAMILIES)
def test_resformer_lambda0_is_vanilla(arch):
    van = small(arch)
    res = small(arch, "resformer", resformer_lambda="learn")
    p = M.random_params(van, 1).numpy()
    q = transplant(van, p, res, fill=lambda name, n: np.zeros(n))  # all lambdas 0
    a, b = run(van, p), run(res, q)
    # same loss and logits, and the same gradient on every tensor vanilla has
    assert_same(a[:3] + (None,), b[:3] + (None,))
    ga, gb = grads_by_name(van, a[3]), grads_by_name(res, b[3])
    for name in ga:
        assert torch.allclose(ga[name], gb[name], rtol=1e-10, atol=1e-12), name
    assert gb["vp_lambda"][0] == 0  # lambda_0 is a no-op (section 2a)
    assert torch.all(gb["vp_lambda"][1:] != 0)


@pytest.mark.parametrize("arch", FAMILIES)
def test_resformer_fixed_is_learn_at_half(arch):
    fixed = small(arch, "resformer")
    learn = small(arch, "resformer", resformer_lambda="learn")
    p = M.random_params(fixed, 2).numpy()
    q = transplant(fixed, p, learn, fill=lambda name, n: np.full(n, 0.5))
    a, b = run(fixed, p), run(learn, q)
    assert_same(a[:3] + (None,), b[:3] + (None,))
    ga, gb = grads_by_name(fixed, a[3]), grads_by_name(learn, b[3])
    for name in ga:
        assert torch.allclose(ga[name], gb[name], rtol=1e-10, atol=1e-12), name


@pytest.mark.parametrize("arch", FAMILIES)
def test_resformer_lambda1_forward_is_svformer(arch):
    res = small(arch, "resformer", resformer_lambda="learn")
    sv = small(arch, "svformer")
    p = M.random_params(res, 3).numpy()
    p[-res.n_layer:] = 1.0  # vp_lambda is the last tensor
    q = transplant(res, p, sv)  # drops v_w / v_b of layers >= 1
    a, b = run(res, p), run(sv, q)
    assert abs(a[0] - b[0]) <= 1e-12 * abs(b[0])
    assert torch.allclose(a[1], b[1], rtol=1e-12, atol=1e-12)
    # and the dropped value projections of layers >= 1 get no gradient at lambda = 1
    g = grads_by_name(res, a[3])
    Hkv, D, C = res.n_kv_head, res.head_dim, res.n_embd
    assert torch.all(g["v_w"].view(res.n_layer, Hkv * D, C)[1:] == 0)


@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("chain", [0, 1])
def test_sla_without_skipping_is_vanilla(arch, chain):
    van = small(arch)
    p = M.random_params(van, 4).numpy()
    ref = run(van, p)
    assert_same(run(small(arch, "sla", sla_layers=2, sla_heads=0, sla_chain=chain), p), ref)  # n_h = 0
    assert_same(run(small(arch, "sla", sla_layers=5, sla_heads=2, sla_chain=chain), p), ref)  # n_l >= L


@pytest.mark.parametrize("arch", FAMILIES)
def test_sla_orig_equals_chain_iff_2nl_ge_L(arch):
    p = M.random_params(small(arch), 5).numpy()
    for n_l in (1, 2, 3, 4):
        a = run(small(arch, "sla", sla_layers=n_l, sla_heads=2, sla_chain=0), p)
        b = run(small(arch, "sla", sla_layers=n_l, sla_heads=2, sla_chain=1), p)
        if 2 * n_l >= 5:
            assert_same(a, b)
        else:  # the states' setting (n_l = 2, L = 5) must tell the readings apart
            assert abs(a[0] - b[0]) > 1e-6


@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("chain", [0, 1])
def test_sla_dead_parameters(arch, chain):
    """Section 4b: the skip-head slices of W_k, W_v (b_k, b_v) get zero gradient in layers
    l >= n_l with l + n_l >= L (ORIG), or in every layer l >= n_l (CHAIN); all others do not."""
    n_l, n_h = 2, 2
    cfg = small(arch, "sla", sla_layers=n_l, sla_heads=n_h, sla_chain=chain)
    g = grads_by_name(cfg, run(cfg, M.random_params(cfg, 6).numpy())[3])
    L, H, Hkv, D, C = cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.n_embd
    Hs = n_h // cfg.G
    k_rows = g["qk_w"].view(L, (H + Hkv) * D, C)[:, H * D:].reshape(L, Hkv, D, C)
    v_rows = g["v_w"].view(L, Hkv, D, C)
    for l in range(L):
        dead = l >= n_l and (chain or l + n_l >= L)
        for t in (k_rows, v_rows):
            assert bool(torch.all(t[l, Hkv - Hs:] == 0)) == dead, (l, dead)
            assert torch.all(t[l, :Hkv - Hs].abs().sum((-1, -2)) > 0)


@pytest.mark.parametrize("arch", FAMILIES)
def test_depth_without_anchors_is_vanilla(arch):
    van = small(arch)
    p = M.random_params(van, 7).numpy()
    for s in (1, 2, 3):
        cfg = small(arch, "depth", depth_stride=s)
        assert_same(run(cfg, p, depth_anchor_bias=float("-inf")), run(van, p))
        assert abs(run(cfg, p)[0] - run(van, p)[0]) > 1e-6  # and the anchors do matter


def gqa_as_mha(gqa, p, same_queries_in_group=False):
    """An MHA (Hkv = H) config and params that repeat each KV head of the GQA model G times."""
    mha = M.replace(gqa, n_kv_head=gqa.n_head).validate()
    P = {k: v.copy() for k, v in params_by_name(gqa, p).items()}
    L, H, Hkv, D, C, G = gqa.n_layer, gqa.n_head, gqa.n_kv_head, gqa.head_dim, gqa.n_embd, gqa.G
    qk = P["qk_w"].reshape(L, H + Hkv, D, C)
    q = qk[:, :H]
    if same_queries_in_group:
        q = np.repeat(q[:, ::G], G, axis=1)
    P["qk_w"] = np.concatenate([q, np.repeat(qk[:, H:], G, axis=1)], axis=1).reshape(-1)  # KV head h // G
    P["v_w"] = np.repeat(P["v_w"].reshape(-1, Hkv, D, C), G, axis=1).reshape(-1)
    flat = np.concatenate([P[name] for name, _, _, _ in M.param_offsets(mha)[0]]).astype(np.float32)
    if same_queries_in_group:  # the GQA model with those queries too
        P2 = params_by_name(gqa, p)
        P2["qk_w"] = np.concatenate([q, qk[:, H:]], axis=1).reshape(-1)
        p = np.concatenate([P2[name] for name, _, _, _ in M.param_offsets(gqa)[0]]).astype(np.float32)
    return mha, flat, p


@pytest.mark.parametrize("path,kw", [("vanilla", {}), ("resformer", {}), ("svformer", {}),
                                     ("sla", dict(sla_layers=2, sla_heads=2, sla_chain=1)), ("depth", dict(depth_stride=2))])
def test_gqa_is_mha_with_repeated_kv(path, kw):
    """GQA (query head h reads KV head h // G) equals MHA whose KV heads repeat each GQA head G
    times. For Depth-Attention only when the G queries of a group are equal (its depth weights
    use the group's mean query, section 5f/10, where MHA uses each head's own)."""
    gqa = small("llama", path, **kw)
    p = M.random_params(gqa, 8).numpy()
    same = path == "depth"
    mha, q, p = gqa_as_mha(gqa, p, same_queries_in_group=same)
    a, b = run(gqa, p), run(mha, q)
    assert abs(a[0] - b[0]) <= 1e-12 * abs(b[0])
    assert torch.allclose(a[1], b[1], rtol=1e-12, atol=1e-12)
    if same:  # and with distinct queries the group mean matters
        p2 = M.random_params(gqa, 8).numpy()
        mha2, q2, _ = gqa_as_mha(gqa, p2)
        assert abs(run(gqa, p2)[0] - run(mha2, q2)[0]) > 1e-6


@pytest.mark.parametrize("path", ["vanilla", "resformer", "svformer", "sla", "depth"])
@pytest.mark.parametrize("arch", FAMILIES)
def test_causal(arch, path):
    kw = {"sla": dict(sla_layers=1, sla_heads=2, sla_chain=1), "depth": dict(depth_stride=1)}.get(path, {})
    cfg = small(arch, path, **kw)
    p = torch.as_tensor(M.random_params(cfg, 9)).double()
    idx, tgt = batch(10)
    a, _ = M.forward(cfg, p, idx, tgt)
    idx2 = idx.clone()
    idx2[:, -1] = (idx2[:, -1] + 1) % cfg.vocab_size
    b, _ = M.forward(cfg, p, idx2, tgt)
    assert torch.equal(a[:, :-1], b[:, :-1])
    assert not torch.allclose(a[:, -1], b[:, -1])


def test_rope_is_relative():
    cfg = small("llama")
    T = 12
    cos, sin = M.rope_tables(cfg, T, torch.float64)
    q, k = torch.randn(cfg.head_dim, dtype=torch.float64), torch.randn(cfg.head_dim, dtype=torch.float64)
    Q = M.rope(q.expand(1, 1, T, -1), cos, sin)[0, 0]
    K = M.rope(k.expand(1, 1, T, -1), cos, sin)[0, 0]
    S = Q @ K.t()  # S[i, j] depends on i - j only
    for d in range(-3, 4):
        diag = torch.diagonal(S, d)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-12)
    assert torch.allclose(M.rope(q.expand(1, 1, 1, -1), cos[:1], sin[:1])[0, 0, 0], q)  # t = 0: identity


# ---------------------------------------------------------------------------------------------
# Autograd in float64 (the reference has no hand-written backward, but its forward must be
# differentiable everywhere the C++ differentiates it)

GRADCHECK_PATHS = [("vanilla", {}), ("resformer", dict(resformer_lambda="learn")), ("svformer", {}),
                   ("sla", dict(sla_layers=1, sla_heads=2, sla_chain=0)), ("sla", dict(sla_layers=1, sla_heads=2, sla_chain=1)),
                   ("depth", dict(depth_stride=1))]


@pytest.mark.parametrize("path,kw", GRADCHECK_PATHS, ids=[p + str(k.get("sla_chain", "")) for p, k in GRADCHECK_PATHS])
@pytest.mark.parametrize("arch", FAMILIES)
def test_gradcheck(arch, path, kw):
    """Central differences against autograd in float64, on every parameter element that gets a
    gradient (the structurally zero ones, mostly padded vocab rows, are left out to save time).
    L = 3 still has cross-layer routes: SLA n_l = 1 (ORIG and CHAIN differ at layer 2), Depth s = 1
    (layer 2 reads anchor 1's mixed value)."""
    if arch == "gpt2":
        cfg = M.make_config("gpt2", 3, 2, 8, 11, 4, F=8, path=path, **kw)
    else:
        cfg = M.make_config("llama", 3, 4, 8, 11, 4, Hkv=2, F=8, qk_norm=1, path=path, **kw)
    p = M.random_params(cfg, 11).double()
    idx, tgt = batch(12, V=11, B=1, T=4)
    live = ~M.structural_zero_grads(cfg, idx)

    def loss_of(sub):
        flat = p.clone()
        flat = flat.masked_scatter(live, sub)
        return M.forward(cfg, flat, idx, tgt)[1]

    sub = p[live].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(loss_of, (sub,), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_gradcheck_tied_llama():
    """As test_gradcheck, for a llama whose head is wte: the rows of tokens not in the batch now
    get a gradient (from the classifier), so they are checked too."""
    cfg = M.make_config("llama", 3, 4, 8, 11, 4, Hkv=2, F=8, qk_norm=1, tie_embeddings=1)
    p = M.random_params(cfg, 11).double()
    idx, tgt = batch(12, V=11, B=1, T=4)
    live = ~M.structural_zero_grads(cfg, idx)
    assert int(live[:cfg.padded_vocab_size * cfg.n_embd].sum()) == cfg.vocab_size * cfg.n_embd  # every real wte row

    def loss_of(sub):
        return M.forward(cfg, p.masked_scatter(live, sub), idx, tgt)[1]

    sub = p[live].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(loss_of, (sub,), eps=1e-6, atol=1e-7, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Optimizer and schedule


def test_adamw_matches_torch():
    cfg = small("gpt2", "resformer", resformer_lambda="learn")
    n = M.num_params(cfg)
    g = torch.Generator().manual_seed(13)
    p0 = torch.randn(n, generator=g, dtype=torch.float64)
    decay = M.decay_mask(cfg).bool()
    lam = torch.zeros(n, dtype=torch.bool)
    lam[-cfg.n_layer:] = True
    peak, wd = 3e-3, 0.1
    # torch.optim.AdamW with three groups: decayed, not decayed, lambdas (own lr, no decay)
    ps = [p0[decay].clone().requires_grad_(True), p0[~decay & ~lam].clone().requires_grad_(True), p0[lam].clone().requires_grad_(True)]
    opt = torch.optim.AdamW([{"params": [ps[0]], "weight_decay": wd}, {"params": [ps[1]], "weight_decay": 0.0},
                             {"params": [ps[2]], "weight_decay": 0.0}], lr=peak, betas=(0.9, 0.95), eps=1e-8)
    mine = M.AdamW(cfg, 0.9, 0.95, 1e-8, wd)
    p = p0.clone()
    for step in range(5):
        grad = torch.randn(n, generator=g, dtype=torch.float64)
        lr = M.lr_at_step(step, peak, 2, 5, 0.1)
        for i, group in enumerate(opt.param_groups):
            group["lr"] = lr if i < 2 else cfg.resformer_lambda_lr * lr / peak
        ps[0].grad, ps[1].grad, ps[2].grad = grad[decay].clone(), grad[~decay & ~lam].clone(), grad[lam].clone()
        opt.step()
        mine.step(p, grad, lr, peak)
    assert torch.allclose(p[decay], ps[0].detach(), rtol=1e-13, atol=1e-15)
    assert torch.allclose(p[~decay & ~lam], ps[1].detach(), rtol=1e-13, atol=1e-15)
    assert torch.allclose(p[lam], ps[2].detach(), rtol=1e-13, atol=1e-15)


def test_lr_schedule():
    assert M.lr_at_step(0, 1.0, 4, 10, 0.1) == 0.25
    assert M.lr_at_step(3, 1.0, 4, 10, 0.1) == 1.0
    assert M.lr_at_step(4, 1.0, 4, 10, 0.1) == 1.0
    assert abs(M.lr_at_step(7, 1.0, 4, 10, 0.1) - 0.55) < 1e-12  # half way down the cosine
    assert abs(M.lr_at_step(10, 1.0, 4, 10, 0.1) - 0.1) < 1e-12
    assert M.lr_at_step(5, 1.0, 0, 0, 0.1) == 1.0


def test_weight_decay_mask():
    cfg = small("gpt2", "resformer", resformer_lambda="learn")
    mask = M.decay_mask(cfg)
    for name, _, off, n in M.param_offsets(cfg)[0]:
        want = name in ("wte", "wpe", "qk_w", "v_w", "attproj_w", "fc_w", "fcproj_w")
        assert bool(mask[off:off + n].all()) == want and bool(mask[off:off + n].any()) == want, name


# ---------------------------------------------------------------------------------------------
# Checkpoints


def test_checkpoint_roundtrip(tmp_path):
    for arch, kw in (("gpt2", {}), ("llama", {}), ("llama", dict(tie_embeddings=1))):
        cfg = small(arch, "sla", sla_layers=2, sla_heads=2, sla_chain=1, **kw)
        p = M.random_params(cfg, 14).numpy()
        path = tmp_path / f"{arch}{len(kw)}.bin"
        M.write_checkpoint(str(path), cfg, p, step=7)
        cfg2, p2, meta = M.read_checkpoint(str(path))
        assert cfg2 == cfg and np.array_equal(p, p2) and meta["step"] == 7 and not meta["has_optimizer"]
        assert os.path.getsize(path) == 552 + 4 * M.num_params(cfg)


CPP_LAYOUT = r"""
#include <cstddef>
#include "host/checkpoint.h"
int main() {
    printf("%zu %zu %zu %zu %zu %zu %zu %zu\n", sizeof(CheckpointHeader), sizeof(ModelConfig), offsetof(CheckpointHeader, model),
           offsetof(CheckpointHeader, sample_rng), offsetof(CheckpointHeader, train_data), offsetof(CheckpointHeader, header_crc),
           offsetof(ModelConfig, vp), offsetof(ModelConfig, norm_eps));
    CheckpointMeta meta;
    std::vector<float> p(%NPARAMS%);
    checkpoint_read("%PATH%", &meta, p.data(), nullptr, nullptr);
    const ModelConfig& c = meta.model;
    printf("%d %d %d %d %d %d %d %d %d %d %g %d %g %d %d %g %d %d %d %d %d %lld %.9g %.9g\n", c.arch, c.n_layer, c.n_head, c.n_kv_head,
           c.n_embd, c.head_dim, c.ffn_dim, c.vocab_size, c.padded_vocab_size, c.max_seq_len, c.rope_theta, c.qk_norm, c.norm_eps,
           c.vp.path, c.vp.resformer_learn, c.vp.resformer_lambda_lr, c.vp.sla_layers, c.vp.sla_heads, c.vp.sla_chain,
           c.vp.depth_stride, c.tie_embeddings, (long long)meta.step, p[0], p[p.size() - 1]);
    meta.step = 9;  // and write it back with the host code, for the Python reader
    checkpoint_write("%OUTDIR%", meta, p.data(), nullptr, nullptr);
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_checkpoint_readable_by_host_code():
    """Writes a checkpoint here, reads it with host/checkpoint.h's checkpoint_read, writes it back
    with checkpoint_write, and reads that here."""
    cfg = small("llama", "resformer", resformer_lambda="learn", resformer_lambda_lr=0.03, tie_embeddings=1)
    p = M.random_params(cfg, 15).numpy()
    with tempfile.TemporaryDirectory() as d:
        ck = os.path.join(d, "ckpt_00000003.bin")
        M.write_checkpoint(ck, cfg, p, step=3)
        src = os.path.join(d, "layout.cpp")
        with open(src, "w") as f:
            f.write(CPP_LAYOUT.replace("%NPARAMS%", str(p.size)).replace("%PATH%", ck).replace("%OUTDIR%", os.path.join(d, "out")))
        exe = os.path.join(d, "layout")
        subprocess.run(["g++", "-std=c++17", "-I", REPO, src, "-o", exe], check=True, capture_output=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split("\n")
        cfg2, p2, meta = M.read_checkpoint(os.path.join(d, "out", "ckpt_00000009.bin"))
    assert cfg2 == cfg and np.array_equal(p2, p) and meta["step"] == 9
    assert out[0].split() == ["552", "116", "40", "160", "168", "296", "52", "48"]
    assert CK._CRC_OFFSET == 296  # where vp_data/checkpoint.py reads and writes the two CRCs
    got = out[1].split()
    want = [1, 5, 4, 2, 16, 4, 32, 97, 128, 16, 500, 1, 1e-05, 1, 1, 0.03, 0, 0, 0, 0, 1, 3]
    assert [float(x) for x in got[:22]] == pytest.approx(want, rel=1e-6)
    assert float(got[22]) == pytest.approx(float(p[0]), rel=1e-7) and float(got[23]) == pytest.approx(float(p[-1]), rel=1e-7)


# ---------------------------------------------------------------------------------------------
# The committed states


def test_states_are_complete_and_small():
    files = sorted(f for f in os.listdir(S.STATES_DIR) if f.endswith(".bin"))
    assert files == sorted(n + ".bin" for n in S.state_names())
    total = sum(os.path.getsize(os.path.join(S.STATES_DIR, f)) for f in files)
    assert total < 3 * 2**20  # "well under 5 MB": 2.54 MiB with the 18th state (qwen3_depth)


@pytest.mark.parametrize("index,name", list(enumerate(S.state_names())))
def test_state_is_what_the_reference_computes(index, name):
    old = S.read_state(os.path.join(S.STATES_DIR, name + ".bin"))
    header, arrays = S.compute_state(name, index, batch_seed=old[0]["generator"]["batch_seed"])
    assert S.compare_states((header, {a[0]: a[3] for a in arrays}), old) == []
    # the state exercises what it should: both clip regimes along the trajectory; an extreme-regime
    # state (no trajectory) has targets past the 69-nat cap that -log(max(p, 1e-30)) would impose
    if header["train"] is None:
        per_pos = dict((a[0], a[3]) for a in arrays)["losses"]
        assert name in ("gpt2x_vanilla", "llamax_depth") and (per_pos > -np.log(1e-30)).mean() > 0.25
        return
    norms, clip = header["train"]["grad_norms"], header["train"]["grad_clip"]
    assert min(norms) < clip < max(norms)


# ---------------------------------------------------------------------------------------------
# The random states of fuzz_states.py (make test-reference compares the C++ with them)

import fuzz_states as FZ  # noqa: E402


def test_fuzz_configs_are_deterministic_within_the_bounds_premises_and_cover_the_corners():
    draws = [FZ.draw_config(1, i) for i in range(400)]
    again = [FZ.draw_config(1, i) for i in (399, 7, 0)]
    assert [d[5] for d in again] == [draws[i][5] for i in (399, 7, 0)]  # config i depends only on (seed, i)
    seen = set()
    for cfg, B, T, _, seeds, _ in draws:
        cfg.validate()
        H, Hkv, D, C, F, L = cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.n_embd, cfg.ffn_dim, cfg.n_layer
        assert B * T <= 16 and T <= 8 and 1 <= L <= 5 and 2 <= cfg.vocab_size <= 97 and 2 <= C <= 16
        assert H * D <= 64 and (H + 2 * Hkv) * D <= 64 and (F if cfg.arch == "gpt2" else 2 * F) <= 64
        assert cfg.vocab_size % 128 and len(seeds) == FZ.BATCH_DRAWS
        seen |= {(cfg.arch, cfg.path), ("G", cfg.G), ("L", L), ("T", T)}
        seen.add(("D odd",) if D % 2 else ("D even",))
        if cfg.arch == "llama":
            seen |= {("D != C/H",) if D * H != C else (), ("qkn", cfg.qk_norm), ("tie", cfg.tie_embeddings)}
        if cfg.path == "resformer":
            seen.add(("lambda", cfg.resformer_learn, cfg.resformer_lambda_lr))
        if cfg.path == "sla":
            seen |= {("n_l >= L",) if cfg.sla_layers >= L else ("n_l < L",), ("n_h", "0" if cfg.sla_heads == 0 else "H" if cfg.sla_heads == H else "mid"),
                     ("chain", cfg.sla_chain)}
        if cfg.path == "depth":
            seen.add(("stride > L",) if cfg.depth_stride > L else ("stride 1",) if cfg.depth_stride == 1 else ("stride mid",))
    want = {(a, p) for a in M.ARCHS for p in M.PATHS} | {("G", g) for g in (1, 2, 3)} | {("L", l) for l in range(1, 6)} | {("T", 1), ("T", 8)}
    want |= {("D odd",), ("D even",), ("D != C/H",), ("qkn", 0), ("qkn", 1), ("tie", 0), ("tie", 1), ("n_l >= L",), ("n_l < L",), ("chain", 0), ("chain", 1)}
    want |= {("n_h", x) for x in ("0", "H", "mid")} | {("stride > L",), ("stride 1",), ("stride mid",)}
    want |= {("lambda", 0, M.f32(0.02))} | {("lambda", 1, M.f32(x)) for x in (0.0, 0.02, 0.1)}  # (fixed keeps the default lr)
    assert want <= seen, want - seen


def test_fuzz_state_of_one_index_is_the_one_a_count_writes_and_T1_gradients_are_exact_zeros():
    seed, i = 1, 30  # a gpt2 SLA with T = 1 (draw_config(1, 30)): its q/k gradients are 0 in exact arithmetic
    cfg, B, T, _, _, _ = FZ.draw_config(seed, i)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_states.py")
        subprocess.run([sys.executable, script, "--seed", str(seed), "--count", "31", "--jobs", "2", "--quiet", "--out", a], check=True)
        subprocess.run([sys.executable, script, "--seed", str(seed), "--only", str(i), "--out", b], check=True, capture_output=True)
        name = FZ.state_name(seed, i, cfg) + ".bin"
        assert len(os.listdir(a)) == 31 and os.listdir(b) == [name]
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            assert fa.read() == fb.read()
        header, arrays = S.read_state(os.path.join(b, name))
    assert T == 1 and header["fp32_check"] in (True, False) and "fp32_sensitivity" in header
    ez = FZ.exact_zero_grads(cfg, torch.as_tensor(arrays["inputs"].copy())).numpy()  # a read-only view
    assert ez.any() and np.all(arrays["grads"][ez] == 0)
