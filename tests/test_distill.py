"""``mimic2dm-distill``: the privileged teacher observation, expert routing, the DAgger
schedule, a student that learns its expert's actions, exact resume, and the student's
checkpoint in ``mimic2dm eval`` and ``init_from`` (real MuJoCo, real tiny training runs)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from rl_helpers import TINY, spec_for, write_demo

from mimic2dm.motion.format import load_motion2d, save_motion2d

DISTILL_TINY = [
    "distill.steps=4", "distill.batch_size=16", "distill.buffer_size=64", "distill.updates=2",
    "distill.eval_every=0", "distill.checkpoint_every=1",
]  # fmt: skip


def _expert(run_dir: Path, clip: Path, *overrides: str, task: str = "tracking3d") -> Path:
    """A tiny trained tracker (``task``) on ``clip``."""
    from omegaconf import OmegaConf

    from mimic2dm.train import compose_config, train

    cfg = compose_config([f"task={task}", f"run_dir={run_dir}", "data=files", *TINY, "train.max_epochs=2",
                          "logger.tensorboard=false", *overrides])  # fmt: skip
    OmegaConf.update(cfg, "data.clips", [{"file": str(clip)}], merge=False)
    train(cfg)
    return run_dir


def _distill_cfg(run_dir: Path, clips: list[Path], experts: list[Path], *overrides: str):
    from omegaconf import OmegaConf

    from mimic2dm.distill import compose_distill_config

    cfg = compose_distill_config([f"run_dir={run_dir}", "data=files", *TINY, "logger.tensorboard=false",
                                  *DISTILL_TINY, *overrides])  # fmt: skip
    OmegaConf.update(cfg, "data.clips", [{"file": str(c)} for c in clips], merge=False)
    OmegaConf.update(cfg, "experts", [str(e) for e in experts], merge=False)
    return cfg


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return write_demo(tmp_path_factory.mktemp("clips") / "demo.npz")


@pytest.fixture(scope="module")
def expert3d(tmp_path_factory, demo) -> Path:
    return _expert(tmp_path_factory.mktemp("experts") / "e3d", demo)


def test_privileged_observation_is_the_3d_trackers_and_the_clip_index(demo):
    """With ``task.privileged_3d`` the 2D task appends the episode's clip index and exactly
    the observation a 3D tracker computes in the same state; the student's part is unchanged."""
    from mimic2dm.tasks.registry import make_task

    s2 = spec_for(demo, view_mode="virtual")
    plain, priv = make_task(s2, 3, 0), make_task(s2.with_config(privileged_3d=True), 3, 0)
    lay = priv.obs_layout()
    D = lay["prop"] + lay["views"] * lay["view"]
    assert plain.obs_dim == D and priv.obs_dim == D + lay["privileged"]
    act = 0.3 * torch.ones(3, priv.action_dim)
    for _ in range(5):  # same seeds, same actions: the same episodes
        o_plain, o_priv = plain.step(act).obs, priv.step(act).obs
    torch.testing.assert_close(o_priv[:, :D], o_plain)
    assert torch.equal(o_priv[:, D], torch.zeros(3))  # one clip
    s3 = dataclasses.replace(
        s2, task="tracking3d", config={"initial_state": "default_pose", "initial_ground": False}
    )
    t3 = make_task(s3, 3, 0)
    t3.engine.reset(torch.arange(3), priv.engine.get_state())
    t3.frame[:] = priv.frame
    t3.refresh()
    o3 = t3.observe()
    torch.testing.assert_close(o_priv[:, D + 1 :], o3[:, lay["prop"] :])
    torch.testing.assert_close(o_priv[:, : lay["prop"]], o3[:, : lay["prop"]])
    plain.close(), priv.close(), t3.close()


def test_privileged_observation_needs_3d_keypoints(tmp_path, demo):
    from mimic2dm.tasks.registry import make_task

    m = load_motion2d(demo)
    m = dataclasses.replace(m, keypoints3d=None)
    path = tmp_path / "no3d.npz"
    save_motion2d(m, path)
    with pytest.raises(ValueError, match="privileged_3d needs clips with 3D keypoints; .*no3d"):
        make_task(spec_for(path, privileged_3d=True), 2, 0).observe()


