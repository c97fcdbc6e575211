"""Export a trained tracker for use outside this project: ``mimic2dm export``.

The exported model maps raw task observations ``[B, prop + V * view]`` to deterministic
actions: observation normalisation, the Gaussian's mean, the ``[-1, 1]`` clip that
rl-games applies before the env sees an action, and the task's mapping to PD targets
(``offset + scale * action``, clipped to the joint ranges as the simulator does). A JSON
file next to it describes the observation layout and the action mapping, and the export
is checked against the torch policy on observations recorded from a real rollout.
Exports are float32: a network trained with ``train.network.precision=bf16`` is exported,
and checked, with float32 hidden layers (``policy.json`` records both precisions).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mimic2dm.rl.network import ViewAggregationNetwork
from mimic2dm.rl.policy import Policy, load_policy

FORMATS = ("onnx", "torchscript")
FORMAT_VERSION = 1
INPUT_NAME = "obs"
OUTPUT_NAMES = ("action", "pd_target")
MAX_VIEWS = 64  # largest number of views the ONNX graph accepts


class ExportedPolicy(nn.Module):
    """Deterministic tracker: raw observations -> normalised actions and PD targets.

    Args:
        net: the trained network (its actor and normalisers are shared, not copied).
        act_offset, act_scale: ``[J]`` the task's action mapping (rad).
        lower, upper: ``[J]`` joint ranges (rad), the PD target range.
    """

    def __init__(self, net: ViewAggregationNetwork, act_offset: torch.Tensor,
                 act_scale: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor):  # fmt: skip
        super().__init__()
        self.prop_dim, self.view_dim = net.prop_dim, net.view_dim
        self.net = net  # only its actor path is traced: the critic is left out of the graph
        for name, t in (("act_offset", act_offset), ("act_scale", act_scale),
                        ("lower", lower), ("upper", upper)):  # fmt: skip
            self.register_buffer(name, t.detach().float().clone())

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [B, prop + V * view]`` -> ``action [B, J]`` in [-1, 1], ``pd_target [B, J]`` (rad)."""
        x = self.net.normalized_inputs(obs)
        action = self.net.mu(self.net._features(self.net.actor, x)).clamp(-1.0, 1.0)
        target = torch.minimum(
            torch.maximum(self.act_offset + self.act_scale * action, self.lower), self.upper
        )
        return action, target


# ---------------------------------------------------------------------------- layout
def observation_layout(task) -> dict:
    """The observation parts of a :class:`Tracking2DTask` with their offsets and sizes.

    Raises:
        RuntimeError: the parts do not add up to the task's sizes (the layout drifted from
            :mod:`mimic2dm.tasks.tracking2d.observations`).
    """
    spec = task.engine.character
    B, J = len(spec.body_names), task.action_dim
    n, kb = task.cfg.num_future, len(spec.key_bodies)
    K = task.view_points()[0].shape[2]  # points per view: the keypoints, then e.g. a ball centre
    objects = K - task.K
    prop = [
        ("root_height", 1, "root height above the ground (m)"),
        ("root_lin_vel", 3, "root linear velocity in the heading frame (m/s)"),
        ("root_ang_vel", 3, "root angular velocity in the heading frame (rad/s)"),
        ("root_tilt", 6, "root rotation with the heading removed (6D: two rotation-matrix columns)"),
        ("body_local_rot", 6 * (B - 1), f"6D rotation of each non-root body relative to its parent, bodies {list(spec.body_names[1:])}"),
        ("dof_vel", J, "joint velocities (rad/s), action joint order"),
        ("key_body_pos", 3 * kb, f"positions relative to the root in the heading frame (m), bodies {list(spec.key_bodies)}"),
    ]  # fmt: skip
    if getattr(task.cfg, "ball_in_proprioception", False):
        prop.append(("ball_state", 6, "the ball's position and velocity relative to the root in the heading frame (m, m/s)"))  # fmt: skip
    view = [
        ("own_keypoints", 2 * K, "the character's projected view points [K, 2] (view_points: keypoints, then object centres), normalised image coordinates ((u - cx) / fx, (v - cy) / fy) relative to its own projected root; 0 behind the camera"),
        ("ref_keypoints", 2 * K * n, f"reference keypoints of frames t+1..t+{n} [{n}, K, 2] relative to the reference root; 0 where masked"),
        ("ref_mask", K * n, f"reference keypoint observed (1) or not (0) [{n}, K]"),
        ("ref_root_offset", 2 * n, f"reference root minus own projected root [{n}, 2]"),
    ]  # fmt: skip

    def parts(items, start=0):
        out = []
        for name, size, what in items:
            out.append({"name": name, "start": start, "size": size, "description": what})
            start += size
        return out, start

    prop_parts, prop_dim = parts(prop)
    view_parts, view_dim = parts(view)
    if (prop_dim, view_dim) != (task.prop_dim, task.view_dim):
        raise RuntimeError(
            f"observation layout drifted: parts give prop {prop_dim} / view {view_dim}, "
            f"the task has {task.prop_dim} / {task.view_dim}"
        )
    return {
        "size": actor_width(task),
        "prop_size": prop_dim,
        "view_size": view_dim,
        "num_views": task.V,
        "views_accepted": [1, MAX_VIEWS],
        "order": "[prop | view_1 | ... | view_V]; view v (0-based) starts at prop_size + v * view_size",
        "prop_parts": prop_parts,
        "view_parts": view_parts,
        "num_future": n,
        "keypoint_set": spec.keypoint_set,
        "keypoint_names": list(spec.keypoint_names),
        "view_points": [*spec.keypoint_names, *(f"object_{i}_centre" for i in range(objects))],
        "root_keypoints": [spec.keypoint_names[i] for i in task.root_idx.tolist()],
        "normalisation": "inside the model (running mean / std of prop and of views, clipped)",
    }


