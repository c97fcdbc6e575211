"""RSMT as a high-level controller (mimic2dm/control/rsmt_stream.py): 3D transitions -> canonical 2D chunks."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.control.generator import load_any_generator, open_stream, reinitialised
from mimic2dm.control.rsmt_stream import TRANSITION_FRAMES, random_rsmt_generator
from mimic2dm.motion.keypoint_sets import load_keypoint_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def gen():
    """An untrained RSMT with the run, stealthy, walk and zombie examples."""
    return random_rsmt_generator(seed=0)


def _humanoid_dim() -> int:
    from mimic2dm.characters import CHARACTERS

    return 2 * load_keypoint_set(CHARACTERS.load("humanoid").keypoint_set).num_keypoints + 3


def test_stream_gives_canonical_chunks_of_the_humanoid(gen):
    assert gen.model_type == "rsmt" and gen.data["keypoint_set"] == "coco17"
    assert gen.data["fps"] == 30
    s = open_stream(gen, gen.label_id("walk"), seed=1)
    chunks = [s.next_chunk() for _ in range(2)]
    for c in chunks:
        assert c.shape == (1, TRANSITION_FRAMES, _humanoid_dim()) and torch.isfinite(c).all()
    # the first row is the start frame, an example frame: a body about 1 body size tall
    K = load_keypoint_set("coco17").num_keypoints
    pose = chunks[0][0, 0, : 2 * K].reshape(K, 2)
    assert 1.0 < float(pose[:, 1].max() - pose[:, 1].min()) < 6.0
    # same seed, same motion
    again = open_stream(gen, gen.label_id("walk"), seed=1).next_chunk()
    assert torch.equal(again, chunks[0])


def test_set_label_switches_the_style_example(gen):
    s = open_stream(gen, -1, seed=2)
    assert "walk" in s.example.path.name and "zombie" not in s.example.path.name
    s.next_chunk()
    s.set_label(gen.label_id("zombie"))
    assert "zombie" in s.example.path.name and s.style == gen.data["label_names"].index("zombie")
    c = s.next_chunk()
    assert c.shape[1] == TRANSITION_FRAMES and torch.isfinite(c).all()


def test_rsmt_checkpoint_is_detected_and_reinitialised(tmp_path, gen):
    """``--generator`` takes an RSMT sampler checkpoint (its ``kind``); ``--random-weights`` keeps its styles."""
    from mimic2dm.generators.rsmt.data import Stats
    from mimic2dm.generators.rsmt.inference import SAMPLER_KIND

    r = gen.rsmt
    m = r.sampler.manifold
    stats = Stats(*(getattr(m, k) for k in ("mean", "std", "dmean", "dstd", "hmean", "hstd")))
    ck = tmp_path / "sampler.pt"
    torch.save({"kind": SAMPLER_KIND, "model": r.sampler.state_dict(), "model_config": asdict(r.sampler.cfg),
                "manifold": {"model_config": asdict(m.cfg), "stats": stats.to_dict()},
                "phase": {"model": r.phase.state_dict(), "model_config": asdict(r.phase.cfg)},
                "styles": list(r.styles)}, ck)  # fmt: skip
    loaded = load_any_generator(ck)
    assert loaded.model_type == "rsmt" and loaded.data["label_names"] == r.styles
    assert loaded.source == str(ck)
    fresh = reinitialised(loaded, seed=3)
    assert fresh.model_type == "rsmt" and fresh.source.startswith("random weights")
    assert fresh.data["label_names"] == r.styles


def test_control_cli_drives_a_random_tracker_with_random_rsmt(tmp_path):
    out = tmp_path / "rsmt.json"
    res = CliRunner().invoke(app, ["control", "--random-weights", "--random-model", "rsmt", "--skill", "walk",
                                   "--switch", "1:zombie", "--seconds", "2", "--no-fid", "--json", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert r["generator_type"] == "rsmt" and r["random_weights"] is True and r["episodes"] == 1
    res = CliRunner().invoke(app, ["control", "--random-weights", "--random-model", "rsmt", "--skill", "fly",
                                   "--seconds", "1", "--no-fid"])  # fmt: skip
    assert res.exit_code == 1 and "fly" in res.output and "zombie" in res.output
