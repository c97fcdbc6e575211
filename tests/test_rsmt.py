"""RSMT: frame features, the style corpus, the phase/manifold/sampler/classifier jobs and
transitions from a trained sampler, on the DeepMimic and CMU fixture clips."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mimic2dm.generators.rsmt import data as rdata
from mimic2dm.generators.rsmt import features as F
from mimic2dm.generators.rsmt.sampler import blend_phase, rotate_phase

from mimic2dm.characters.mocap import human_fk
from mimic2dm.utils.validate import ConfigError

FIX = Path(__file__).parent / "fixtures"
WALK = FIX / "deepmimic" / "humanoid3d_walk.txt"


def fixture_corpus(tmp_path: Path, **over) -> Path:
    """A corpus config over the fixture clips: 4 styles, CMU walk held out."""
    text = f"""name: fixtures
root: {FIX}
mirror: {str(over.get("mirror", True)).lower()}
character_file: null
styles:
  walk: [deepmimic/humanoid3d_walk.txt, shared/data/mocap/cmu_walk.npz]
  run: [deepmimic/humanoid3d_run.txt, shared/data/mocap/cmu_run.npz]
  zombie: [deepmimic/humanoid3d_zombie_walk.txt]
  stealthy: [deepmimic/humanoid3d_stealthy_walk.txt]