def test_config_checks_and_the_beta_schedule():
    from mimic2dm.distill import DistillConfig
    from mimic2dm.utils.validate import ConfigError

    dc = DistillConfig(beta_start=1.0, beta_end=0.2, beta_iterations=4)
    assert [round(dc.beta(i), 3) for i in (0, 2, 4, 10)] == [1.0, 0.6, 0.2, 0.2]
    assert DistillConfig(beta_iterations=0, beta_end=0.1).beta(0) == 0.1
    with pytest.raises(ConfigError, match="distill.beta_start=1.5"):
        DistillConfig(beta_start=1.5)
    with pytest.raises(ConfigError, match="distill.batch_size=128.*at most distill.buffer_size"):
        DistillConfig(batch_size=128, buffer_size=64)


def test_each_clip_is_labelled_by_its_own_expert(tmp_path, demo, expert3d):
    """Two clips, two experts (one 3D, one 2D): every env's label is its clip's expert's
    deterministic action on that expert's own observation; a clip without an expert is refused."""
    from mimic2dm.tasks.registry import make_task

    from mimic2dm.distill import Labeller, expert_of_clips, load_experts

    other = tmp_path / "other.npz"
    other.write_bytes(demo.read_bytes())
    e2d = _expert(tmp_path / "e2d", other, task="tracking2d")
    experts = load_experts([str(expert3d), str(e2d)])
    assert [e.privileged for e in experts] == [True, False]
    spec = dataclasses.replace(spec_for(demo, view_mode="virtual"), data=(str(demo), str(other)))
    owner = expert_of_clips(experts, list(spec.data))
    assert owner.tolist() == [0, 1]
    with pytest.raises(ValueError, match="no expert trained on 1 of the 2 clips: x.npz"):
        expert_of_clips(experts[:1], [str(demo), "/a/x.npz"])
    task = make_task(spec.with_config(privileged_3d=True), 8, 3)
    obs = task.observe()
    lab = Labeller(experts, owner, task.obs_layout(), task.action_dim)
    labels = lab(obs)
    D, P = lab.D, lab.P
    clip = obs[:, D].long()
    assert set(clip.tolist()) == {0, 1}  # both clips drawn
    for i in range(8):
        ex = experts[int(clip[i])]
        x = (
            torch.cat([obs[i : i + 1, :P], obs[i : i + 1, D + 1 :]], -1)
            if ex.privileged
            else obs[i : i + 1, :D]
        )
        torch.testing.assert_close(labels[i : i + 1], ex.policy.act(x))
    task.close()


def test_the_student_learns_its_experts_actions(tmp_path, demo, expert3d):
    """A 3D expert whose actions vary strongly with the state (its output layer scaled up):
    after 40 DAgger iterations the student, seeing only the 2D observation, reproduces its
    actions on the states it visits far better than at the start."""
    from mimic2dm.distill import distill
    from mimic2dm.utils.checkpoint import atomic_torch_save, load_checkpoint

    ck = load_checkpoint(expert3d / "checkpoints" / "last.pt")
    for k in ("a2c_network.mu.weight", "a2c_network.mu.bias"):
        ck["model"][k] = ck["model"][k] * 30.0 + (0.2 if k.endswith("bias") else 0.0)
    strong = tmp_path / "strong.pt"
    atomic_torch_save(ck, strong)
    s = distill(_distill_cfg(tmp_path / "st", [demo], [strong], "distill.max_iterations=40", "distill.updates=8",
                             "distill.buffer_size=512", "distill.batch_size=128", "distill.learning_rate=3e-3",
                             "distill.beta_iterations=20", "distill.checkpoint_every=0"))  # fmt: skip
    gap = [h["distill/action_gap"] for h in s["history"]]
    assert s["iterations"] == 40 and s["samples"] == 40 * 4 * 8
    assert np.mean(gap[-5:]) < 0.25 * np.mean(gap[:3]), gap
    assert s["history"][-1]["distill/beta"] == 0.0  # the student acts alone at the end


