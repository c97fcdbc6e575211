"""Batched MuJoCo on CPU: one ``MjModel``, ``N`` simulations stepped on a thread pool.

Built on ``mujoco.batch.Batch`` (MuJoCo >= 3.17): the integration state of every env is
one row of a C-owned ``[N, nstate]`` float64 array, and ``Batch.step`` runs
``substeps`` ``mj_step`` calls per env on ``num_threads`` threads (the caller's thread
included) with the GIL released. Nothing on the hot path loops over envs in Python:
a control step is one vectorised write of the PD targets into the ``ctrl`` view, one
``Batch.step`` call, and read-outs are one gather + float32 cast of a bound array.

``step`` asks the batch for ``mjSTAGE_VEL`` at the new state, so positions (keypoints,
body poses) describe the state after the step, exactly as ``mj_kinematics`` would;
with ``persistent=True`` (one ``MjData`` per env) the next step resumes from that stage,
so it costs nothing extra. Touch sensors are acceleration-stage quantities and so
describe the contacts of the last physics substep (``physics_dt`` old).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import torch
from mujoco import batch as mj_batch

from mimic2dm.engines.base import Engine, EngineLayout, OrderMap, SimState
from mimic2dm.geometry.rotations import quat_rotate, quat_rotate_inverse

if TYPE_CHECKING:
    from mimic2dm.characters import CharacterSpec

_DIVERGED = 1e10
"""MuJoCo's own ``mjMAXVAL``: a qpos/qvel entry above it counts as diverged."""

_VEL = mujoco.mjtStage.mjSTAGE_VEL
_ACC = mujoco.mjtStage.mjSTAGE_ACC