def action_mapping(task) -> dict:
    """The task's action -> PD target mapping, per joint."""
    spec = task.engine.character
    lo, hi = task.engine.get_dof_limits()
    joints = [
        {"name": n, "offset": float(o), "scale": float(s), "lower": float(a), "upper": float(b),
         "kp": float(kp), "kd": float(kd)}
        for n, o, s, a, b, kp, kd in zip(spec.dof_names, task.act_offset, task.act_scale, lo, hi,
                                         spec.kp, spec.kd, strict=True)
    ]  # fmt: skip
    return {
        "size": task.action_dim,
        "action_range": [-1.0, 1.0],
        "pd_target": "clip(offset + scale * clip(action, -1, 1), lower, upper) (rad)",
        "joints": joints,
    }


def actor_width(task) -> int:
    """The width of the actor's observation ``[prop | views]`` (no critic-only columns)."""
    return task.obs_dim - int(task.obs_layout().get("critic", 0))


# ---------------------------------------------------------------------------- rollout
@torch.no_grad()
def record_observations(policy: Policy, task, steps: int) -> torch.Tensor:
    """Observations ``[steps * N, D]`` of a deterministic rollout of ``policy`` in ``task``."""
    obs, rows = task.observe(), []
    for _ in range(steps):
        rows.append(obs)
        obs = task.step(policy.act(obs)).obs
    return torch.cat(rows)


@torch.no_grad()
def reference_outputs(policy: Policy, task, obs: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """What training applies for ``obs``: ``Policy.act`` and the task's PD targets."""
    a = policy.act(obs)
    lo, hi = task.engine.get_dof_limits()
    t = torch.minimum(torch.maximum(task.act_offset + task.act_scale * a, lo), hi)
    return a.numpy(), t.numpy()


# ---------------------------------------------------------------------------- writers
def _export_onnx(module: ExportedPolicy, example: torch.Tensor, path: Path) -> None:
    """Write ``path`` (one file) with a dynamic batch and a dynamic number of views.

    ``example`` must hold at least two views: torch.export specialises sizes seen as 1.
    """
    batch = torch.export.Dim("batch", min=1)
    views = torch.export.Dim("views", min=1, max=MAX_VIEWS)
    width = module.prop_dim + module.view_dim * views
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), str(path), input_names=[INPUT_NAME],
                          output_names=list(OUTPUT_NAMES), dynamic_shapes=({0: batch, 1: width},),
                          dynamo=True, external_data=False, verbose=False)  # fmt: skip