def test_resume_continues_exactly_and_the_student_is_a_tracker(tmp_path, demo, expert3d):
    """2k iterations straight and k + k resumed give the same weights, buffer and counters;
    the student's checkpoint loads in ``mimic2dm eval`` and as ``init_from`` of a 2D run."""
    from rl_helpers import tiny_config

    from mimic2dm.distill import compose_distill_config, distill
    from mimic2dm.eval import evaluate
    from mimic2dm.train import train
    from mimic2dm.utils.checkpoint import load_checkpoint

    distill(_distill_cfg(tmp_path / "a", [demo], [expert3d], "distill.max_iterations=4"))
    distill(_distill_cfg(tmp_path / "b", [demo], [expert3d], "distill.max_iterations=2"))
    s = distill(
        compose_distill_config([f"resume={tmp_path / 'b'}"]),
        resume_overrides=["distill.max_iterations=4"],
    )
    assert s["iterations"] == 4
    a, b = (load_checkpoint(tmp_path / r / "checkpoints" / "last.pt") for r in "ab")
    assert a["frame"] == b["frame"] == 4 * 4 * 8
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], msg=k)
    torch.testing.assert_close(a["buffer"]["act"], b["buffer"]["act"])
    rep = evaluate(tmp_path / "a" / "checkpoints" / "last.pt", [demo])
    assert np.isfinite(rep["error_2d_px"]) and 0.0 <= rep["success_rate"] <= 1.0
    ft = train(tiny_config(tmp_path / "ft", demo, "train.max_epochs=1", "logger.tensorboard=false",
                           f"init_from={tmp_path / 'a'}"))  # fmt: skip
    assert ft["epochs"] == 1
    w = load_checkpoint(tmp_path / "ft" / "checkpoints" / "last.pt")["model"]
    key = "a2c_network.prop_norm.mean"  # the student's observation statistics carried over
    assert not torch.equal(w[key], torch.zeros_like(w[key]))


def test_bad_experts_are_one_line_errors_and_write_nothing(tmp_path, demo):
    env = {"MIMIC2DM_SHARED": "/nonexistent"}
    import os

    base = [
        sys.executable,
        "-m",
        "mimic2dm.distill",
        "data=files",
        f"data.clips=[{demo}]",
        "logger.wandb=false",
    ]
    r = subprocess.run(
        [*base, f"run_dir={tmp_path / 'x'}"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert (
        r.returncode == 1
        and "error: experts=[]: expected one or more expert checkpoints" in r.stderr
    ), r.stderr
    r = subprocess.run([*base, f"experts=[{tmp_path / 'nope'}]", f"run_dir={tmp_path / 'y'}"], capture_output=True,
                       text=True, env={**os.environ, **env})  # fmt: skip
    assert r.returncode == 1 and "experts[0]=" in r.stderr and "no checkpoint there" in r.stderr, (
        r.stderr
    )
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_the_recipes_expert_groups_cover_every_corpus_window_once():
    """cluster/generalist.sh trains one expert per group of `data.select` patterns: together
    they hold every window of conf/data/corpus.yaml, none twice (a window without an expert
    would stop the distillation)."""
    import re

    from mimic2dm.app.data import clip_entries, entry_name, select_entries
    from mimic2dm.train import compose_config

    script = (Path(__file__).resolve().parents[1] / "cluster" / "generalist.sh").read_text()
    block = script.split("# BEGIN GROUPS")[1].split("# END GROUPS")[0]
    groups = [g.split(",") for g in re.findall(r'"\[(.*?)\]"', block)]
    assert len(groups) == 8
    entries = clip_entries(compose_config(["data=corpus"]).data)
    seen: dict[str, int] = {}
    for i, patterns in enumerate(groups):
        for e in select_entries(entries, patterns):
            assert entry_name(e) not in seen, (entry_name(e), seen.get(entry_name(e)), i)
            seen[entry_name(e)] = i
    assert sorted(seen) == sorted(entry_name(e) for e in entries)


def test_distillation_with_envs_in_ray_actors(tmp_path, demo, expert3d):
    """`ray=local`: the envs (and their privileged part) live in two Ray actors."""
    from rl_helpers import ensure_ray

    from mimic2dm.distill import distill

    ensure_ray()
    s = distill(_distill_cfg(tmp_path / "r", [demo], [expert3d], "ray=local", "ray.num_actors=2",
                             "distill.max_iterations=2"))  # fmt: skip
    assert s["iterations"] == 2 and s["samples"] == 2 * 4 * 8
    assert all(np.isfinite(h["distill/action_loss"]) for h in s["history"])


def test_sigterm_finishes_the_iteration_with_a_checkpoint_and_exit_143(tmp_path, demo, expert3d):
    import json
    import os
    import signal
    import time

    from mimic2dm.utils.checkpoint import load_checkpoint

    run = tmp_path / "st"
    cmd = [sys.executable, "-m", "mimic2dm.distill", f"run_dir={run}", "data=files", f"data.clips=[{demo}]",
           f"experts=[{expert3d}]", *TINY, *DISTILL_TINY, "distill.max_iterations=100000", "distill.checkpoint_every=1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "WANDB_MODE": "offline"})  # fmt: skip
    last = run / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 240
    while not last.is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    s = json.loads((run / "summary.json").read_text())
    assert s["interrupted"] and s["signal"] == "SIGTERM"
    assert load_checkpoint(last)["iteration"] == s["iterations"] >= 1
