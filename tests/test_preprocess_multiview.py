"""Several uncalibrated views of one performance: ``mimic2dm preprocess`` estimates all cameras
and one motion jointly (``mimic2dm.preprocess.multiview``), ``--views`` picks a subset and
``--heldout-report`` scores a fit in the views it did not use."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from mimic2dm.characters.clips import load_mocap_keypoints
from mimic2dm.characters.registry import load_character
from mimic2dm.cli import app
from mimic2dm.motion.format import load_motion2d, save_motion2d
from mimic2dm.motion.synth import resample, synthesize_views
from mimic2dm.preprocess import lm
from mimic2dm.preprocess.clipio import strip_clip
from mimic2dm.preprocess.kinematics import CharacterModel
from mimic2dm.preprocess.multiview import heldout_errors
from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()
needs_mocap = pytest.mark.skipif(
    not MOCAP.is_dir(), reason=f"shared mocap clips not found at {MOCAP}"
)
runner = CliRunner()


def _views(num_views: int, seconds: float | None = None):
    k3 = load_mocap_keypoints(MOCAP / "cmu_walk.npz")
    kp = resample(k3.keypoints, k3.fps, 30.0)
    if seconds is not None:
        kp = kp[: int(seconds * 30)]
    return synthesize_views(kp, k3.keypoint_set, 30.0, seed=0, num_views=num_views, camera="static")


def _preprocess(tmp_path: Path, name: str, gt: Path, clip: Path, extra: list[str]) -> dict:
    report = tmp_path / f"{name}.json"
    res = runner.invoke(app, ["preprocess", str(clip), "--out", str(tmp_path / name), "--gt", str(gt),
                              "--json", str(report), "--no-progress", *extra])  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads(report.read_text())["clips"][0]


def _files(tmp_path: Path, m) -> tuple[Path, Path]:
    gt, clip = tmp_path / "gt.npz", tmp_path / "clip.npz"
    save_motion2d(m, gt)
    save_motion2d(strip_clip(m, str(gt)), clip)
    return gt, clip


def test_lm_residuals_of_several_views_are_each_views_residuals():
    spec = load_character("humanoid")
    model = CharacterModel(spec)
    g = torch.Generator().manual_seed(0)
    N, K, J = 3, 17, spec.num_dof
    p = torch.cat(
        [torch.tensor([[4.0, 0.0, 1.0]]).expand(N, 3), 0.1 * torch.randn(N, 3 + J, generator=g)], -1
    )
    p = p.double()
    q0 = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64).expand(N, 4)
    R = torch.tensor([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    cams = [
        (R, torch.tensor([0.0, 1.0, 0.0]).double()),
        (R, torch.tensor([0.2, 0.9, 0.5]).double()),
    ]
    k = torch.tensor([1400.0, 1400.0, 960.0, 540.0], dtype=torch.float64)
    obs, sw = (
        torch.zeros(N, 2 * K, 2, dtype=torch.float64),
        torch.ones(N, 2 * K, dtype=torch.float64),
    )
    w = {"upright": 0.1, "prior": 0.005, "ground": 0.1, "temporal": 0.0}
    Rv = torch.stack([c[0] for c in cams]).expand(N, 2, 3, 3)
    tv = torch.stack([c[1] for c in cams]).expand(N, 2, 3)
    r2, j2 = lm._residual(model, p, q0, obs, sw, Rv, tv, k.expand(N, 2, 4), 5.0, w, p[:, 6:], True)
    for v, (Rc, tc) in enumerate(cams):
        r1, j1 = lm._residual(model, p, q0, obs[:, :K], sw[:, :K], Rc.expand(N, 3, 3), tc.expand(N, 3),
                              k.expand(N, 4), 5.0, w, p[:, 6:], True)  # fmt: skip
        sl = slice(2 * K * v, 2 * K * (v + 1))
        torch.testing.assert_close(r2[:, sl], r1[:, : 2 * K])
        torch.testing.assert_close(j2[:, sl], j1[:, : 2 * K])


@needs_mocap
def test_heldout_errors_are_zero_for_the_truth_and_align_another_world():
    m = _views(3, seconds=1.0)
    ref = m
    ref.est_keypoints3d = m.keypoints3d
    kp = m.keypoints3d
    for r in heldout_errors(kp, ref, [1, 2]):
        assert r["reprojection_max_px"] < 1e-2 and r["reprojection_mean_px_1080"] < 1e-2
    # the same motion in another estimate's world (turned about z, shifted): aligned first
    c, s = np.cos(0.7), np.sin(0.7)
    A = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    other = kp @ A.T + np.array([2.0, -1.0, 0.0])
    assert heldout_errors(other, ref, [1])[0]["reprojection_mean_px"] > 100.0
    r = heldout_errors(other, ref, [1], world_keypoints3d=other)[0]
    assert r["view"] == 1 and r["reprojection_max_px"] < 0.05
    with pytest.raises(ValueError, match="resample"):
        heldout_errors(kp[::2], ref, [1])  # e.g. a rollout at the control rate


@needs_mocap
def test_preprocess_several_views_writes_every_camera_and_one_motion(tmp_path):
    """CI-sized: 1 s, 3 views, two of them fitted jointly, the third held out."""
    m = _views(3, seconds=1.0)
    gt, clip = _files(tmp_path, m)
    fast = ["--headings", "2", "--iters", "20", "--finalists", "1"]
    ref = _preprocess(tmp_path, "all", gt, clip, fast)
    assert ref["views"] == [0, 1, 2] and [v["view"] for v in ref["per_view"]] == [0, 1, 2]
    est = load_motion2d(ref["out"])
    assert est.camera_R.shape == (3, 1, 3, 3) and est.num_views == 3
    assert est.init_dof_pos.shape == (m.num_frames, 28) and est.meta["preprocess"]["views"] == [
        0,
        1,
        2,
    ]
    for v in ref["per_view"]:
        assert v["reprojection_mean_px"] < 10.0 and v["camera_rotation_deg"] < 10.0
    assert ref["reprojection_mean_px_1080"] == pytest.approx(ref["reprojection_mean_px"])
    r = _preprocess(
        tmp_path, "sub", gt, clip, [*fast, "--views", "2,0", "--heldout-report", ref["out"]]
    )
    assert r["views"] == [2, 0] and load_motion2d(r["out"]).camera_R.shape[0] == 2
    assert [h["view"] for h in r["heldout"]] == [1]
    assert r["heldout"][0]["reprojection_mean_px"] < 30.0


@pytest.mark.slow
@needs_mocap
def test_joint_views_beat_one_view_on_the_truth_and_in_held_out_views(tmp_path):
    """cmu_walk through 4 static cameras: all 4 views against view 0 alone (camera rotation,
    MPJPE), and the held-out views 2, 3 of a fit of {0, 1} against one of {0}."""
    gt, clip = _files(tmp_path, _views(4))
    full = _preprocess(tmp_path, "all", gt, clip, [])
    one = _preprocess(tmp_path, "v0", gt, clip, ["--views", "0", "--heldout-report", full["out"]])
    two = _preprocess(
        tmp_path, "v01", gt, clip, ["--views", "0,1", "--heldout-report", full["out"]]
    )
    joint0 = full["per_view"][0]
    assert joint0["camera_rotation_deg"] <= one["camera_rotation_deg"]
    assert joint0["mpjpe_mm"] <= one["mpjpe_mm"] and full["mpjpe_mm"] <= one["mpjpe_mm"]

    def held(r):
        return np.mean([h["reprojection_mean_px"] for h in r["heldout"] if h["view"] in (2, 3)])

    assert held(two) < held(one)
