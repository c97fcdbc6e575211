"""Generator models with real torch: VQ-VAE, GPT (toy languages, streaming), diffusion, FID."""

import math

import numpy as np
import pytest
import torch
from generator_helpers import build_views, needs_mocap
from mimic2dm.generators.data import WindowSampler, load_clips
from mimic2dm.generators.diffusion import Diffusion, DiffusionConfig
from mimic2dm.generators.fid import (
    FIDConfig,
    FIDExtractor,
    MotionEncoder,
    diversity,
    extractor_loss,
    fid,
    frechet_distance,
    load_fid_extractor,
    positive_pairs,
    real_windows,
)
from mimic2dm.generators.gpt import GPT, GPTConfig, TokenStream
from mimic2dm.generators.vqvae import VQVAE, EMAQuantizer, VQVAEConfig, evaluate_tokenizer


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    """Small models: one torch thread is faster than two on shared cores."""


@pytest.fixture(scope="module")
def real_set(tmp_path_factory):
    """Walk and run clips, one orthogonal view pair each (4 views, 30 fps): a small real set."""
    out, _, _ = build_views(tmp_path_factory, "real", pairs=1, seed=0)
    clips = load_clips(out)
    return clips, clips.compute_stats()


# ----------------------------------------------------------------------------- VQ-VAE
def test_ema_quantizer_initialises_updates_and_resets_dead_codes():
    torch.manual_seed(0)
    z = torch.cat([torch.randn(50, 2) * 0.01 + 4, torch.randn(50, 2) * 0.01 - 4])[None]
    q = EMAQuantizer(size=4, dim=2, decay=0.5, dead_threshold=0.5)
    q(z)
    assert bool(q.initted)
    # seeded with encoder outputs (then one EMA step): every code sits on a cluster
    assert ((q.codebook.norm(dim=1) - 4 * math.sqrt(2)).abs() < 0.1).all(), q.codebook
    with torch.no_grad():  # two live codes near the clusters, two far away
        q.codebook.copy_(torch.tensor([[5.0, 5.0], [-5.0, -5.0], [100.0, 100.0], [200.0, 200.0]]))
        q.ema_count.fill_(1.0)
        q.ema_sum.copy_(q.codebook)
    _, idx, _, ppl = q(z)
    assert set(idx.flatten().tolist()) == {0, 1} and float(ppl) == pytest.approx(2.0, abs=1e-4)
    # EMA: (0.5 * 5 + 0.5 * sum(cluster)) / (0.5 + 0.5 * 50) ~ 4.02, pulled to the cluster mean
    assert (q.codebook[0] - 4.02).abs().max() < 0.02 and (q.codebook[1] + 4.02).abs().max() < 0.02
    assert (q.codebook[2:] > 50).all(), "unused codes are not dead yet (EMA count 0.5)"
    q(z)
    assert (q.codebook[2:].abs() < 4.1).all(), "dead codes are reset onto encoder outputs"
    _, _, commit, _ = q(z)
    assert float(commit) < 0.05
    q.eval()
    before = q.codebook.clone()
    q(torch.randn(1, 20, 2))
    assert torch.equal(before, q.codebook), "eval mode must not touch the codebook"


def test_vqvae_shapes_gradients_and_errors():
    m = VQVAE(VQVAEConfig(width=32, codebook_size=16, code_dim=8))
    x, km = torch.randn(2, 16, 37), torch.ones(2, 16, 17, dtype=torch.bool)
    recon, out = m(x, torch.ones_like(x, dtype=torch.bool), km)
    assert recon.shape == x.shape and out["loss"].requires_grad
    out["loss"].backward()
    assert m.encoder.net[0].weight.grad.abs().sum() > 0, "straight-through must reach the encoder"
    idx = m.encode(x, km)
    assert idx.shape == (2, 4) and m.decode(idx).shape == (2, 16, 37)
    with pytest.raises(ValueError, match="not a multiple of l = 4"):
        m(
            torch.randn(1, 18, 37),
            torch.ones(1, 18, 37, dtype=torch.bool),
            torch.ones(1, 18, 17, dtype=torch.bool),
        )
    with pytest.raises(ValueError, match=r"expected windows \[B, T, 37\]"):
        m.encode(torch.randn(1, 16, 30))


