"""Preprocessing's physical priors: the centre of mass, the stance terms (balance, flat
feet, standing feet on the ground) with their Jacobians, and a level camera roll."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch
from shared_data import VIDEO2D, needs_penn_action

from mimic2dm.characters.registry import load_character
from mimic2dm.characters.scene import build_model
from mimic2dm.motion.format import load_motion2d
from mimic2dm.preprocess import losses
from mimic2dm.preprocess.kinematics import CharacterModel
from mimic2dm.preprocess.lm import _residual
from mimic2dm.preprocess.optimize import STANCE_WEIGHTS, PreprocessConfig, fit_clip

F64 = torch.float64


@pytest.mark.parametrize("character", ["humanoid", "dog"])
def test_centre_of_mass_matches_mujoco(character):
    spec = load_character(character)
    cm = CharacterModel(spec, dtype=F64)
    model = build_model(spec, with_sensors=False)
    data = mujoco.MjData(model)
    g = torch.Generator().manual_seed(0)
    dof = cm.lower + (cm.upper - cm.lower) * torch.rand(4, cm.num_dof, generator=g, dtype=F64)
    pos = torch.randn(4, 3, generator=g, dtype=F64)
    quat = torch.nn.functional.normalize(torch.randn(4, 4, generator=g, dtype=F64), dim=-1)
    com = cm.com(pos, quat, dof)
    for i in range(4):
        data.qpos[:] = np.concatenate([pos[i], quat[i, 3:], quat[i, :3], dof[i]])
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        np.testing.assert_allclose(data.subtree_com[1], com[i].numpy(), atol=1e-6)


def _feet(left_xy, right_xy, left_h=0.0, right_h=0.0):
    """Contact points [1, 4, 3] of two feet (two points each) and their groups."""
    pts = []
    for (x, y), h in ((left_xy, left_h), (right_xy, right_h)):
        pts += [[x - 0.1, y, h], [x + 0.1, y, h]]
    c = torch.tensor([pts], dtype=F64)
    return c, c[..., 2], torch.tensor([0, 0, 1, 1])


def test_support_offset_is_the_distance_to_the_standing_feet():
    c, cz, group = _feet((0.0, -0.2), (0.0, 0.2))
    d, standing, point, _ = losses.support_offset(
        torch.tensor([[0.0, 0.1]], dtype=F64), c, cz, group
    )
    assert float(d) < 1e-9 and float(standing) == pytest.approx(1.0)  # between the feet
    np.testing.assert_allclose(point[0].numpy(), [0.0, 0.1], atol=1e-9)
    d, _, _, _ = losses.support_offset(torch.tensor([[0.3, 0.0]], dtype=F64), c, cz, group)
    assert float(d) == pytest.approx(0.3)  # in front of the segment between them
    # the right foot lifted 20 cm: only the left one supports
    c, cz, group = _feet((0.0, -0.2), (0.0, 0.2), right_h=0.2)
    d, _, _, _ = losses.support_offset(torch.tensor([[0.0, 0.1]], dtype=F64), c, cz, group)
    assert float(d) == pytest.approx(0.3, abs=1e-3)
    # both in the air: nothing stands, the balance term vanishes
    c, cz, group = _feet((0.0, -0.2), (0.0, 0.2), 0.3, 0.3)
    com = torch.tensor([[[2.0, 0.0]]], dtype=F64)
    assert float(losses.balance(com, c[None], cz[None], group)) < 1e-12
    c, cz, group = _feet((0.0, -0.2), (0.0, 0.2))
    assert float(losses.balance(com, c[None], cz[None], group)) == pytest.approx(19.0**2)


def test_standing_weights_carry_no_gradient():
    cz = torch.tensor([[0.01, 0.02, 0.3, 0.4]], dtype=F64, requires_grad=True)
    w = losses.standing_weights(cz, torch.tensor([0, 0, 1, 1]))
    assert not w.requires_grad
    assert float(w[0, 0]) == pytest.approx(math.exp(-((0.01 / 0.03) ** 2)))  # its lowest point
    assert float(w[0, 1]) < 1e-6


def test_stance_residuals_have_exact_jacobians():
    """Balance, flat-foot and stance-contact residuals of Levenberg-Marquardt against
    central differences (the stance labels are fixed, as in the fit)."""
    spec = load_character("humanoid")
    m = CharacterModel(spec)
    g = torch.Generator().manual_seed(1)
    N, J = 3, m.num_dof
    dof = 0.3 * torch.randn(N, J, generator=g, dtype=F64)
    p = torch.cat([torch.tensor([[0.3, 0.1, 0.75]], dtype=F64).expand(N, 3),
                   torch.zeros(N, 3, dtype=F64), dof], -1)  # fmt: skip
    q0 = torch.nn.functional.normalize(torch.randn(N, 4, generator=g, dtype=F64), dim=-1)
    K = m.num_keypoints
    obs, sw = torch.zeros(N, K, 2, dtype=F64), torch.zeros(N, K, dtype=F64)
    cams = (torch.eye(3, dtype=F64).expand(N, 3, 3), torch.tensor([[0, 0, 5.0]], dtype=F64).expand(N, 3),
            torch.tensor([[1000, 1000, 500, 500.0]], dtype=F64).expand(N, 4))  # fmt: skip
    w = {"upright": 0.0, "prior": 0.0, "ground": 0.0, "temporal": 0.0,
         "balance": 1.0, "flat": 1.0, "stance": 1.0}  # fmt: skip
    stance = torch.rand(N, 2, generator=g, dtype=F64) + 0.5

    def res(pp, jac=False):
        return _residual(m, pp, q0, obs, sw, *cams, 5.0, w, dof, jac, stance)

    r, jac = res(p, True)
    extra = r.shape[1] - (2 * K + 2 + J + m.contact_radius.shape[0] + J)
    assert extra == 1 + 2 * 2 + 2  # balance, two flat feet (x, y), two standing feet
    assert r[:, -extra:].abs().sum() > 0
    eps = 1e-6
    num = torch.stack([(res(p + eps * e) - res(p - eps * e)) / (2 * eps)
                       for e in torch.eye(p.shape[1], dtype=F64)], -1)  # fmt: skip
    torch.testing.assert_close(jac[:, -extra:], num[:, -extra:], atol=1e-6, rtol=1e-6)
    # without labels the residuals are the plain ones
    assert _residual(m, p, q0, obs, sw, *cams, 5.0, w, dof).shape[1] == r.shape[1] - extra


def _standing_clip(T: int = 12, roll_deg: float = 0.0):
    """A humanoid standing still in its default pose, seen from 4 m by a camera pitched
    10 deg down and rolled ``roll_deg``: keypoints [T, K, 2] of a 640x480 image."""
    spec = load_character("humanoid")
    cm = CharacterModel(spec)
    pose = spec.default_pose
    dof = torch.tensor(pose.dof_pos, dtype=torch.float32).expand(T, -1)
    root = torch.tensor(pose.root_pos, dtype=torch.float32).expand(T, -1).clone()
    root[:, 0] += torch.linspace(0, 0.05, T)  # a slight sway
    kp, _ = cm.forward(root, torch.tensor([0.0, 0.0, 0.0, 1.0]).expand(T, 4), dof)
    pitch, roll = math.radians(10.0), math.radians(roll_deg)
    fwd = np.array([0.0, math.cos(pitch), -math.sin(pitch)])  # looking along +y, down
    right = np.array([1.0, 0.0, 0.0])
    down = np.cross(fwd, right)
    r_cam = np.stack([right, down, fwd])
    c, s = math.cos(roll), math.sin(roll)
    r_cam = np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]]) @ r_cam
    centre = np.array([0.0, -4.0, 1.6])
    X = (kp.numpy() - centre) @ r_cam.T
    f = 600.0
    uv = X[..., :2] / X[..., 2:3] * f + np.array([320.0, 240.0])
    return spec, uv.astype(np.float32)


def test_levelling_keeps_the_camera_roll_at_zero_and_the_standing_pose_balanced():
    spec, uv = _standing_clip(roll_deg=0.0)
    T, K = uv.shape[:2]
    conf, mask = np.ones((T, K), np.float32), np.ones((T, K), bool)
    cfg = PreprocessConfig(headings=2, iters=20, hypothesis_iters=10, lm_iters=10, focal=600.0,
                           level_roll=True, **STANCE_WEIGHTS)  # fmt: skip
    fit = fit_clip(spec, uv, conf, mask, 30.0, (640, 480), cfg)
    R = fit.camera_R[0]
    assert abs(math.degrees(math.asin(R[0, 2]))) < 1.0  # the camera's x axis stays level
    cm = CharacterModel(spec)
    args = [torch.as_tensor(x) for x in (fit.root_pos, fit.root_quat, fit.dof_pos)]
    com = cm.com(*args)
    _, contact = cm.forward(*args)
    cz = contact[..., 2] - cm.contact_radius
    d, standing, _, _ = losses.support_offset(com[..., :2], contact, cz, cm.contact_group)
    assert float(standing.min()) > 0.5  # it stands on the ground
    assert float(d.max()) < 0.1  # over its feet
    pos, rot = cm.bodies(*args)
    tilt = torch.rad2deg(torch.arccos(rot[:, cm.flat_feet, 2, 2].clamp(-1, 1)))
    assert float(tilt.max()) < 15.0  # on flat feet


PENN = VIDEO2D / "penn_action"


def _stance_stats(path: Path) -> tuple[float, float, float]:
    """Median over frames of the centre of mass's distance from the standing feet (m), of the
    flattest standing foot's tilt (deg), and the camera's roll (deg) of a preprocessed clip."""
    m = load_motion2d(path)
    cm = CharacterModel(load_character("humanoid"))
    args = [torch.as_tensor(x) for x in (m.init_root_pos, m.init_root_quat, m.init_dof_pos)]
    com = cm.com(*args)
    _, contact = cm.forward(*args)
    cz = contact[..., 2] - cm.contact_radius
    d, _, _, _ = losses.support_offset(com[..., :2], contact, cz, cm.contact_group)
    _, rot = cm.bodies(*args)
    tilt = torch.rad2deg(torch.arccos(rot[:, cm.flat_feet, 2, 2].clamp(-1, 1))).amin(-1)
    roll = math.degrees(math.asin(float(np.asarray(m.camera_R).reshape(-1, 3, 3)[0, 0, 2])))
    return float(d.median()), float(tilt.median()), roll


@needs_penn_action
def test_stance_terms_stand_a_real_squat_on_its_feet(tmp_path):
    """Penn Action squat 1767 (human-annotated, side view): by default the fit stands on
    tiptoe, its centre of mass far from its feet, in a world rolled about the camera's axis;
    with ``--stance --level-roll`` the camera is level, the feet flat, the body over them."""
    from typer.testing import CliRunner

    from mimic2dm.cli import app

    runner = CliRunner()
    clip = tmp_path / "penn_1767.npz"
    res = runner.invoke(app, ["data", "import-penn", str(PENN / "1767.mat"), "--out", str(clip)])
    assert res.exit_code == 0, res.output
    stats = {}
    for name, flags in (("default", []), ("stance", ["--stance", "--level-roll"])):
        out = tmp_path / name
        res = runner.invoke(app, ["preprocess", str(clip), "--out", str(out), "--no-progress",
                                  "--json", str(tmp_path / f"{name}.json"), *flags])  # fmt: skip
        assert res.exit_code == 0, res.output
        row = json.loads((tmp_path / f"{name}.json").read_text())["clips"][0]
        assert row["reprojection_px"] < 5.0  # raw pixels of a 480x362 image
        stats[name] = _stance_stats(out / "penn_1767.npz")
    (d0, tilt0, roll0), (d1, tilt1, roll1) = stats["default"], stats["stance"]
    assert d0 > 0.25 and tilt0 > 30.0 and abs(roll0) > 15.0  # measured: 0.36 m, 58 deg, 29 deg
    assert d1 < 0.12 and tilt1 < 10.0 and abs(roll1) < 5.0


AIST_FIXTURE = (
    Path(__file__).resolve().parent / "fixtures/aistpp/gBR_sBM_cAll_d04_mBR0_ch01_c01_2s.pkl"
)


def test_held_pose_script_scores_how_the_fitted_poses_stand(tmp_path):
    """`cluster/held_pose.py` (docs/preprocess.md "Stance"): the fitted states of a real
    AIST++ view held by the simulated character, and the same states 30 cm in the air."""
    import subprocess
    import sys

    from typer.testing import CliRunner

    from mimic2dm.cli import app
    from mimic2dm.motion.format import save_motion2d

    runner = CliRunner()
    clip = tmp_path / "clip.npz"
    res = runner.invoke(app, ["data", "import-aist", str(AIST_FIXTURE), "--out", str(clip)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["preprocess", str(clip), "--out", str(tmp_path / "pre"),
                              "--no-progress", "--headings", "2", "--iters", "20"])  # fmt: skip
    assert res.exit_code == 0, res.output
    pre = tmp_path / "pre" / "clip.npz"
    m = load_motion2d(pre)
    m.init_root_pos = m.init_root_pos + np.array([0.0, 0.0, 0.3], np.float32)
    lifted = tmp_path / "lifted.npz"
    save_motion2d(m, lifted)
    script = Path(__file__).resolve().parents[1] / "cluster" / "held_pose.py"
    out = tmp_path / "held.json"
    run = subprocess.run([sys.executable, str(script), str(pre), str(lifted), "--steps", "6",
                          "--json", str(out), "--override", "task.initial_ground=false"],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["clips"]
    assert [len(r["held_worst_px_1080"]) for r in rows] == [6, 6]
    ground, air = rows
    assert all(np.isfinite(r["com_from_feet_m"]) and abs(r["camera_roll_deg"]) < 90 for r in rows)
    # one control step in, the lifted states are still ~30 cm off (a 1.7 m dancer ~470 px tall)
    assert air["held_worst_px_1080"][0] > ground["held_worst_px_1080"][0] + 40.0
    # a clip without initial states: one line naming the file and field
    bad = subprocess.run([sys.executable, str(script), str(clip)], capture_output=True, text=True)
    assert bad.returncode == 1 and f"{clip}: field 'init_root_pos' is missing" in bad.stderr
