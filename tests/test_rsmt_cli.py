"""``mimic2dm transition`` and ``mimic2dm bench generate --model-type rsmt`` with untrained
weights on the DeepMimic fixture clips: the files they write, their reports and their errors."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from mimic2dm.cli import app

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "deepmimic"
WALK, RUN = FIXTURES / "humanoid3d_walk.txt", FIXTURES / "humanoid3d_run.txt"  # 39 and 25 frames
SECONDS, FRAMES = 0.5, 15
ARGS = ["--start", f"{WALK}:5", "--target", f"{RUN}:20", "--seconds", str(SECONDS), "--style", str(RUN)]  # fmt: skip


def _invoke(*args: str):
    return CliRunner().invoke(app, ["transition", *args])


def test_transition_writes_a_cmu_clip_holding_the_raw_output(tmp_path):
    from mimic2dm.generators.rsmt import features as F
    from mimic2dm.generators.rsmt.cli import stream_transition
    from mimic2dm.generators.rsmt.data import read_motion
    from mimic2dm.generators.rsmt.inference import random_rsmt

    from mimic2dm.characters.mocap import human_fk, load_cmu_clip

    out = tmp_path / "t.npz"
    res = _invoke("--random-weights", *ARGS, "--seed", "2", "--out", str(out), "--json", "-")
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)  # nothing else on stdout
    assert "x real time" in res.stderr
    assert r["frames"] == FRAMES and r["seconds"] == pytest.approx(SECONDS)
    assert r["style"] == str(RUN) and r["style_frames"] == 25  # the whole clip: shorter than 60
    assert r["model"] == "random weights" and r["out"] == str(out)
    for key in ("last_frame_error_m", "foot_skating", "max_joint_speed", "real_time_factor", "frames_per_second"):  # fmt: skip
        assert np.isfinite(r[key]) and r[key] >= 0, key
    assert r["real_time_factor"] == pytest.approx(r["frames_per_second"] / 30.0)

    clip = load_cmu_clip(out)
    assert clip.num_frames == FRAMES + 1 and clip.fps == 30.0
    walk, run = read_motion(WALK), read_motion(RUN)
    motion, _ = stream_transition(random_rsmt(2), walk, 5, run[20], FRAMES, run, 2)
    with np.load(out) as z:
        np.testing.assert_allclose(z["global_positions"], F.positions(motion).numpy(), atol=1e-6)
        assert str(z["start"]) == f"{WALK}:5" and str(z["target"]) == f"{RUN}:20"
        assert str(z["style"]) == str(RUN) and float(z["seconds"]) == SECONDS
        np.testing.assert_allclose(z["local_translation"][0], [0.0, 0.0, 1.0])  # rest height
    pos, _ = human_fk(clip)  # the start frame is a real pose: the skeleton gives it back
    np.testing.assert_allclose(pos[0].numpy(), F.positions(walk[5]).numpy(), atol=1e-4)
    from mimic2dm.generators.rsmt import metrics

    assert r["last_frame_error_m"] == pytest.approx(metrics.last_frame_error(motion[-1], run[20]), rel=1e-5)  # fmt: skip


def test_camera_writes_the_2d_clip_data_synth_would(tmp_path):
    from mimic2dm.motion.format import load_motion2d

    out = tmp_path / "t.npz"
    res = _invoke("--random-weights", *ARGS, "--out", str(out), "--camera", "3",
                  "--preview", str(tmp_path / "t.mp4"), "--json", str(tmp_path / "r.json"))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert len(res.stdout.strip().splitlines()) == 1 and "real time" in res.stdout
    assert json.loads((tmp_path / "r.json").read_text())["out_2d"] == str(tmp_path / "t_2d.npz")
    m = load_motion2d(tmp_path / "t_2d.npz")
    assert m.num_views == 1 and m.num_frames == FRAMES + 1 and m.keypoint_set == "coco17"
    assert m.keypoints3d is not None and m.meta["random_weights"] is True
    assert (tmp_path / "t.mp4").stat().st_size > 0
    check = CliRunner().invoke(app, ["data", "check", str(tmp_path / "t_2d.npz")])
    assert check.exit_code == 0 and "1/1 file(s) valid" in check.output
    synth = CliRunner().invoke(app, ["data", "synth", str(out), "--out", str(tmp_path / "s.npz"), "--seed", "3"])  # fmt: skip
    assert synth.exit_code == 0, synth.output
    np.testing.assert_array_equal(load_motion2d(tmp_path / "s.npz").keypoints, m.keypoints)


@pytest.fixture
def other_checkpoint(tmp_path):
    path = tmp_path / "gpt.pt"
    torch.save({"kind": "mimic2dm.generator", "model": {}}, path)
    return path


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--random-weights", "--start", f"{WALK}:39"],
            f"--start {WALK}:39: frame 39 is out of range; the clip has 39 frames at 30 fps (valid: 0..38)",
        ),  # fmt: skip
        (["--random-weights", "--target", f"{RUN}:-1"], "(valid: 0..24)"),
        (["--random-weights", "--start", str(WALK)], "expected FILE:FRAME"),
        (["--random-weights", "--start", "missing.txt:3"], "--start missing.txt: no such file"),
        (["--model", "{tmp}/no_run"], "--model: no checkpoint at"),
        (
            ["--model", "{ckpt}"],
            "field 'kind' is 'mimic2dm.generator', expected 'mimic2dm.rsmt_sampler'",
        ),  # fmt: skip
        (["--model", "{ckpt}", "--random-weights"], "not both"),
        ([], "give --model CHECKPOINT"),
    ],
)
def test_bad_inputs_fail_in_one_line_and_write_nothing(args, expected, tmp_path, other_checkpoint):
    opts = dict(zip(ARGS[::2], ARGS[1::2], strict=True))
    args = [a.format(tmp=tmp_path, ckpt=other_checkpoint) for a in args]
    flags = [a for a in args if a == "--random-weights"]
    rest = [a for a in args if a != "--random-weights"]
    opts |= dict(zip(rest[::2], rest[1::2], strict=True))
    out = tmp_path / "out"
    res = _invoke(*flags, *[x for kv in opts.items() for x in kv], "--out", str(out / "t.npz"),
                  "--camera", "1", "--preview", str(out / "t.mp4"), "--json", str(out / "r.json"))  # fmt: skip
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert not out.exists()


def test_bench_generate_times_rsmt_transitions():
    threads = torch.get_num_threads()
    res = CliRunner().invoke(app, ["bench", "generate", "--model-type", "rsmt", "--transitions", "2",
                                   "--transition-frames", "8", "--json", "-"])  # fmt: skip
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["model_type"] == "rsmt" and r["frames"] == 16 and r["batch"] == 1 and r["threads"] == 1
    assert r["realtime_ratio"] > 0 and r["realtime_ratio"] == pytest.approx(
        r["frames_per_s"] / 30.0
    )
    assert "x real time at 30 fps" in res.stderr
    assert torch.get_num_threads() == threads  # restored after the one-thread run
