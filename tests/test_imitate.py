"""``mimic2dm imitate``: real keypoints (2 s of an AIST++ view, a shipped fixture) through
every stage at a tiny budget, the report it writes, resume, and its input checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rl_helpers import write_demo
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.imitate import ImitateError, ImitateSettings, check_inputs, parse_views
from mimic2dm.motion.format import Motion2D, load_motion2d, save_motion2d

ROOT = Path(__file__).resolve().parents[1]
AIST_FIXTURE = ROOT / "tests/fixtures/aistpp/gBR_sBM_cAll_d04_mBR0_ch01_c01_2s.pkl"
# a run that takes seconds: few small envs, a small network, one thread
TINY = ["--num-envs", "8", "--override", "train.horizon_length=8", "--override",
        "train.minibatch_size=32", "--override", "train.network.encoder_units=[32]",
        "--override", "train.network.head_units=[32]", "--override", "train.torch_threads=1",
        "--override", "engine.num_threads=1", "--override", "logger.wandb=false",
        "--override", "progress=false"]  # fmt: skip
runner = CliRunner()


def _cli(*args) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in args])
    return res.exit_code, res.output + (res.stderr if res.stderr_bytes is not None else "")


@pytest.fixture(scope="module")
def aist_clip(tmp_path_factory) -> Path:
    """The fixture imported as a user would: ``data import-aist`` of a keypoints-only file."""
    d = tmp_path_factory.mktemp("aist")
    code, text = _cli("data", "import-aist", AIST_FIXTURE, "--out", d / "clip.npz")
    assert code == 0, text
    return d / "clip.npz"


def test_imitate_real_keypoints_every_stage(aist_clip, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "run"
    # preprocessing's stance terms and level roll on (docs/preprocess.md "Stance")
    code, text = _cli("imitate", aist_clip, "--out", out, "--minutes", "0.05", "--no-progress",
                      "--stance", "--level-roll", *TINY)  # fmt: skip
    assert code == 0, text
    report = json.loads((out / "report.json").read_text())
    fitted = load_motion2d(out / "preprocess" / "clip.npz").meta["preprocess"]["config"]
    assert fitted["w_balance"] == fitted["w_flat"] == fitted["w_stance"] == 1.0
    assert fitted["level_roll"] is True
    assert report["complete"] and set(report["stages"]) == {
        "input",
        "preprocess",
        "train",
        "evaluate",
    }
    # no ground truth anywhere: the clip has no camera and no 3D, preprocessing estimates both
    src = load_motion2d(out / "input" / "clip.npz")
    assert not src.has_cameras and src.keypoints3d is None
    pre = report["stages"]["preprocess"]["rows"][0]
    assert pre["reprojection_mean_px_1080"] < 30.0, pre  # the fit explains the keypoints
    assert "mpjpe_mm" not in pre
    tr = report["stages"]["train"]
    assert tr["epochs"] >= 1 and tr["frames"] > 0 and Path(tr["checkpoint"]).is_file()
    for k in ("success_rate", "error_2d_px", "max_error_2d_px", "error_2d_px_raw"):
        assert report[k] is not None and np.isfinite(report[k]), k
    # 1080-px clip: raw and scaled pixels agree
    assert report["error_2d_px_raw"] == pytest.approx(report["error_2d_px"], rel=1e-6)
    assert (out / "eval.json").is_file() and (out / "overlay.png").stat().st_size > 0
    assert all(s["seconds"] is not None for s in report["stages"].values())
    assert report["settings"]["minutes"] == 0.05 and "imitate" in text
    assert json.loads((out / "eval.json").read_text())["initial_state"] == "preprocessed"

    # the same directory again: refused without --resume, nothing changed
    before = (out / "report.json").read_bytes()
    code, text = _cli("imitate", aist_clip, "--out", out, "--minutes", "0.05", *TINY)
    assert code == 1 and "--resume" in text and (out / "report.json").read_bytes() == before

    # --resume with a larger budget trains on from the last checkpoint and evaluates again
    code, text = _cli("imitate", aist_clip, "--out", out, "--minutes", "0.1", "--resume",
                      "--no-progress", "--stance", "--level-roll", *TINY)  # fmt: skip
    assert code == 0, text
    again = json.loads((out / "report.json").read_text())
    assert again["stages"]["train"]["resumed"] and again["stages"]["train"]["epochs"] > tr["epochs"]
    assert again["stages"]["preprocess"]["seconds"] == report["stages"]["preprocess"]["seconds"]

    # a resumed run of another job is refused, naming what differs
    code, text = _cli("imitate", aist_clip, "--out", out, "--seed", "3", "--resume", *TINY)
    assert code == 1 and "seed" in text


def test_imitate_resumes_a_stopped_stage(aist_clip, tmp_path, monkeypatch):
    """A run stopped after preprocessing (as Ctrl-C leaves it) continues with ``--resume``."""
    from mimic2dm import imitate

    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "run"

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(imitate, "stage_train", stop)
    code, text = _cli("imitate", aist_clip, "--out", out, "--minutes", "0.05", *TINY)
    assert code == 130 and "--resume" in text, text
    state = json.loads((out / "imitate.json").read_text())
    assert set(state["stages"]) == {"input", "preprocess"}
    monkeypatch.undo()
    monkeypatch.setenv("WANDB_MODE", "offline")
    code, text = _cli("imitate", aist_clip, "--out", out, "--minutes", "0.05", "--resume",
                      "--no-progress", *TINY)  # fmt: skip
    assert code == 0, text
    assert "preprocess[/]: done before" in text or "preprocess: done before" in text
    assert json.loads((out / "report.json").read_text())["complete"]


def test_imitate_checks_inputs_before_any_work(tmp_path):
    clip = write_demo(tmp_path / "demo.npz")
    out = tmp_path / "out"
    code, text = _cli("imitate", clip, "--out", out, "--character", "dog")
    assert code == 1 and "keypoint_set" in text and "--character dog" in text
    (tmp_path / "x.bvh").write_text("HIERARCHY")
    code, text = _cli("imitate", tmp_path / "x.bvh", "--out", out)
    assert code == 1 and "import" in text
    code, text = _cli("imitate", tmp_path / "missing.npz", "--out", out)
    assert code == 1 and "no such file" in text
    code, text = _cli("imitate", clip, "--out", out, "--view", "0,0")
    assert code == 2 and "--view" in text
    code, text = _cli("imitate", clip, "--out", out, "--view", "2")
    assert code == 1 and "has views 0..0" in text
    (tmp_path / "afile").write_text("")
    code, text = _cli("imitate", clip, "--out", tmp_path / "afile" / "sub")
    assert code == 1 and "--out" in text
    assert not out.exists()  # nothing written by any refused run
    # one writer per directory: a live owner's lock (pid 1 on this host) is respected
    out.mkdir()
    (out / ".lock").write_text(json.dumps({"pid": 1, "host": __import__("socket").gethostname()}))
    code, text = _cli("imitate", clip, "--out", out)
    assert (
        code == 1
        and "in use by pid 1" in text
        and sorted(p.name for p in out.iterdir()) == [".lock"]
    )


def test_check_inputs_multi_view_needs_a_choice(tmp_path):
    m = load_motion2d(write_demo(tmp_path / "one.npz"))
    two = Motion2D(np.concatenate([m.keypoints] * 2), np.concatenate([m.confidence] * 2),
                   m.keypoint_set, m.fps, m.image_size)  # fmt: skip
    save_motion2d(two, tmp_path / "two.npz")
    with pytest.raises(ImitateError, match="--view"):
        check_inputs([tmp_path / "two.npz"], "humanoid", None)
    assert check_inputs([tmp_path / "two.npz"], "humanoid", [1])[0]["views"] == 2
    assert parse_views("0,4") == [0, 4] and parse_views(None) is None


def test_settings_resume_compatibility():
    a = ImitateSettings(inputs=["a.npz"], character="humanoid", minutes=1.0)
    assert a.same_job(ImitateSettings(inputs=["a.npz"], character="humanoid", minutes=5.0)) == []
    assert a.same_job(ImitateSettings(inputs=["b.npz"], character="humanoid")) == ["inputs"]


def _walk_video(path: Path, frames: int = 30) -> Path:
    from test_video_pipeline import draw, figure

    from mimic2dm.video.io import write_video

    write_video(path, [draw([figure(90 + 3 * t, 20, 150)], size=(320, 200)) for t in range(frames)],
                15.0, lossless=True)  # fmt: skip
    return path


def test_imitate_video_goes_through_extract(tmp_path, monkeypatch):
    """A video is extracted first (stand-in estimators that read the drawn figure's joints;
    the real ViTPose and RT-DETR are tested in test_video_*), then the whole chain runs."""
    from test_video_pipeline import BlobDetector, colour_pose

    from mimic2dm import imitate

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setattr(imitate, "load_video_models", lambda s: (BlobDetector(), colour_pose()))
    out = tmp_path / "run"
    code, text = _cli("imitate", _walk_video(tmp_path / "walk.mp4"), "--out", out,
                      "--minutes", "0.02", "--no-progress", *TINY)  # fmt: skip
    assert code == 0, text
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] and report["stages"]["input"]["rows"][0]["frames"] == 30
    clip = load_motion2d(out / "input" / "walk.npz")
    assert clip.meta["pose_model"] == "colours" and clip.mask().mean() > 0.9


def test_imitate_video_with_random_weights(tmp_path, monkeypatch):
    """Untrained models (built here) find no person: the chain stops at preprocessing in one
    line, and the extracted clip stays for inspection."""
    from test_video_pipeline import _tiny_models

    monkeypatch.setenv("WANDB_MODE", "offline")
    pose_dir, det_dir = _tiny_models(tmp_path)
    out = tmp_path / "run"
    code, text = _cli("imitate", _walk_video(tmp_path / "clip.mp4", 12), "--out", out,
                      "--minutes", "0.02", "--pose-model", pose_dir, "--detector", det_dir,
                      "--random-weights", "--no-progress", *TINY)  # fmt: skip
    assert code == 1 and "masks every keypoint" in text, text
    assert load_motion2d(out / "input" / "clip.npz").meta["random_weights"] is True
    assert "Traceback" not in text


@pytest.mark.slow
def test_imitate_heldout_views(tmp_path, monkeypatch):
    """Track view 0 of a 3-view clip; the simulated character is scored in views 1 and 2,
    whose cameras come from preprocessing all three views jointly (no ground truth used)."""
    from mimic2dm.characters.demo_clip import make_demo_motion3d
    from mimic2dm.motion.synth import synthesize_views
    from mimic2dm.preprocess.clipio import strip_clip

    monkeypatch.setenv("WANDB_MODE", "offline")
    m3 = make_demo_motion3d(2.0, 30.0)
    m2 = synthesize_views(
        m3.keypoints3d, m3.keypoint_set, 30.0, num_views=3, camera="static", seed=1
    )
    clip = tmp_path / "three.npz"
    save_motion2d(strip_clip(m2), clip)
    code, text = _cli("preprocess", clip, "--out", tmp_path / "all", "--headings", "2", "--iters", "20",
                      "--no-progress")  # fmt: skip
    assert code == 0, text
    ref = tmp_path / "all" / "three.npz"
    out = tmp_path / "run"
    code, text = _cli("imitate", clip, "--out", out, "--view", "0", "--heldout", ref, "--minutes",
                      "0.02", "--no-progress", *TINY)  # fmt: skip
    assert code == 0, text
    report = json.loads((out / "report.json").read_text())
    rows = report["heldout_views"]
    assert [r["view"] for r in rows] == [1, 2]
    assert all(np.isfinite(r["reprojection_mean_px_1080"]) for r in rows)
    assert report["heldout_error_2d_px"] == pytest.approx(
        np.mean([r["reprojection_mean_px_1080"] for r in rows])
    )
    # a reference of another recording is refused before any work
    code, text = _cli("imitate", clip, "--out", tmp_path / "x", "--view", "0", "--heldout",
                      write_demo(tmp_path / "demo.npz"))  # fmt: skip
    assert code == 1 and "est_keypoints3d" in text and not (tmp_path / "x").exists()
