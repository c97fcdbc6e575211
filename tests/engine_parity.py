"""Parity harness for engine backends: same initial states and PD targets -> same keypoints.

The reference is MuJoCo's own plain loop on the character's scene: one ``MjData`` per env,
``ctrl`` set by actuator name, ``mj_step`` ``substeps`` times per control step, then
``mj_kinematics`` so the keypoint sites describe the state after the step (what
``Engine.get_keypoints`` reports). It shares no code with any backend: states are written
into ``qpos``/``qvel`` by joint name with MuJoCo's wxyz quaternions and body-frame angular
velocities, so it also checks a backend's order map and conventions.

A new backend is tested by registering it (``mimic2dm.engines.ENGINES``) and giving its
tolerance in ``TOLERANCE_M``; ``tests/test_engine_parity.py`` runs every registered name.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from mimic2dm.characters import build_scene_xml, load_character
from mimic2dm.engines import load_engine
from mimic2dm.engines.base import EngineOptions, SimState
from mimic2dm.geometry.rotations import (
    quat_conjugate,
    quat_from_axis_angle,
    quat_mul,
    quat_rotate_inverse,
    xyzw_to_wxyz,
)
from mimic2dm.utils.paths import mocap_dir

TOLERANCE_M = {"mujoco": 1e-5, "newton": 0.02}
"""Largest keypoint difference (m) after the rollout, per backend. The MuJoCo backend runs
the same C code as the reference, so only float32 read-outs differ. Newton's MuJoCo-Warp
solver runs the same algorithms in float32 on a model converted by Newton, so contact
dynamics drift apart over time: 2 cm after 1 s standing and after 0.2 s following mocap
targets (the issue's bound)."""
DEFAULT_TOLERANCE_M = 0.05


@dataclass
class ParityCase:
    """One rollout: ``N`` initial states and ``T`` steps of PD targets.

    Attributes:
        character: registry name.
        states: ``N`` initial states (canonical layout, xyzw).
        targets: ``[T, N, J]`` PD targets (rad), canonical dof order.
        options: rates shared by the engine and the reference.
    """

    character: str
    states: SimState
    targets: torch.Tensor
    options: EngineOptions


def make_case(character: str, num_envs: int = 4, steps: int = 30, seed: int = 0,
              options: EngineOptions | None = None) -> ParityCase:  # fmt: skip
    """Near-default states (lifted 0.2 m, tilted, moving) and targets within +-0.05 rad of it.

    Small enough that neither character diverges at 60 Hz (see docs/engines.md), large
    enough that they fall, touch the floor and move every joint.
    """
    spec = load_character(character)
    gen = torch.Generator().manual_seed(seed)
    n, j = num_envs, len(spec.dof_names)
    pose = spec.default_pose
    lo, hi = (torch.tensor(spec.joint_range, dtype=torch.float32)[:, i] for i in (0, 1))
    clip = lambda x: torch.maximum(torch.minimum(x, hi), lo)  # noqa: E731
    dof0 = torch.tensor(np.array(pose.dof_pos), dtype=torch.float32).expand(n, j)
    axis = torch.nn.functional.normalize(torch.randn(n, 3, generator=gen), dim=-1)
    states = SimState(
        root_pos=torch.tensor(np.array(pose.root_pos), dtype=torch.float32).expand(n, 3)
        + torch.tensor([0.0, 0.0, 0.2]) + 0.5 * torch.randn(n, 3, generator=gen) * torch.tensor([1.0, 1.0, 0.0]),
        root_rot=quat_from_axis_angle(axis, 0.15 * torch.rand(n, generator=gen)),
        root_lin_vel=0.3 * torch.randn(n, 3, generator=gen),
        root_ang_vel=0.3 * torch.randn(n, 3, generator=gen),
        dof_pos=clip(dof0 + 0.1 * torch.randn(n, j, generator=gen)),
        dof_vel=0.3 * torch.randn(n, j, generator=gen),
        object_pos=torch.zeros(n, 0, 3), object_rot=torch.zeros(n, 0, 4),
        object_lin_vel=torch.zeros(n, 0, 3), object_ang_vel=torch.zeros(n, 0, 3),
    )  # fmt: skip
    targets = clip(dof0 + 0.05 * torch.randn(steps, n, j, generator=gen))
    return ParityCase(character, states, targets, options or EngineOptions(num_threads=1))


def standing_case(character: str, seconds: float = 1.0, num_envs: int = 2,
                  options: EngineOptions | None = None) -> ParityCase:  # fmt: skip
    """The default standing pose at rest, PD targets holding it for ``seconds``."""
    spec = load_character(character)
    o = options or EngineOptions(num_threads=1)
    n, j = num_envs, len(spec.dof_names)
    pose = spec.default_pose
    f32 = lambda x: torch.tensor(np.array(x), dtype=torch.float32)  # noqa: E731
    states = SimState(
        root_pos=f32(pose.root_pos).expand(n, 3).clone(), root_rot=f32(pose.root_quat).expand(n, 4).clone(),
        root_lin_vel=torch.zeros(n, 3), root_ang_vel=torch.zeros(n, 3),
        dof_pos=f32(pose.dof_pos).expand(n, j).clone(), dof_vel=torch.zeros(n, j),
        object_pos=torch.zeros(n, 0, 3), object_rot=torch.zeros(n, 0, 4),
        object_lin_vel=torch.zeros(n, 0, 3), object_ang_vel=torch.zeros(n, 0, 3),
    )  # fmt: skip
    steps = round(seconds * o.control_hz)
    return ParityCase(character, states, states.dof_pos.expand(steps, n, j).clone(), o)


MOCAP = mocap_dir()
"""The project's test clips (``shared/data/mocap``, else those in ``tests/fixtures/shared``)."""


def mocap_case(clip: str = "cmu_walk", seconds: float = 0.2, num_envs: int = 4,
               options: EngineOptions | None = None) -> ParityCase:  # fmt: skip
    """Humanoid started on a retargeted clip's frames, PD targets = the clip's next poses.

    Env ``i`` starts at an evenly spaced frame of the clip with the clip's velocities
    (finite differences at the clip's rate) and follows its retargeted joint angles,
    sampled at ``control_hz``, for ``seconds``.
    """
    from mimic2dm.characters.mocap import load_cmu_clip
    from mimic2dm.characters.retarget import retarget_human

    spec = load_character("humanoid")
    o = options or EngineOptions(num_threads=1)
    m = load_cmu_clip(MOCAP / f"{clip}.npz")
    qpos = retarget_human(m, spec).double()  # [F, 7 + J], root quaternion wxyz
    lo, hi = (torch.tensor(spec.joint_range, dtype=torch.float64)[:, i] for i in (0, 1))
    dofs = torch.maximum(torch.minimum(qpos[:, 7:], hi), lo)
    steps = round(seconds * o.control_hz)
    stride = round(m.fps / o.control_hz)  # clip frames per control step
    last = qpos.shape[0] - 1 - (steps + 1) * stride
    starts = torch.linspace(0, last, num_envs).round().long()
    rot = torch.cat([qpos[:, 4:7], qpos[:, 3:4]], -1)  # xyzw
    vel = (qpos[starts + 1, :3] - qpos[starts, :3]) * m.fps
    dq = quat_mul(rot[starts + 1], quat_conjugate(rot[starts]))  # world-frame rotation per frame
    ang = 2.0 * dq[:, :3] * torch.sign(dq[:, 3:]) * m.fps
    f = lambda x: x.float().contiguous()  # noqa: E731
    n = num_envs
    states = SimState(
        root_pos=f(qpos[starts, :3]), root_rot=f(rot[starts]), root_lin_vel=f(vel), root_ang_vel=f(ang),
        dof_pos=f(dofs[starts]), dof_vel=f((dofs[starts + 1] - dofs[starts]) * m.fps),
        object_pos=torch.zeros(n, 0, 3), object_rot=torch.zeros(n, 0, 4),
        object_lin_vel=torch.zeros(n, 0, 3), object_ang_vel=torch.zeros(n, 0, 3),
    )  # fmt: skip
    frames = starts[None] + stride * torch.arange(1, steps + 1)[:, None]  # [T, N]
    return ParityCase("humanoid", states, f(dofs[frames]), o)


def reference_keypoints(case: ParityCase) -> torch.Tensor:
    """Keypoints ``[T, N, K, 3]`` of MuJoCo's plain ``mj_step`` loop, one ``MjData`` per env."""
    spec = load_character(case.character)
    o = case.options
    model = mujoco.MjModel.from_xml_string(build_scene_xml(spec, (), physics_dt=o.physics_dt))
    model.opt.timestep = o.physics_dt
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_AUTORESET
    joints = [model.joint(n) for n in spec.dof_names]
    act = {int(model.actuator(a).trnid[0]): a for a in range(model.nu)}
    ctrl_cols = [act[j.id] for j in joints]
    root = model.joint(int(model.body(spec.root_body).jntadr[0]))
    sites = [model.site(s).id for s in spec.keypoint_sites]
    s = case.states
    datas = []
    for i in range(s.num_envs):
        d = mujoco.MjData(model)
        q = torch.cat([s.root_pos[i], xyzw_to_wxyz(s.root_rot[i])]).double().numpy()
        d.qpos[root.qposadr[0] : root.qposadr[0] + 7] = q
        ang = quat_rotate_inverse(s.root_rot[i].double(), s.root_ang_vel[i].double())
        d.qvel[root.dofadr[0] : root.dofadr[0] + 6] = torch.cat(
            [s.root_lin_vel[i].double(), ang]
        ).numpy()
        for k, jnt in enumerate(joints):
            d.qpos[jnt.qposadr[0]] = float(s.dof_pos[i, k])
            d.qvel[jnt.dofadr[0]] = float(s.dof_vel[i, k])
        mujoco.mj_forward(model, d)
        datas.append(d)
    T = case.targets.shape[0]
    out = torch.zeros(T, s.num_envs, len(sites), 3)
    for t in range(T):
        for i, d in enumerate(datas):
            d.ctrl[ctrl_cols] = case.targets[t, i].double().numpy()
            for _ in range(o.substeps):
                mujoco.mj_step(model, d)
            mujoco.mj_kinematics(model, d)
            out[t, i] = torch.from_numpy(d.site_xpos[sites].copy()).float()
    return out


def engine_keypoints(name: str, case: ParityCase) -> torch.Tensor:
    """Keypoints ``[T, N, K, 3]`` of engine ``name`` from the same states and targets."""
    options = case.options.replace(name=name)
    with load_engine(options, case.character, case.states.num_envs) as engine:
        engine.reset(None, case.states.to(engine.device))
        out = []
        for t in range(case.targets.shape[0]):
            engine.step(case.targets[t].to(engine.device))
            out.append(engine.get_keypoints().to("cpu"))
    return torch.stack(out)


def parity_error(name: str, case: ParityCase) -> torch.Tensor:
    """``[T]`` largest keypoint distance (m) over envs and keypoints at each step."""
    diff = engine_keypoints(name, case) - reference_keypoints(case)
    return diff.norm(dim=-1).flatten(1).max(1).values