@needs_mocap
def test_vqvae_overfits_small_real_set(real_set):
    """Stated bound: after 400 steps on 4 real CMU views, < 35 px (full G^-1) and < 8 px (pose) at 1080p."""
    clips, stats = real_set
    torch.manual_seed(0)
    s = WindowSampler(clips, 32, stats)
    m = VQVAE(VQVAEConfig(width=64))
    before = evaluate_tokenizer(m, s, stats, stride=4)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for step in range(400):
        for group in opt.param_groups:
            group["lr"] = 1e-3 if step < 300 else 3e-4
        b = s.sample(32, g)
        loss = m(b.x, b.fmask, b.kmask)[1]["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = evaluate_tokenizer(m, s, stats, stride=4)
    assert after["recon_px"] < 35.0 and after["recon_pose_px"] < 8.0, after
    assert after["recon_pose_px"] < 0.3 * before["recon_pose_px"]
    assert 0 < after["usage"] <= 1 and after["perplexity"] > 10


# ----------------------------------------------------------------------------- GPT
def toy_language(n: int, length: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes; class c uses tokens 8c..8c+7 and from token i goes to 2i or 2i+1 (mod 8)
    with probability 1/2 each: entropy rate ln 2 per token, first token uniform (ln 8)."""
    y = torch.randint(2, (n,), generator=gen)
    seq = torch.zeros(n, length, dtype=torch.long)
    seq[:, 0] = torch.randint(8, (n,), generator=gen)
    for t in range(1, length):
        seq[:, t] = (2 * seq[:, t - 1] + torch.randint(2, (n,), generator=gen)) % 8
    return seq + 8 * y[:, None], y


@pytest.fixture(scope="module")
def toy_gpt():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    m = GPT(
        GPTConfig(
            vocab_size=16,
            block_size=13,
            n_layer=2,
            n_embd=64,
            num_classes=2,
            dropout=0.0,
            p_uncond=0.1,
        )
    )
    opt = m.configure_optimizers(lr=3e-3, weight_decay=0.0)
    for _ in range(150):
        seq, y = toy_language(64, 13, g)
        _, loss = m(seq[:, :-1], y, seq)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval()


def test_gpt_learns_toy_language_to_its_entropy(toy_gpt):
    seq, y = toy_language(512, 13, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, _ = toy_gpt(seq[:, :-1], y)
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), seq, reduction="none")
    ppl = float(
        torch.exp(nll[:, 1:].mean().detach())
    )  # after the first token the entropy rate is ln 2
    assert 1.9 < ppl < 2.2, ppl
    assert float(torch.exp(nll[:, 0].mean())) == pytest.approx(8.0, rel=0.15)


def test_conditional_sampling_follows_the_label(toy_gpt):
    g = torch.Generator().manual_seed(2)
    for label in (0, 1):
        toks = toy_gpt.generate(torch.full((64,), label), 24, temperature=1.0, generator=g)
        inside = ((toks >= 8 * label) & (toks < 8 * label + 8)).float().mean()
        assert inside > 0.97, (label, float(inside))
        legal = ((2 * toks[:, :-1] + 0) % 8 == toks[:, 1:] % 8) | (
            (2 * toks[:, :-1] + 1) % 8 == toks[:, 1:] % 8
        )
        assert legal.float().mean() > 0.95
    free = toy_gpt.generate(torch.full((256,), -1), 1, generator=g)
    assert 0.2 < float((free < 8).float().mean()) < 0.8, (
        "zero condition should produce both classes"
    )


@pytest.mark.parametrize("views", [1, 2])
def test_cached_stream_equals_naive_sliding_window(views):
    torch.manual_seed(views)
    m = GPT(GPTConfig(vocab_size=32, block_size=9, num_classes=2, num_views=views)).eval()
    y = torch.tensor([1, 0])
    stream = TokenStream(m, y, temperature=0.0, slide=1)
    fast = torch.stack([stream.step() for _ in range(40)], 1)
    ctx, slow = torch.zeros(2, 0, dtype=torch.long), []
    for _ in range(40):
        if ctx.shape[1] > 8:  # naive: recompute everything, drop whole time steps
            ctx = ctx[:, math.ceil((ctx.shape[1] - 8) / views) * views :]
        slow.append(m.next_token(ctx, y, temperature=0.0))
        ctx = torch.cat([ctx, slow[-1][:, None]], 1)
    assert torch.equal(fast, torch.stack(slow, 1))


def test_multiview_stream_keeps_context_aligned_to_view_zero():
    m = GPT(GPTConfig(vocab_size=32, block_size=10, num_views=2)).eval()
    stream = TokenStream(m, torch.tensor([-1]), generator=torch.Generator().manual_seed(0))
    for _ in range(50):
        stream.step()
        assert (stream.count - stream.context.shape[1]) % 2 == 0
        assert stream.context.shape[1] <= 9


def test_sampling_is_deterministic_under_a_seed(toy_gpt):
    a = toy_gpt.generate(
        torch.tensor([0, 1]), 30, top_k=4, generator=torch.Generator().manual_seed(5)
    )
    b = toy_gpt.generate(
        torch.tensor([0, 1]), 30, top_k=4, generator=torch.Generator().manual_seed(5)
    )
    c = toy_gpt.generate(
        torch.tensor([0, 1]), 30, top_k=4, generator=torch.Generator().manual_seed(6)
    )
    assert torch.equal(a, b) and not torch.equal(a, c)


# ----------------------------------------------------------------------------- diffusion
def test_diffusion_learns_two_class_toy_and_inpaints():
    torch.manual_seed(0)
    cfg = DiffusionConfig(
        in_dim=4, window=8, n_layer=2, n_head=2, n_embd=32, dropout=0.0, num_steps=20, num_classes=2
    )
    m = Diffusion(cfg)
    means = torch.tensor([[1.0, -1.0, 0.5, 0.0], [-1.0, 1.0, -0.5, 0.0]])
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    for _ in range(300):
        y = torch.randint(2, (64,))
        x0 = means[y][:, None].expand(64, 8, 4) + 0.05 * torch.randn(64, 8, 4)
        fmask = torch.ones_like(x0, dtype=torch.bool)
        fmask[:, :, 3] = False  # masked channel: any value is fine
        x0 = torch.where(fmask, x0, 100.0)  # would dominate the loss if the mask were ignored
        loss = m(x0, fmask, y)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    g = torch.Generator().manual_seed(0)
    for label in (0, 1):
        x = m.sample(torch.full((32,), label), g)
        assert (x[..., :3].mean((0, 1)) - means[label, :3]).abs().max() < 0.2, (
            label,
            x[..., :3].mean((0, 1)),
        )
    known = torch.randn(4, 3, 4)
    x = m.sample(torch.zeros(4, dtype=torch.long), g, known=known)
    assert torch.equal(x[:, :3], known)
    long = m.sample_long(
        torch.zeros(2, dtype=torch.long), 20, overlap=2, generator=torch.Generator().manual_seed(1)
    )
    again = m.sample_long(
        torch.zeros(2, dtype=torch.long), 20, overlap=2, generator=torch.Generator().manual_seed(1)
    )
    assert long.shape == (2, 20, 4) and torch.equal(long, again)


# ----------------------------------------------------------------------------- FID
def test_frechet_distance_matches_closed_form():
    mu1, mu2 = np.zeros(3), np.array([1.0, 2.0, 0.0])
    s1, s2 = np.diag([1.0, 4.0, 9.0]), np.diag([4.0, 1.0, 9.0])
    expected = 5.0 + (1 - 2) ** 2 + (2 - 1) ** 2 + 0.0  # |dmu|^2 + sum (sqrt(a) - sqrt(b))^2
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(expected, abs=1e-8)
    f = np.random.default_rng(0).normal(size=(200, 5))
    assert diversity(np.repeat(f[:1], 10, 0)) == 0.0 and diversity(f) > 1.0


@needs_mocap
def test_fid_is_zero_on_itself_grows_with_shift_and_is_versioned(real_set, tmp_path):
    clips, stats = real_set
    torch.manual_seed(0)
    s = WindowSampler(clips, 32, stats)
    model = MotionEncoder(FIDConfig(window=32, width=64, feat_dim=32, num_classes=2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        out = extractor_loss(model, *positive_pairs(s, 64, 4, g), g)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    ext = FIDExtractor(model, stats)
    feats, kmask, _ = real_windows(s, 512, stride=1)
    base = ext.features(feats, kmask)
    assert fid(base, base) < 1e-6
    scores = []
    for shift in (0.02, 0.05, 0.1, 0.2, 0.4):
        moved = feats.clone()
        moved[..., 0:34:2] += shift  # every keypoint moves right by `shift` body sizes
        scores.append(fid(ext.features(moved, kmask), base))
    assert all(a < b for a, b in zip(scores, scores[1:], strict=False)), scores
    assert scores[0] > 1e-4
    path = tmp_path / "fid_extractor.pt"
    torch.save(ext.payload(), path)
    assert load_fid_extractor(path).version == ext.version
    bad = ext.payload()
    bad["model"] = {k: v.clone() for k, v in bad["model"].items()}
    next(iter(bad["model"].values())).view(-1)[0] += 1.0
    torch.save(bad, path)
    with pytest.raises(ValueError, match="weights hash .* != stored hash"):
        load_fid_extractor(path)
