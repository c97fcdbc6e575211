"""`mimic2dm export`: a tiny trained tracker exported to ONNX / TorchScript, checked against
torch, and the ONNX file driving the real MuJoCo engine through the task's observations."""

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
from mimic2dm.tasks.registry import make_task
from rl_helpers import tiny_config, write_demo
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.export import export_policy, load_exported, with_more_views
from mimic2dm.rl.policy import load_policy


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, one_torch_thread):
    from mimic2dm.train import train

    root = tmp_path_factory.mktemp("export")
    clip = write_demo(root / "clip.npz", seconds=1.5)
    # float32 network: the torch policy the exports are compared with (bf16 below)
    train(tiny_config(root / "run", clip, "train.max_epochs=2", "logger.video_every=0",
                      "logger.tensorboard=false", "train.network.precision=fp32"))  # fmt: skip
    return root / "run" / "checkpoints" / "last.pt"


@pytest.fixture(scope="module")
def onnx_export(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx")
    res = CliRunner().invoke(app, ["export", str(checkpoint), "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, res.output


def test_export_command_prints_the_error_and_writes_model_json_samples(onnx_export):
    out, output = onnx_export
    desc = json.loads((out / "policy.json").read_text())
    assert "max |onnxruntime 1.31.1 - torch| = " in output
    assert (out / "policy.onnx").stat().st_size > 10_000 and desc["model"] == "policy.onnx"
    c = desc["check"]
    assert c["passed"] and c["max_abs_error"] <= 1e-5 and c["samples"] == 8 * 16
    assert f"{c['max_abs_error']:.3g}" in output
    obs = desc["observation"]
    for group, size in (("prop_parts", obs["prop_size"]), ("view_parts", obs["view_size"])):
        parts = obs[group]
        assert parts[0]["start"] == 0 and sum(p["size"] for p in parts) == size
        assert all(
            a["start"] + a["size"] == b["start"] for a, b in zip(parts[:-1], parts[1:], strict=True)
        )
    assert obs["size"] == obs["prop_size"] + obs["num_views"] * obs["view_size"]
    assert obs["keypoint_set"] == "coco17" and len(obs["keypoint_names"]) == 17
    joints = desc["action"]["joints"]
    assert len(joints) == desc["action"]["size"] == 28
    assert all(j["lower"] < j["upper"] and j["scale"] > 0 for j in joints)
    assert desc["character"] == "humanoid" and desc["control_hz"] == 30.0
    samples = np.load(out / "samples.npz")
    assert samples["obs"].shape == (128, obs["size"]) and samples["action"].shape == (128, 28)


def test_onnx_policy_drives_the_mujoco_engine(onnx_export, checkpoint):
    out, _ = onnx_export
    desc = json.loads((out / "policy.json").read_text())
    sess = ort.InferenceSession(str(out / "policy.onnx"), providers=["CPUExecutionProvider"])
    policy = load_policy(checkpoint)
    task = make_task(policy.env_spec, num_envs=4, seed=5)
    lo = np.array([j["lower"] for j in desc["action"]["joints"]], dtype=np.float32)
    hi = np.array([j["upper"] for j in desc["action"]["joints"]], dtype=np.float32)
    offset = np.array([j["offset"] for j in desc["action"]["joints"]], dtype=np.float32)
    scale = np.array([j["scale"] for j in desc["action"]["joints"]], dtype=np.float32)
    start = task.engine.get_state().dof_pos.clone()
    obs = task.observe()
    for _ in range(5):
        action, target = sess.run(["action", "pd_target"], {"obs": obs.numpy()})
        assert np.abs(action - policy.act(obs).numpy()).max() <= 1e-5
        assert np.all(np.abs(action) <= 1.0)
        np.testing.assert_allclose(target, np.clip(offset + scale * action, lo, hi), atol=1e-6)
        obs = task.step(torch.from_numpy(action)).obs
        assert torch.isfinite(obs).all()
    assert (task.engine.get_state().dof_pos - start).abs().max() > 1e-3  # the character moved
    task.close()


def test_onnx_accepts_more_views_than_training(onnx_export, checkpoint):
    out, _ = onnx_export
    policy = load_policy(checkpoint)
    obs = torch.from_numpy(np.load(out / "samples.npz")["obs"])
    obs3 = with_more_views(obs, policy.meta["network"]["obs_layout"]["prop"], extra=2)
    action, _ = load_exported(out / "policy.onnx", "onnx")(obs3.numpy())
    assert np.abs(action - policy.act(obs3).numpy()).max() <= 1e-5


def test_torchscript_export_matches_torch(checkpoint, tmp_path):
    desc = export_policy(checkpoint, tmp_path, "torchscript", num_envs=4, steps=4)
    assert desc["model"] == "policy.pt" and desc["check"]["passed"]
    assert desc["check"]["max_abs_error"] <= 1e-5
    policy = load_policy(checkpoint)
    obs = torch.from_numpy(np.load(tmp_path / "samples.npz")["obs"])
    obs2 = with_more_views(obs, policy.meta["network"]["obs_layout"]["prop"])
    action, _ = load_exported(tmp_path / "policy.pt", "torchscript")(obs2.numpy())
    assert np.abs(action - policy.act(obs2).numpy()).max() <= 1e-5


def test_export_bad_input_and_failed_check_exit_non_zero(checkpoint, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["export", str(tmp_path / "missing.pt"), "--out", str(tmp_path)])
    assert res.exit_code == 1 and "missing.pt" in res.output
    res = runner.invoke(
        app, ["export", str(checkpoint), "--out", str(tmp_path), "--format", "tflite"]
    )
    assert res.exit_code == 1 and "onnx, torchscript" in res.output
    res = runner.invoke(
        app,
        ["export", str(checkpoint), "--out", str(tmp_path), "--data", str(tmp_path / "gone.npz")],
    )
    assert res.exit_code == 1 and "gone.npz" in res.output and "--data" in res.output
    res = runner.invoke(app, ["export", str(checkpoint), "--out", str(tmp_path / "neg"),
                              "--format", "torchscript", "--tolerance", "-1"])  # fmt: skip
    assert res.exit_code == 2 and "does not match torch" in res.output


def test_a_bf16_trained_policy_exports_in_float32(checkpoint, tmp_path):
    from mimic2dm.utils.checkpoint import atomic_torch_save, load_checkpoint

    ck = load_checkpoint(checkpoint)
    ck["meta"]["network"]["precision"] = "bf16"
    atomic_torch_save(ck, tmp_path / "bf16.pt")
    policy = load_policy(tmp_path / "bf16.pt")
    assert policy.model.a2c_network.bf16
    desc = export_policy(tmp_path / "bf16.pt", tmp_path / "out", "torchscript", num_envs=4, steps=4)
    assert desc["precision"] == {"export": "fp32", "trained": "bf16"}
    assert desc["check"]["passed"] and desc["check"]["max_abs_error"] <= 1e-5
    # the export is the float32 network: bf16 inference of the same weights differs from it
    obs = torch.from_numpy(np.load(tmp_path / "out" / "samples.npz")["obs"])
    action, _ = load_exported(tmp_path / "out" / "policy.pt", "torchscript")(obs.numpy())
    assert np.abs(action - policy.act(obs).numpy()).max() > 0
    assert np.abs(action - load_policy(checkpoint).act(obs).numpy()).max() <= 1e-5