held_out: [{over.get("held", "shared/data/mocap/cmu_walk.npz")}]
"""
    p = tmp_path / "corpus.yaml"
    p.write_text(text)
    return p


def load(path: Path) -> tuple[rdata.Corpus, rdata.Corpus]:
    from omegaconf import OmegaConf

    return rdata.load_corpus(rdata.CorpusConfig(**OmegaConf.to_container(OmegaConf.load(path))))


def fk_positions(x: torch.Tensor) -> torch.Tensor:
    return human_fk(F.to_mocap(x))[0]


def test_frames_mirrors_and_canonical_frames_drive_the_skeleton():
    x = rdata.read_motion(WALK)
    assert x.shape == (39, F.D)  # 1.3 s at 30 fps
    for y in (x, F.mirror(x), F.canonicalise(F.mirror(x), 7)):
        assert torch.allclose(fk_positions(y), F.positions(y), atol=1e-5)
    m = F.mirror(x)
    assert torch.allclose(
        F.positions(m)[:, 3, 1], -F.positions(x)[:, 6, 1]
    )  # right arm <- left arm, y flipped
    assert torch.allclose(F.mirror(m), x, atol=1e-6)
    c = F.canonicalise(x, 7)
    assert torch.allclose(c[7, 0:2], torch.zeros(2), atol=1e-6)
    assert abs(float(F.heading(c[7]))) < 1e-5
    # distances are kept, velocities rotate with positions
    assert torch.allclose(
        F.positions(c)[1:] - F.positions(c)[:-1], F.velocities(c)[1:] / 30.0, atol=1e-5
    )


def test_untransform_inverts_transform():
    from mimic2dm.generators.rsmt.inference import untransform

    x = rdata.read_motion(WALK)[None]
    yaw, shift = F.canonical_transform(x[:, 10])
    assert torch.allclose(untransform(F.transform(x, yaw, shift), yaw, shift), x, atol=1e-5)


def test_the_phase_update_turns_by_the_frequency_and_blends_halfway():
    p = torch.tensor([[0.0, 2.0]])  # one channel, angle 0, amplitude 2
    q = p
    for _ in range(30):  # 1 Hz for one second: a whole turn
        q = rotate_phase(q, torch.tensor([[1.0]]), torch.tensor([[2.0]]))
    assert torch.allclose(q, p, atol=1e-4)
    quarter = rotate_phase(
        p, torch.tensor([[7.5]]), torch.tensor([[1.0]])
    )  # 7.5 Hz / 30 fps = 1/4 turn
    assert torch.allclose(quarter, torch.tensor([[1.0, 0.0]]), atol=1e-5)
    mid = blend_phase(torch.tensor([[0.0, 1.0]]), torch.tensor([[3.0, 0.0]]))
    assert torch.allclose(mid, 2.0 * torch.tensor([[math.sqrt(0.5), math.sqrt(0.5)]]), atol=1e-5)


def test_corpus_styles_held_out_clips_and_bad_configs(tmp_path):
    train, held = load(fixture_corpus(tmp_path))
    assert train.styles == ["run", "stealthy", "walk", "zombie"]
    assert [c.name for c in held.clips] == ["cmu_walk.npz"] and held.clips[0].style == 2
    assert len(train.clips) == 2 * 5  # 5 training clips and their mirrors
    assert "cmu_walk.npz" not in {c.name for c in train.clips}
    w = rdata.sample_windows(
        train, 6, 20, torch.Generator().manual_seed(0), styles=torch.tensor([3] * 6)
    )
    assert w.x.shape == (6, 20, F.D) and (w.style == 3).all()
    assert torch.allclose(w.x[:, 0, 0:2], torch.zeros(6, 2), atol=1e-5)
    with pytest.raises(ConfigError, match="held_out"):
        load(fixture_corpus(tmp_path, held="deepmimic/humanoid3d_nothing.txt"))
    with pytest.raises(ValueError, match="no clip of style 'run' has 200 frames"):
        rdata.sample_windows(train, 2, 200, torch.Generator(), styles=torch.tensor([0, 0]))


def _train(*args: str, config_dir: Path | None = None) -> subprocess.CompletedProcess:
    opt = [f"--config-dir={config_dir}"] if config_dir else []
    cmd = [sys.executable, "-m", "mimic2dm.generators.rsmt.train", *opt, "logger.wandb=false", "logger.tensorboard=false", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


TINY = {
    "phase": ["model.phase.hidden=16", "model.phase.window=21", "model.phase.kernel=5"],
    "manifold": ["model.manifold.hidden=32", "model.manifold.latent=8", "model.manifold.experts=2", "train.window=8"],
    "sampler": ["model.sampler.hidden=32", "model.sampler.lstm=32", "model.sampler.style_channels=8",
                "model.sampler.style_frames=24", "model.sampler.min_frames=4", "model.sampler.max_frames=12"],
    "classifier": ["model.classifier.width=16", "train.min_window=12", "train.max_window=24"],
}  # fmt: skip


def test_every_part_trains_resumes_exactly_and_the_sampler_makes_transitions(tmp_path):
    """phase -> manifold -> sampler, and the classifier: a few steps each through the Hydra
    app; the sampler's 3 + 3 resumed steps equal 6 straight; then a transition from it."""
    corpus = fixture_corpus(tmp_path)
    data = ["rsmt_data=corpus"]
    conf = tmp_path / "conf"
    (conf / "rsmt_data").mkdir(parents=True)
    corpus.rename(conf / "rsmt_data" / "corpus.yaml")
    steps = ["train.max_steps=6", "train.eval_every=3", "train.ckpt_every=3", "train.batch_size=4"]
    runs = {p: tmp_path / p for p in TINY}
    up = {"phase": [], "manifold": [f"phase={runs['phase']}"], "sampler": [f"manifold={runs['manifold']}"], "classifier": []}  # fmt: skip
    for part in ("phase", "manifold", "sampler", "classifier"):
        r = _train(
            f"part={part}",
            f"run_dir={runs[part]}",
            *data,
            *steps,
            *TINY[part],
            *up[part],
            config_dir=conf,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        assert (runs[part] / "checkpoints" / "last.pt").is_file()
    # exact resume of the sampler
    half = tmp_path / "half"
    r = _train("part=sampler", f"run_dir={half}", *data, *steps[1:], "train.max_steps=3", *TINY["sampler"], *up["sampler"], config_dir=conf)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    r = _train(f"resume={half}", "part=sampler", *data, *steps, *TINY["sampler"], *up["sampler"], config_dir=conf)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    from mimic2dm.utils.checkpoint import load_checkpoint

    a = load_checkpoint(runs["sampler"] / "checkpoints" / "last.pt")["model"]
    b = load_checkpoint(half / "checkpoints" / "last.pt")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the sampler checkpoint is self-contained
    from mimic2dm.generators.rsmt.inference import load_rsmt

    model = load_rsmt(runs["sampler"])
    assert model.styles == ["run", "stealthy", "walk", "zombie"]
    x = rdata.read_motion(WALK)
    out = model.transition(x[None, 0], model.phase_at(x, 0)[None], x[None, 20], 20, x[None, :24])
    assert out.shape == (1, 20, F.D) and out.isfinite().all()
    # the held-out evaluation against linear interpolation
    import json

    from typer.testing import CliRunner

    from mimic2dm.cli import app

    args = ["bench", "rsmt", "--model", str(runs["sampler"]), "--classifier", str(runs["classifier"]),
            "--data", str(conf / "rsmt_data" / "corpus.yaml"), "--cases", "4", "--seconds", "0.5,1",
            "--samples", "2", "--json", "-"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert set(rep["lengths"]) == {"0.5s", "1s"} and rep["held_out"] == ["cmu_walk.npz"]
    one = rep["lengths"]["1s"]
    assert (
        one["frames"] == 30 and one["linear"]["last_frame_error_m"] < 1e-5
    )  # the baseline ends on the target
    assert one["rsmt"]["last_frame_error_m"] > 0 and 0 <= one["rsmt"]["style_accuracy"] <= 1
    assert one["rsmt"]["diversity"] > 0 and one["linear"]["diversity"] == 0


def test_a_part_without_its_upstream_run_is_refused_in_one_line(tmp_path):
    r = _train("part=sampler", f"run_dir={tmp_path / 's'}")
    assert r.returncode == 1 and "manifold" in r.stderr and not (tmp_path / "s").exists()
    r = _train("part=nope", f"run_dir={tmp_path / 'n'}")
    assert r.returncode == 1 and "part" in r.stderr


def test_the_shipped_config_states_every_model_default():
    """conf/train_rsmt.yaml's model blocks are the schemas' defaults (the app sets the derived fields)."""
    from dataclasses import MISSING, fields

    from mimic2dm.generators.rsmt.train import DERIVED, PARTS, model_class
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(__file__).parents[1] / "conf" / "train_rsmt.yaml")
    for part in PARTS:
        block = OmegaConf.to_container(cfg.model[part])
        want = {f.name: f.default for f in fields(model_class(part)) if f.default is not MISSING}
        for k in DERIVED.get(part, ()):
            want.pop(k, None)
        assert block == want, part