def _export_torchscript(module: ExportedPolicy, example: torch.Tensor, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the trace warns about the shape check in split_views
        traced = torch.jit.trace(module, (example,), check_trace=False)
    traced.save(str(path))


def load_exported(path: str | Path, fmt: str):
    """A callable ``obs [M, D] float32 -> (action [M, J], pd_target [M, J])`` (numpy) running
    an exported policy with onnxruntime (``onnx``) or TorchScript (``torchscript``)."""
    if fmt == "onnx":
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return lambda obs: tuple(sess.run(list(OUTPUT_NAMES), {INPUT_NAME: obs.astype(np.float32)}))
    with warnings.catch_warnings():
        # TorchScript is deprecated in torch 2.13 but still loads
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path))

    def run(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            return tuple(t.numpy() for t in module(torch.from_numpy(obs.astype(np.float32))))

    return run


# ---------------------------------------------------------------------------- check
def with_more_views(obs: torch.Tensor, prop: int, extra: int = 1) -> torch.Tensor:
    """``obs [M, prop + V * view]`` with ``extra`` more views taken from the next rows
    (different views of other states), to check an export off the training's ``V``."""
    more = [obs[:, prop:].roll(k, dims=0) for k in range(1, extra + 1)]
    return torch.cat([obs, *more], dim=-1).contiguous()


def _errors(run, ref: tuple[np.ndarray, np.ndarray], obs: torch.Tensor) -> tuple[float, float]:
    got = run(obs.numpy())
    return tuple(float(np.abs(g - r).max()) for g, r in zip(got, ref, strict=True))


def check_export(model_path: Path, fmt: str, policy: Policy, task, obs: torch.Tensor) -> dict:
    """Max ``|exported - torch|`` of actions and PD targets on ``obs`` and on ``obs`` with one
    more view per row."""
    run = load_exported(model_path, fmt)
    ref = reference_outputs(policy, task, obs)
    err_a, err_t = _errors(run, ref, obs)
    obs2 = with_more_views(obs, task.prop_dim)
    err2 = max(_errors(run, reference_outputs(policy, task, obs2), obs2))
    if fmt == "onnx":
        import onnxruntime

        runtime = f"onnxruntime {onnxruntime.__version__}"
    else:
        runtime = f"torch.jit {torch.__version__}"
    return {
        "runtime": runtime, "samples": int(obs.shape[0]), "max_abs_error": max(err_a, err_t, err2),
        "max_abs_error_action": err_a, "max_abs_error_pd_target": err_t,
        "max_abs_error_one_more_view": err2, "recorded": "samples.npz",
    }  # fmt: skip


# ---------------------------------------------------------------------------- command
def export_policy(checkpoint: str | Path, out_dir: str | Path, fmt: str = "onnx",
                  data: list[str] | None = None, num_envs: int = 8, steps: int = 16,
                  tolerance: float = 1e-5, seed: int = 0) -> dict:  # fmt: skip
    """Export a tracker checkpoint and check the export against torch.

    Args:
        checkpoint: tracker checkpoint (``.pt``) or run directory.
        out_dir: where ``policy.onnx`` / ``policy.pt``, ``policy.json`` and
            ``samples.npz`` (recorded observations, torch's actions and PD targets) go.
        fmt: ``onnx`` or ``torchscript``.
        data: 2D-motion files for the check rollout (default: the run's clips).
        num_envs, steps: size of the check rollout (``num_envs * steps`` observations).
        tolerance: largest allowed ``|exported - torch|`` of actions and PD targets.
        seed: task seed of the check rollout.

    Returns:
        The description written to ``policy.json``; ``check.max_abs_error`` is the
        measured error and ``check.passed`` whether it is within ``tolerance``.

    Raises:
        ValueError: unknown format, not a tracker checkpoint, missing clip files, or an
            ``out_dir`` that cannot be written (``RunDirError``: option, path and errno).
    """
    from mimic2dm.tasks.registry import make_task
    from mimic2dm.utils.rundir import check_writable

    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    check_writable(out_dir, "--out", is_dir=True)  # before the checkpoint is loaded
    policy = load_policy(checkpoint)
    spec = policy.env_spec
    if data:
        spec = dataclasses.replace(spec, data=tuple(str(p) for p in data))
    missing = [p for p in spec.data if not Path(p).is_file()]
    if missing:
        raise ValueError(f"{checkpoint}: reference clip(s) {missing} of the run are missing; "
                         "pass --data CLIP.npz for the check rollout")  # fmt: skip
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = make_task(spec, num_envs, seed)
    net = policy.model.a2c_network
    trained_bf16, net.bf16 = net.bf16, False  # exports (and their check) are float32 throughout
    try:
        # the exported actor takes [prop | views]: columns only the critic sees are dropped
        obs = record_observations(policy, task, steps)[:, : actor_width(task)]
        lo, hi = task.engine.get_dof_limits()
        module = ExportedPolicy(net, task.act_offset, task.act_scale, lo, hi).eval()
        # two views per example row: torch.export specialises sizes seen as 1
        example = with_more_views(obs[:num_envs], task.prop_dim)
        model_path = out / ("policy.onnx" if fmt == "onnx" else "policy.pt")
        (_export_onnx if fmt == "onnx" else _export_torchscript)(module, example, model_path)
        check = check_export(model_path, fmt, policy, task, obs)
        desc = describe(task, spec, policy, checkpoint, model_path.name, fmt)
        ref_a, ref_t = reference_outputs(policy, task, obs)
        desc["precision"] = {"export": "fp32", "trained": "bf16" if trained_bf16 else "fp32"}
    finally:
        net.bf16 = trained_bf16
        task.close()
    np.savez_compressed(out / "samples.npz", obs=obs.numpy(), action=ref_a, pd_target=ref_t)
    desc["check"] = {**check, "tolerance": tolerance, "passed": check["max_abs_error"] <= tolerance}
    (out / "policy.json").write_text(json.dumps(desc, indent=2))
    return desc


def describe(task, spec, policy: Policy, checkpoint, model_name: str, fmt: str) -> dict:
    """The JSON description of an exported policy (without the check)."""
    J = task.action_dim
    return {
        "format_version": FORMAT_VERSION, "model": model_name, "format": fmt,
        "inputs": {INPUT_NAME: {"shape": ["batch", "prop_size + V * view_size"], "dtype": "float32"}},
        "outputs": {"action": {"shape": ["batch", J], "range": [-1.0, 1.0]},
                    "pd_target": {"shape": ["batch", J], "unit": "rad"}},
        "observation": observation_layout(task), "action": action_mapping(task),
        "character": spec.character, "objects": list(spec.objects), "engine": spec.engine,
        "control_hz": spec.control_hz, "physics_hz": float(spec.engine.get("physics_hz", 60.0)),
        "source": {"checkpoint": str(checkpoint), "epoch": policy.epoch, "frame": policy.frame},
    }  # fmt: skip
