"""RSMT metrics, the linear in-between baseline and the style classifier."""

from __future__ import annotations

import math

import pytest
import torch
from mimic2dm.generators.rsmt import metrics as M
from mimic2dm.generators.rsmt.baseline import linear_transition
from mimic2dm.generators.rsmt.classifier import (
    StyleClassifier,
    StyleClassifierConfig,
    accuracy,
    classifier_loss,
    embed_windows,
    frechet_distance,
)

from mimic2dm.geometry.rotations import quat_normalize, quat_to_rot6d

IDENTITY_6D = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0])


def still(frames: int, batch: tuple[int, ...] = ()) -> torch.Tensor:
    """A standing pose held for ``frames`` frames: ``[*batch, frames, 180]``, ankles at z=0.1."""
    x = torch.zeros(*batch, frames, M.D)
    pos = torch.linspace(0.1, 1.7, M.J)[:, None] * torch.tensor([0.0, 0.0, 1.0])
    pos[list(M.FEET), 2] = 0.1
    x[..., M.POS] = pos.flatten()
    x[..., M.ROT] = IDENTITY_6D.repeat(M.J)
    return x


def random_motion(batch: int = 3, frames: int = 20, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return still(frames, (batch,)) + 0.1 * torch.randn(batch, frames, M.D, generator=g)


def set_foot(x: torch.Tensor, foot: int, xyz: torch.Tensor) -> None:
    """Write positions ``[T, 3]`` of joint ``foot`` into ``x [T, 180]``."""
    x[:, 3 * foot : 3 * foot + 3] = xyz


def test_identical_motions_score_zero():
    x = random_motion()
    assert M.l2_global_positions(x, x.clone()) == 0.0
    assert M.mean_joint_error(x, x.clone()) == 0.0
    assert M.last_frame_error(x[:, -1], x[:, -1].clone()) == 0.0
    assert M.npss(x, x.clone()) == pytest.approx(0.0, abs=1e-12)


def test_shift_of_every_joint():
    x = random_motion()
    y = x.clone()
    y[..., M.POS] += torch.tensor([0.1, 0.0, 0.0]).repeat(M.J)
    assert M.mean_joint_error(y, x) == pytest.approx(0.1, abs=1e-6)
    assert M.l2_global_positions(y, x) == pytest.approx(math.sqrt(15) * 0.1, abs=1e-6)
    assert M.last_frame_error(y[:, -1], x[:, -1]) == pytest.approx(0.1, abs=1e-6)
    with pytest.raises(ValueError):
        M.mean_joint_error(y[:, 1:], x)


def sines(freq_hz: float, amplitude: float = 1.0, frames: int = 60) -> torch.Tensor:
    t = torch.arange(frames) / M.FPS
    x = still(frames, (2,))
    phase = torch.linspace(0, 3, 90)
    x[..., M.ROT] = amplitude * torch.sin(2 * math.pi * freq_hz * t[:, None] + phase)
    return x


def test_npss_separates_frequency_from_amplitude():
    gt = sines(1.0)
    scaled = M.npss(sines(1.0, amplitude=2.0), gt)
    other_freq = M.npss(sines(3.0), gt)
    assert scaled == pytest.approx(0.0, abs=1e-9)
    assert other_freq > 0.5
    assert M.npss(gt, sines(5.0)) > other_freq


def sliding(height: float, speed: float = 1.0, frames: int = 30) -> torch.Tensor:
    """Left foot at rest on the ground (z=0.1); right foot at ``height`` moving in x."""
    x = still(frames)
    t = torch.arange(frames) / M.FPS
    path = torch.stack([speed * t, torch.full_like(t, -0.1), torch.full_like(t, height)], -1)
    set_foot(x, M.FEET[0], path)
    return x


def test_foot_skating():
    assert M.foot_skating(still(30)) == 0.0
    # one of two feet slides at 1 m/s on the ground: mean over feet 0.5 m/s
    assert M.foot_skating(sliding(0.1)) == pytest.approx(0.5, abs=1e-5)
    assert M.foot_skating(sliding(0.1, speed=0.2)) == pytest.approx(0.1, abs=1e-5)
    assert M.foot_skating(sliding(0.3)) == pytest.approx(0.0, abs=1e-9)
    assert M.foot_skating(sliding(0.3), ground=0.1) == pytest.approx(0.0, abs=1e-9)
    # half the threshold above the ground: weight 2 - sqrt(2)
    half = M.foot_skating(sliding(0.1125), ground=0.1)
    assert half == pytest.approx(0.5 * (2 - math.sqrt(2)), abs=1e-4)
    batch = torch.stack([still(30), sliding(0.1)])
    assert M.foot_skating(batch) == pytest.approx(0.25, abs=1e-5)


def test_foot_contact_prob_eq5():
    p = M.foot_contact_prob(torch.tensor([0.0, 0.4, 0.5, 0.75, 1.0, 1.2]))
    assert torch.allclose(p, torch.tensor([1.0, 1.0, 1.0, 0.5, 0.0, 0.0]), atol=1e-6)
    assert float(M.foot_contact_prob(0.6)) == pytest.approx(2 * 0.2**3 - 3 * 0.2**2 + 1)


def test_diversity():
    x = random_motion(batch=1)[0]
    assert M.diversity(torch.stack([x, x, x])) == 0.0
    y = x.clone()
    y[:, M.POS] += torch.tensor([0.0, 0.1, 0.0]).repeat(M.J)
    assert M.diversity(torch.stack([x, y])) == pytest.approx(0.1, abs=1e-6)
    # pairs (x, x), (x, y), (x, y): mean 0.2 / 3
    assert M.diversity(torch.stack([x, x, y])) == pytest.approx(0.2 / 3, abs=1e-6)
    with pytest.raises(ValueError):
        M.diversity(x[None])


def test_joint_speeds():
    x = still(31)
    x[..., M.POS] += (torch.arange(31) / M.FPS)[:, None] * torch.tensor([1.0, 0, 0]).repeat(M.J)
    assert M.joint_speed_percentile(x) == pytest.approx(1.0, abs=1e-5)
    assert M.speed_within(x, 0.9) == 0.0
    assert M.speed_within(x, 1.1) == 1.0
    assert M.speed_within(sliding(0.1, speed=2.0), 1.0) == 0.0


def random_frame(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M.D, generator=g)
    x[M.ROT] = quat_to_rot6d(quat_normalize(torch.randn(M.J, 4, generator=g))).flatten()
    return x


def test_linear_transition():
    start, target = random_frame(1), random_frame(2)
    out = linear_transition(start, target, 10)
    assert out.shape == (10, M.D)
    assert torch.allclose(out[-1, M.POS], target[M.POS], atol=1e-5)
    assert torch.allclose(out[-1, M.ROT], target[M.ROT], atol=1e-5)
    assert torch.allclose(out[0, M.POS], start[M.POS] + (target[M.POS] - start[M.POS]) / 10)
    assert torch.allclose(out[0, M.VEL], start[M.VEL])
    assert torch.allclose(out[3, M.VEL], (out[3, M.POS] - out[2, M.POS]) * M.FPS, atol=1e-5)
    r = M.rotations6d(out)
    c0, c1 = r[..., :3], r[..., 3:]
    assert torch.allclose(c0.norm(dim=-1), torch.ones(10, M.J), atol=1e-5)
    assert torch.allclose(c1.norm(dim=-1), torch.ones(10, M.J), atol=1e-5)
    assert (c0 * c1).sum(-1).abs().max() < 1e-5
    # rotations move monotonically towards the target
    err = (r - M.rotations6d(target)).norm(dim=-1).mean(-1)
    assert (err[1:] <= err[:-1] + 1e-6).all()
    assert M.last_frame_error(out[-1], target) < 1e-5
    assert linear_transition(start, target, 1).allclose(linear_transition(start, target, 1))
    batched = linear_transition(torch.stack([start, target]), torch.stack([target, start]), 4)
    assert batched.shape == (2, 4, M.D)
    assert torch.allclose(batched[1, -1, M.POS], start[M.POS], atol=1e-5)


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def oscillation(label: int, frames: int, g: torch.Generator) -> torch.Tensor:
    """A window whose pelvis oscillates in x at 1 Hz (label 0) or 3 Hz (label 1)."""
    freq = 1.0 if label == 0 else 3.0
    t = torch.arange(frames) / M.FPS
    phase = 2 * math.pi * torch.rand((), generator=g)
    arg = 2 * math.pi * freq * t + phase
    x = still(frames)
    x[:, 0] += 0.1 * torch.sin(arg) + 0.005 * torch.randn(frames, generator=g)
    x[:, M.VEL.start] = 0.1 * 2 * math.pi * freq * torch.cos(arg)
    return x


def make_batch(n: int, frames: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.randint(0, 2, (n,), generator=g)
    return torch.stack([oscillation(int(label), frames, g) for label in y]), y


def test_style_classifier_learns_two_styles(one_thread):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    ref, _ = make_batch(64, 40, g)
    flat = ref.reshape(-1, M.D)
    model = StyleClassifier(StyleClassifierConfig(num_styles=2), flat.mean(0), flat.std(0))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(100):
        x, y = make_batch(16, int(torch.randint(20, 61, (), generator=g)), g)
        out = classifier_loss(model, x, y)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    labels = [i % 2 for i in range(40)]
    windows = [oscillation(lab, 20 + i, g) for i, lab in enumerate(labels)]
    assert accuracy(model, windows, labels) >= 0.9
    assert model.training  # predict restores the mode
    feats = embed_windows(model, windows)
    assert feats.shape == (40, 64)
    with pytest.raises(ValueError):
        model(torch.zeros(1, 7, M.D))


def test_classifier_shapes_and_config():
    model = StyleClassifier(StyleClassifierConfig(num_styles=5, width=8, layers=2))
    x = torch.randn(3, 12, M.D)
    assert model(x).shape == (3, 5)
    assert model.embed(x).shape == (3, 8)
    assert model.predict(x).dtype == torch.long
    assert set(dict(model.named_buffers())) == {"mean", "std"}
    with pytest.raises(ValueError):
        StyleClassifierConfig(kernel=4)
    with pytest.raises(ValueError):
        StyleClassifierConfig(num_styles=1)


def test_frechet_distance():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(200, 8, generator=g)
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    assert frechet_distance(a, a + 1.0) == pytest.approx(8.0, rel=1e-6)
    assert frechet_distance(a.numpy(), 2 * a.numpy()) > 1.0