def default_num_threads() -> int:
    """CPU cores this process may run on."""
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def _cols(idx: Sequence[int]) -> slice | np.ndarray:
    """A slice when ``idx`` is a run of consecutive ints (a view, no gather), else an index array."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return slice(int(idx[0]), int(idx[0]) + idx.size)
    return idx


@dataclass(frozen=True)
class QposLayout:
    """Where a :class:`SimState` lives in MuJoCo's ``qpos`` / ``qvel`` (the backend's layout).

    MuJoCo stores the character's freejoint as ``pos [3], quat [4]`` (wxyz) with its angular
    velocity in the body frame, then the hinge joints in model order, then each object's
    freejoint. The dof permutation of :attr:`order` is folded into the column indices, so a
    single gather reads the canonical order.

    Attributes:
        root_qpos: ``[7]`` qpos columns of the character's freejoint (pos, quat wxyz).
        root_qvel: ``[6]`` qvel columns (linear world, angular body frame).
        dof_qpos: ``J`` qpos columns, canonical ``dof_names`` order.
        dof_qvel: ``J`` qvel columns.
        obj_qpos: ``[O, 7]`` qpos columns per object freejoint.
        obj_qvel: ``[O, 6]`` qvel columns.
        order: MuJoCo's joint/body order and wxyz quaternions against the canonical layout.
        qpos0: ``[nq]`` the model's reference qpos (fills columns a state does not cover).
        nv: qvel size.
    """

    root_qpos: np.ndarray
    root_qvel: np.ndarray
    dof_qpos: slice | np.ndarray
    dof_qvel: slice | np.ndarray
    obj_qpos: np.ndarray
    obj_qvel: np.ndarray
    order: OrderMap
    qpos0: np.ndarray
    nv: int

    @staticmethod
    def build(model: mujoco.MjModel, spec: CharacterSpec, objects: Sequence[str]) -> QposLayout:
        """Look the character's and objects' joints up in ``model``; raise on anything missing."""
        order = mujoco_order(model, spec)
        root_q, root_v = _free_joint(model, spec.root_body)
        back_q, back_v = [], []
        for name in order.backend_dof_names:
            jid = _id(model, mujoco.mjtObj.mjOBJ_JOINT, name, "joint (from dof_names)")
            if model.jnt_type[jid] not in (
                int(mujoco.mjtJoint.mjJNT_HINGE),
                int(mujoco.mjtJoint.mjJNT_SLIDE),
            ):
                raise ValueError(f"dof {name!r} must be a hinge or slide joint")
            back_q.append(int(model.jnt_qposadr[jid]))
            back_v.append(int(model.jnt_dofadr[jid]))
        idx = order.dof_index
        obj = [_free_joint(model, o) for o in objects]
        return QposLayout(
            root_qpos=root_q, root_qvel=root_v,
            dof_qpos=_cols([back_q[i] for i in idx]), dof_qvel=_cols([back_v[i] for i in idx]),
            obj_qpos=np.array([q for q, _ in obj], dtype=np.int64).reshape(len(obj), 7),
            obj_qvel=np.array([v for _, v in obj], dtype=np.int64).reshape(len(obj), 6),
            order=order, qpos0=model.qpos0.copy(), nv=int(model.nv),
        )  # fmt: skip

    def qpos(self, s: SimState) -> np.ndarray:
        """``[N, nq]`` float64 qpos of states ``s`` (exact for float32 inputs)."""
        s = s.to("cpu")
        f64 = torch.float64
        q = np.repeat(self.qpos0[None], s.num_envs, axis=0)
        to_q = self.order.quat_from_canonical
        q[:, self.root_qpos] = torch.cat([s.root_pos, to_q(s.root_rot)], -1).to(f64).numpy()
        q[:, self.dof_qpos] = s.dof_pos.to(f64).numpy()
        if self.obj_qpos.size:
            q[:, self.obj_qpos] = torch.cat([s.object_pos, to_q(s.object_rot)], -1).to(f64).numpy()
        return q

    def qvel(self, s: SimState) -> np.ndarray:
        """``[N, nv]`` float64 qvel of states ``s`` (angular velocities into body frames)."""
        s = s.to("cpu")
        f64 = torch.float64
        v = np.zeros((s.num_envs, self.nv))
        ang = quat_rotate_inverse(s.root_rot.to(f64), s.root_ang_vel.to(f64))
        v[:, self.root_qvel] = torch.cat([s.root_lin_vel.to(f64), ang], -1).numpy()
        v[:, self.dof_qvel] = s.dof_vel.to(f64).numpy()
        if self.obj_qvel.size:
            ang = quat_rotate_inverse(s.object_rot.to(f64), s.object_ang_vel.to(f64))
            v[:, self.obj_qvel] = torch.cat([s.object_lin_vel.to(f64), ang], -1).numpy()
        return v

    def state(self, qpos: np.ndarray, qvel: np.ndarray) -> SimState:
        """Float32 :class:`SimState` (CPU) of ``qpos [N, nq]``, ``qvel [N, nv]`` rows."""
        qpos, qvel = torch.from_numpy(qpos), torch.from_numpy(qvel)
        to_c = self.order.quat_to_canonical
        root_q = qpos[:, self.root_qpos]
        root_rot = to_c(root_q[:, 3:])
        root_v = qvel[:, self.root_qvel]
        obj_q = qpos[:, torch.from_numpy(self.obj_qpos)]  # [N, O, 7]
        obj_v = qvel[:, torch.from_numpy(self.obj_qvel)]  # [N, O, 6]
        obj_rot = to_c(obj_q[..., 3:])
        f32 = torch.float32
        # MuJoCo's freejoint angular velocity is in the body frame; report world frame.
        return SimState(
            root_pos=root_q[:, :3].to(f32), root_rot=root_rot.to(f32),
            root_lin_vel=root_v[:, :3].to(f32), root_ang_vel=quat_rotate(root_rot, root_v[:, 3:]).to(f32),
            dof_pos=qpos[:, self.dof_qpos].to(f32), dof_vel=qvel[:, self.dof_qvel].to(f32),
            object_pos=obj_q[..., :3].to(f32), object_rot=obj_rot.to(f32),
            object_lin_vel=obj_v[..., :3].to(f32), object_ang_vel=quat_rotate(obj_rot, obj_v[..., 3:]).to(f32),
        )  # fmt: skip


def mujoco_order(model: mujoco.MjModel, spec: CharacterSpec) -> OrderMap:
    """MuJoCo's order of the character's joints and bodies (model ids) and its wxyz quaternions."""
    jids = [
        _id(model, mujoco.mjtObj.mjOBJ_JOINT, n, "joint (from dof_names)") for n in spec.dof_names
    ]
    bids = [_id(model, mujoco.mjtObj.mjOBJ_BODY, n, "body") for n in spec.body_names]
    return OrderMap(
        dof_names=tuple(spec.dof_names),
        backend_dof_names=tuple(spec.dof_names[i] for i in np.argsort(jids, kind="stable")),
        body_names=tuple(spec.body_names),
        backend_body_names=tuple(spec.body_names[i] for i in np.argsort(bids, kind="stable")),
        quat="wxyz",
    )


@dataclass(frozen=True)
class SceneIndex:
    """Where each reported quantity lives in a compiled scene.

    Attributes:
        qpos: the state's columns (:class:`QposLayout`).
        dof_ctrl: ``J`` ctrl columns (the position actuator of each dof), canonical order.
        body_ids: ``B`` character body ids, canonical ``body_names`` order.
        keypoint_cols: ``3K`` sensordata columns of the keypoint ``framepos`` sensors.
        touch_cols: ``C`` sensordata columns of the contact-body touch sensors.
        hit_cols: ``O`` sensordata columns of the objects' contact sensors (character contacts).
    """

    qpos: QposLayout
    dof_ctrl: slice | np.ndarray
    body_ids: slice | np.ndarray
    keypoint_cols: slice | np.ndarray
    touch_cols: slice | np.ndarray
    hit_cols: slice | np.ndarray

    @staticmethod
    def build(model: mujoco.MjModel, spec: CharacterSpec, objects: Sequence[str]) -> SceneIndex:
        """Look every name of ``spec`` and ``objects`` up in ``model``; raise on anything missing."""
        layout = QposLayout.build(model, spec, objects)
        dof_c = [
            _actuator_of(model, _id(model, mujoco.mjtObj.mjOBJ_JOINT, n, "joint"), n)
            for n in spec.dof_names
        ]
        order = layout.order
        back_bodies = [
            _id(model, mujoco.mjtObj.mjOBJ_BODY, b, "body") for b in order.backend_body_names
        ]
        return SceneIndex(
            qpos=layout, dof_ctrl=_cols(dof_c),
            body_ids=_cols([back_bodies[i] for i in order.body_index]),
            keypoint_cols=_cols(_keypoint_cols(model, spec.keypoint_sites)),
            touch_cols=_cols(_touch_cols(model, spec.contact_bodies)),
            hit_cols=_cols([_sensor_col(model, f"hit_{o}") for o in objects]),
        )  # fmt: skip


def _id(model: mujoco.MjModel, kind: mujoco.mjtObj, name: str, what: str) -> int:
    i = mujoco.mj_name2id(model, kind, name)
    if i < 0:
        raise ValueError(f"scene has no {what} named {name!r}")
    return i


def _free_joint(model: mujoco.MjModel, body: str) -> tuple[np.ndarray, np.ndarray]:
    """qpos ``[7]`` and qvel ``[6]`` columns of the freejoint of ``body``."""
    bid = _id(model, mujoco.mjtObj.mjOBJ_BODY, body, "body")
    jid = model.body_jntadr[bid]
    if model.body_jntnum[bid] < 1 or model.jnt_type[jid] != int(mujoco.mjtJoint.mjJNT_FREE):
        raise ValueError(f"body {body!r} must carry a freejoint as its first joint")
    q, v = model.jnt_qposadr[jid], model.jnt_dofadr[jid]
    return np.arange(q, q + 7), np.arange(v, v + 6)


def _actuator_of(model: mujoco.MjModel, jid: int, name: str) -> int:
    hits = np.flatnonzero(
        (model.actuator_trntype == int(mujoco.mjtTrn.mjTRN_JOINT))
        & (model.actuator_trnid[:, 0] == jid)
    )
    if hits.size != 1:
        raise ValueError(f"dof {name!r} must be driven by exactly one actuator, found {hits.size}")
    return int(hits[0])


def _sensor_on_site(model: mujoco.MjModel, kind: mujoco.mjtSensor, site_id: int) -> int | None:
    """sensordata address of the first ``kind`` sensor on site ``site_id``, or None."""
    hits = np.flatnonzero(
        (model.sensor_type == int(kind))
        & (model.sensor_objtype == int(mujoco.mjtObj.mjOBJ_SITE))
        & (model.sensor_objid == site_id)
    )
    return int(model.sensor_adr[hits[0]]) if hits.size else None


def _keypoint_cols(model: mujoco.MjModel, sites: Sequence[str]) -> list[int]:
    """``3K`` sensordata columns of the ``framepos`` sensors on the keypoint sites, in order."""
    cols = []
    for site in sites:
        sid = _id(model, mujoco.mjtObj.mjOBJ_SITE, site, "keypoint site")
        adr = _sensor_on_site(model, mujoco.mjtSensor.mjSENS_FRAMEPOS, sid)
        if adr is None:
            raise ValueError(
                f"scene has no framepos sensor on keypoint site {site!r}; "
                "build it with with_sensors=True"
            )
        cols.extend(range(adr, adr + 3))
    return cols


def _sensor_col(model: mujoco.MjModel, name: str) -> int:
    """The sensordata column of the one-value sensor ``name``."""
    sid = _id(model, mujoco.mjtObj.mjOBJ_SENSOR, name, "sensor")
    return int(model.sensor_adr[sid])


def _touch_cols(model: mujoco.MjModel, bodies: Sequence[str]) -> list[int]:
    """``C`` sensordata columns of a touch sensor on a site of each contact body."""
    cols = []
    for body in bodies:
        bid = _id(model, mujoco.mjtObj.mjOBJ_BODY, body, "contact body")
        adrs = [
            _sensor_on_site(model, mujoco.mjtSensor.mjSENS_TOUCH, int(site))
            for site in np.flatnonzero(model.site_bodyid == bid)
        ]
        adrs = [a for a in adrs if a is not None]
        if not adrs:
            raise ValueError(
                f"scene has no touch sensor on a site of contact body {body!r}; "
                "build it with with_sensors=True"
            )
        cols.append(adrs[0])
    return cols


class MujocoEngine(Engine):
    """MuJoCo CPU backend (see module docstring).

    Takes the base class's arguments. From ``options`` it uses ``physics_hz`` (overrides
    the scene's timestep), ``control_hz``, ``num_threads`` (0: the cores this process may
    use), ``persistent``, ``scene_xml`` and ``device``: the simulation runs on the CPU and
    read-outs are copied to ``device`` (inputs come back to the CPU at this boundary).
    """

    # ------------------------------------------------------------------ construction
    def _build(self) -> EngineLayout:
        o = self.options
        self.num_threads = o.num_threads or default_num_threads()
        self.persistent = o.persistent
        self.scene_xml = o.scene_xml
        if self.scene_xml is None:
            from mimic2dm.characters import build_scene_xml

            self.scene_xml = build_scene_xml(
                self.character, self.objects, physics_dt=self.physics_dt
            )
        model = mujoco.MjModel.from_xml_string(self.scene_xml)
        model.opt.timestep = self.physics_dt
        # Keep divergence visible as NaN (nonfinite_envs) instead of MuJoCo silently
        # teleporting the env back to qpos0 in the middle of an episode.
        model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_AUTORESET
        self.model = model
        self.index = SceneIndex.build(model, self.character, self.objects)
        self._batch = mj_batch.Batch(model, self.num_envs, self.num_threads, self.persistent)
        self._batch.reset()
        self._clean_row = self._batch.state[0].copy()  # time 0, qpos0, zero vel/ctrl/warmstart
        b = self._batch
        self._qpos, self._qvel, self._ctrl = b.bind("qpos"), b.bind("qvel"), b.bind("ctrl")
        self._sensordata, self._xpos, self._xquat = (
            b.bind("sensordata"),
            b.bind("xpos"),
            b.bind("xquat"),
        )
        spec = self.character
        return EngineLayout(
            dof_names=tuple(spec.dof_names),
            body_names=tuple(spec.body_names),
            keypoint_names=tuple(spec.keypoint_names),
            contact_names=tuple(spec.contact_bodies),
            object_names=tuple(self.objects),
            order=self.index.qpos.order,
        )

    def _default_state(self) -> SimState:
        pose = self.character.default_pose
        o = self.num_objects

        def t(x) -> torch.Tensor:
            return torch.from_numpy(np.array(x, dtype=np.float32)).unsqueeze(0)

        # objects spawn where the scene puts them (qpos0)
        spawn = self.index.qpos.state(self.model.qpos0[None].copy(), np.zeros((1, self.model.nv)))
        return SimState(
            root_pos=t(pose.root_pos), root_rot=t(pose.root_quat),
            root_lin_vel=torch.zeros(1, 3), root_ang_vel=torch.zeros(1, 3),
            dof_pos=t(pose.dof_pos), dof_vel=torch.zeros(1, self.num_dofs),
            object_pos=spawn.object_pos, object_rot=spawn.object_rot,
            object_lin_vel=torch.zeros(1, o, 3), object_ang_vel=torch.zeros(1, o, 3),
        )  # fmt: skip

    def _out(self, x: np.ndarray) -> torch.Tensor:
        """A host array as a float32 tensor on ``device``."""
        return torch.from_numpy(x.astype(np.float32, copy=False)).to(self.device)

    # ------------------------------------------------------------------ hot path
    def _set_pd_targets(self, targets: torch.Tensor) -> None:
        # One vectorised float32 -> float64 write into the ctrl columns of the state rows.
        self._ctrl[:, self.index.dof_ctrl] = targets.cpu().numpy()

    def _step(self) -> None:
        try:
            self._batch.step(nstep=self.substeps, stage=_VEL)
        except mj_batch.SimulationError as err:
            # Those envs kept their previous state; flag them as diverged so the task
            # resets them (reset_nonfinite) instead of the whole run dying.
            warnings.warn(
                f"MuJoCo failed in envs {err.ids.tolist()}: {err}", RuntimeWarning, stacklevel=3
            )
            self._qpos[err.ids] = np.nan

    def _get_keypoints(self) -> torch.Tensor:
        kp = self._sensordata[:, self.index.keypoint_cols].astype(np.float32)
        return self._out(kp).view(self.num_envs, self.num_keypoints, 3)

    def _get_contacts(self) -> torch.Tensor:
        return self._out((self._sensordata[:, self.index.touch_cols] > 0.0).astype(np.float32))

    def _get_object_contacts(self) -> torch.Tensor:
        return self._out((self._sensordata[:, self.index.hit_cols] > 0.0).astype(np.float32))

    def _get_body_poses(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.index.body_ids
        pos = self._out(self._xpos[:, ids].astype(np.float32))
        rot = self.order_map.quat_to_canonical(self._out(self._xquat[:, ids].astype(np.float32)))
        return pos, rot

    def _get_state(self) -> SimState:
        return self.index.qpos.state(self._qpos, self._qvel).to(self.device)

    # ------------------------------------------------------------------ reset
    def _reset(self, env_ids: torch.Tensor, state: SimState) -> None:
        lay, m = self.index.qpos, env_ids.numel()
        state = state.to("cpu")
        ids = env_ids.cpu().numpy()
        # Whole rows: time, warmstart, applied forces and ctrl start clean, so a reset
        # env carries nothing over from its previous episode.
        self._batch.state[ids] = self._clean_row
        self._qpos[ids] = lay.qpos(state)
        self._qvel[ids] = lay.qvel(state)
        ctrl = np.zeros((m, self.model.nu))
        ctrl[:, self.index.dof_ctrl] = state.dof_pos.to(torch.float64).numpy()  # hold the pose
        self._ctrl[ids] = ctrl
        # Full forward: keypoints, body poses and touch sensors of the new state.
        self._batch.forward(np.sort(ids).astype(np.int32), stage=_ACC)

    def state_dict(self) -> dict:
        """The batch's float64 state rows (qpos, qvel, ctrl, warm start, time): bit-exact."""
        self.wait()
        return {"mujoco_rows": self._batch.state.copy(), "nq": self.model.nq, "nv": self.model.nv}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; the next steps match the saved run's bit for bit."""
        self.wait()
        if "sim_state" in state:
            return super().load_state_dict(state)
        rows = np.asarray(state["mujoco_rows"])
        if rows.shape != self._batch.state.shape or (state["nq"], state["nv"]) != (
            self.model.nq,
            self.model.nv,
        ):
            raise ValueError(f"MuJoCo state rows {rows.shape} (nq={state['nq']}, nv={state['nv']}) do not fit this engine "
                             f"{self._batch.state.shape} (nq={self.model.nq}, nv={self.model.nv})")  # fmt: skip
        self._batch.state[:] = rows
        # the same stage as ``step`` computes, so read-outs equal the saved run's
        self._batch.forward(None, stage=_VEL)

    def _nonfinite_envs(self) -> torch.Tensor:
        # `not (max < bound)` is True for NaN as well as for inf and huge values.
        bad = ~(np.abs(self._qpos).max(axis=1) < _DIVERGED) | ~(
            np.abs(self._qvel).max(axis=1) < _DIVERGED
        )
        return torch.from_numpy(bad).to(self.device)

    def _close(self) -> None:
        self._batch = None

    # ------------------------------------------------------------------ MuJoCo-only helpers
    def get_mjdata(self, env_id: int) -> mujoco.MjData:
        """A new ``MjData`` holding env ``env_id``'s state, forwarded (for rendering and debugging)."""
        if not 0 <= env_id < self.num_envs:
            raise ValueError(f"env_id must be in [0, {self.num_envs}), got {env_id}")
        self.wait()
        data = self._batch.get_data(int(env_id))
        mujoco.mj_forward(self.model, data)
        return data
