"""Newton (NVIDIA/DeepMind physics on Warp) with its MuJoCo-Warp solver: CPU or one CUDA device.

The character comes from the same MJCF as the MuJoCo backend (``build_scene_xml``):
``ModelBuilder.add_mjcf`` reads it into one world, ``replicate`` copies that world
``num_envs`` times and ``SolverMuJoCo`` (MuJoCo-Warp, one MuJoCo world per env)
simulates them together. Newton keeps the MJCF position actuators as joint drives
(``kp``, ``kv``, force and control ranges), so the PD loop runs inside the solver every
physics step, as in MuJoCo. Of Newton's solvers only this one stayed stable on the
humanoid (../shared/STACK.md: semi-implicit and Featherstone blew up).

Everything is read and written through ``wp.to_torch`` views of Newton's arrays (no copy,
on the engine's device): ``joint_q [N, nq]`` (free joints: position + xyzw quaternion),
``joint_qd [N, nv]`` (free joints: world-frame *centre-of-mass* velocity + world angular
velocity), ``body_q [N, B, 7]`` and ``Control.joint_target_q``. Keypoints are the site
frames of the MJCF (Newton imports sites as shapes) placed on ``body_q``; contact flags
come from MuJoCo-Warp's contact list. On CUDA one control step (``substeps`` solver steps)
is recorded once as a CUDA graph and replayed.

Warp compiles its kernels on first use (several minutes on a small CPU; cached in
``~/.cache/warp`` afterwards).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import torch

from mimic2dm.engines.base import Engine, EngineLayout, OrderMap, SimState
from mimic2dm.geometry.rotations import quat_rotate

if TYPE_CHECKING:
    from mimic2dm.characters import CharacterSpec

try:  # optional extra: pip install -e .[newton]
    import newton
    import warp as wp
except ImportError as err:  # pragma: no cover - depends on the install
    raise ImportError(
        f"engine 'newton' needs the optional packages newton and warp-lang ({err}); "
        "install them with `pip install -e .[newton]`"
    ) from err

_DIVERGED = 1e10
"""A joint coordinate above this counts as diverged (MuJoCo's ``mjMAXVAL``)."""

NJMAX_PER_DOF = 8
"""Constraint rows per world per dof (joint limits + 4 rows per pyramidal contact): MuJoCo-Warp
preallocates them; too few drops constraints (it prints ``nefc overflow``)."""

NCONMAX = 64
"""Contacts per world MuJoCo-Warp can hold (a fallen humanoid on the floor has ~15)."""


def warp_device(device: torch.device) -> str:
    """The Warp device string of a torch device (``cuda`` -> ``cuda:<current>``)."""
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
        return f"cuda:{index}"
    raise ValueError(f"engine 'newton' runs on 'cpu' or 'cuda:N', got device {str(device)!r}")


def _leaf(label: str) -> str:
    """Newton labels are MJCF paths (``scene/worldbody/pelvis/torso``): the element name."""
    return label.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class NewtonIndex:
    """Where everything lives in one Newton world (all worlds share the layout).

    Attributes:
        nq: joint coordinates per world; ``nv``: joint dofs; ``nb``: bodies per world.
        root_q: ``[7]`` columns of the character's free joint in ``joint_q``; ``root_qd`` ``[6]``.
        dof_q: ``J`` ``joint_q`` (and ``joint_target_q``) columns, canonical dof order.
        dof_qd: ``J`` ``joint_qd`` columns, canonical dof order.
        obj_q: ``[O, 7]``, ``obj_qd``: ``[O, 6]`` free-joint columns per object.
        root_com: ``[3]`` the root body's centre of mass in its frame (velocity conversion).
        obj_com: ``[O, 3]`` per object.
        body_ids: ``B`` world-local body indices, canonical body order.
        keypoint_body: ``K`` world-local body of each keypoint site.
        keypoint_local: ``[K, 7]`` site frame in its body (pos, quat xyzw).
        contact_bodies: ``C`` world-local body index of each contact body.
        order: Newton's dof/body order against the canonical layout (quaternions are xyzw).
    """

    nq: int
    nv: int
    nb: int
    root_q: list[int]
    root_qd: list[int]
    dof_q: list[int]
    dof_qd: list[int]
    obj_q: list[list[int]]
    obj_qd: list[list[int]]
    root_com: list[float]
    obj_com: list[list[float]]
    body_ids: list[int]
    keypoint_body: list[int]
    keypoint_local: list[list[float]]
    contact_bodies: list[int]
    order: OrderMap

    @staticmethod
    def build(b, ref: mujoco.MjModel, spec: CharacterSpec, objects: Sequence[str]) -> NewtonIndex:
        """Look the character's and objects' names up in a one-world builder ``b``.

        ``ref`` is MuJoCo's compile of the same MJCF: Newton merges the hinges of a body
        into one joint, so the names of its dofs come from the MJCF joints of that body.
        """
        bodies = {_leaf(label): i for i, label in enumerate(b.body_label)}
        for name in (*spec.body_names, *objects):
            if name not in bodies:
                raise ValueError(f"Newton model has no body named {name!r}")
        joint_of = {int(c): j for j, c in enumerate(b.joint_child)}
        q_start, qd_start = list(b.joint_q_start), list(b.joint_qd_start)
        dof_q, dof_qd = {}, {}
        backend_dofs: list[str] = []
        for j, child in enumerate(b.joint_child):
            bid = mujoco.mj_name2id(ref, mujoco.mjtObj.mjOBJ_BODY, _leaf(b.body_label[child]))
            hinges = [
                ref.joint(k).name
                for k in range(ref.njnt)
                if ref.jnt_bodyid[k] == bid and ref.jnt_type[k] != mujoco.mjtJoint.mjJNT_FREE
            ]
            lin, ang = b.joint_dof_dim[j]
            if int(b.joint_type[j]) == int(newton.JointType.FREE):
                continue
            if lin or ang != len(hinges):
                raise ValueError(
                    f"Newton joint {b.joint_label[j]!r} has {lin} linear + {ang} angular dofs; "
                    f"the MJCF body has hinges {hinges}"
                )
            for k, name in enumerate(hinges):
                dof_q[name], dof_qd[name] = q_start[j] + k, qd_start[j] + k
                backend_dofs.append(name)
        missing = [n for n in spec.dof_names if n not in dof_q]
        if missing:
            raise ValueError(f"Newton model has no dofs named {missing}")

        def free(body: str) -> tuple[list[int], list[int], list[float]]:
            j = joint_of.get(bodies[body])
            if j is None or int(b.joint_type[j]) != int(newton.JointType.FREE):
                raise ValueError(f"body {body!r} must carry a free joint in the Newton model")
            com = [float(x) for x in b.body_com[bodies[body]]]
            return (
                list(range(q_start[j], q_start[j] + 7)),
                list(range(qd_start[j], qd_start[j] + 6)),
                com,
            )

        sites = {
            _leaf(label): s
            for s, label in enumerate(b.shape_label)
            if int(b.shape_flags[s]) & int(newton.ShapeFlags.SITE)
        }
        for site in spec.keypoint_sites:
            if site not in sites:
                raise ValueError(f"Newton model has no site named {site!r} (keypoint)")
        kp = [sites[s] for s in spec.keypoint_sites]
        root_q, root_qd, root_com = free(spec.root_body)
        objs = [free(o) for o in objects]
        char_bodies = set(spec.body_names)
        return NewtonIndex(
            nq=len(b.joint_q), nv=len(b.joint_qd), nb=len(b.body_label),
            root_q=root_q, root_qd=root_qd,
            dof_q=[dof_q[n] for n in spec.dof_names], dof_qd=[dof_qd[n] for n in spec.dof_names],
            obj_q=[o[0] for o in objs], obj_qd=[o[1] for o in objs],
            root_com=root_com, obj_com=[o[2] for o in objs],
            body_ids=[bodies[n] for n in spec.body_names],
            keypoint_body=[int(b.shape_body[s]) for s in kp],
            keypoint_local=[[float(x) for x in b.shape_transform[s]] for s in kp],
            contact_bodies=[bodies[n] for n in spec.contact_bodies],
            order=OrderMap(
                dof_names=tuple(spec.dof_names),
                backend_dof_names=tuple(n for n in backend_dofs if n in set(spec.dof_names)),
                body_names=tuple(spec.body_names),
                backend_body_names=tuple(
                    _leaf(lb) for lb in b.body_label if _leaf(lb) in char_bodies
                ),
                quat="xyzw",
            ),
        )  # fmt: skip


class NewtonEngine(Engine):
    """Newton backend (see module docstring).

    From ``options`` it uses ``physics_hz``, ``control_hz``, ``device`` (``cpu`` or
    ``cuda:N``: Newton simulates there and every tensor stays there) and ``scene_xml``;
    ``num_threads`` and ``persistent`` do not apply.
    """

    # Warp's captured graphs and streams belong to the thread that made them, and a GPU step
    # is asynchronous anyway: step_async steps in the caller's thread.
    background_step = False

    # ------------------------------------------------------------------ construction
    def _build(self) -> EngineLayout:
        from mimic2dm.characters import build_scene_xml

        o = self.options
        self.wp_device = warp_device(self.device)
        xml = o.scene_xml or build_scene_xml(
            self.character, self.objects, physics_dt=self.physics_dt, with_sensors=False
        )
        ref = mujoco.MjModel.from_xml_string(xml)
        world = newton.ModelBuilder()
        newton.solvers.SolverMuJoCo.register_custom_attributes(world)
        world.add_mjcf(xml)
        self.index = ix = NewtonIndex.build(world, ref, self.character, self.objects)
        builder = newton.ModelBuilder()
        builder.replicate(world, self.num_envs)
        self.model = builder.finalize(device=self.wp_device)
        with warnings.catch_warnings():
            # MuJoCo-Warp rounds nconmax up to its own granularity and says so.
            warnings.filterwarnings("ignore", message=".*nconmax is changed.*")
            self.solver = newton.solvers.SolverMuJoCo(
                self.model, njmax=NJMAX_PER_DOF * ix.nv, nconmax=NCONMAX
            )
        # One state stepped in place: the solver reads joint_q/qd and writes them back, so
        # the torch views below stay valid and a CUDA graph replays on the same buffers.
        self.state = self.model.state()
        self.control = self.model.control()
        n = self.num_envs
        self._q = wp.to_torch(self.state.joint_q).view(n, ix.nq)
        self._qd = wp.to_torch(self.state.joint_qd).view(n, ix.nv)
        self._body_q = wp.to_torch(self.state.body_q).view(n, ix.nb, 7)
        self._target = wp.to_torch(self.control.joint_target_q).view(n, ix.nq)
        self._warmstart = wp.to_torch(self.solver.mjw_data.qacc_warmstart)
        dev = self.device
        lng = lambda x: torch.tensor(x, dtype=torch.long, device=dev)  # noqa: E731
        flt = lambda x: torch.tensor(x, dtype=torch.float32, device=dev)  # noqa: E731
        self._cols = {
            "root_q": lng(ix.root_q), "root_qd": lng(ix.root_qd), "dof_q": lng(ix.dof_q),
            "dof_qd": lng(ix.dof_qd), "obj_q": lng(ix.obj_q).view(-1, 7),
            "obj_qd": lng(ix.obj_qd).view(-1, 6), "bodies": lng(ix.body_ids),
            "kp_body": lng(ix.keypoint_body),
        }  # fmt: skip
        self._kp_local = flt(ix.keypoint_local).view(-1, 7)
        self._root_com = flt(ix.root_com)
        self._obj_com = flt(ix.obj_com).view(-1, 3)
        self._geom_slot = self._contact_slots(ix)
        self._graph = None
        return EngineLayout(
            dof_names=tuple(self.character.dof_names),
            body_names=tuple(self.character.body_names),
            keypoint_names=tuple(self.character.keypoint_names),
            contact_names=tuple(self.character.contact_bodies),
            object_names=tuple(self.objects),
            order=ix.order,
        )

    def _contact_slots(self, ix: NewtonIndex) -> torch.Tensor:
        """``[ngeom + 1]`` contact-flag column of each MuJoCo geom (``C``: none; last: padding)."""
        shape_of_geom = self.solver.mjc_geom_to_newton_shape.numpy()[0]
        shape_body = self.model.shape_body.numpy()
        slots = np.full(len(shape_of_geom) + 1, len(ix.contact_bodies), dtype=np.int64)
        for g, s in enumerate(shape_of_geom):
            if s >= 0 and shape_body[s] >= 0 and shape_body[s] in ix.contact_bodies:
                slots[g] = ix.contact_bodies.index(int(shape_body[s]))
        return torch.from_numpy(slots).to(self.device)

    def _default_state(self) -> SimState:
        pose, o = self.character.default_pose, self.num_objects
        ix = self.index

        def t(x) -> torch.Tensor:
            return torch.tensor(np.array(x, dtype=np.float32)).unsqueeze(0)

        # objects spawn where the MJCF puts them (the model's initial joint_q of world 0)
        q0 = torch.from_numpy(self.model.joint_q.numpy()[: ix.nq].copy())
        obj = q0[torch.tensor(ix.obj_q, dtype=torch.long).view(-1, 7)].unsqueeze(0)
        return SimState(
            root_pos=t(pose.root_pos), root_rot=t(pose.root_quat),
            root_lin_vel=torch.zeros(1, 3), root_ang_vel=torch.zeros(1, 3),
            dof_pos=t(pose.dof_pos), dof_vel=torch.zeros(1, self.num_dofs),
            object_pos=obj[..., :3].contiguous(), object_rot=obj[..., 3:].contiguous(),
            object_lin_vel=torch.zeros(1, o, 3), object_ang_vel=torch.zeros(1, o, 3),
        )  # fmt: skip

    # ------------------------------------------------------------------ hot path
    def _set_pd_targets(self, targets: torch.Tensor) -> None:
        # MuJoCo-Warp clips them to the actuator ctrlrange (= joint range), like MuJoCo.
        self._target[:, self._cols["dof_q"]] = targets

    def _substeps(self) -> None:
        for _ in range(self.substeps):
            self.solver.step(self.state, self.state, self.control, None, self.physics_dt)

    def _step(self) -> None:
        if self.wp_device == "cpu":
            self._substeps()
            return
        if self._graph is None:
            with wp.ScopedCapture(device=self.wp_device) as capture:
                self._substeps()
            self._graph = capture.graph
        wp.capture_launch(self._graph)

    def _get_keypoints(self) -> torch.Tensor:
        body = self._body_q[:, self._cols["kp_body"]]  # [N, K, 7]
        local = self._kp_local.expand_as(body)
        return body[..., :3] + quat_rotate(body[..., 3:], local[..., :3])

    def _get_contacts(self) -> torch.Tensor:
        # Contacts of the last physics substep (as MuJoCo's touch sensors): a penetrating
        # contact on a geom of the body. Newton's converted model detects pairs within a
        # margin too (dist > 0, no force), hence the sign test. Device tensors only.
        c = self.solver.mjw_data.contact
        geom = wp.to_torch(c.geom).view(-1, 2).long()
        world = wp.to_torch(c.worldid).long()
        valid = (
            torch.arange(world.numel(), device=self.device)
            < wp.to_torch(self.solver.mjw_data.nacon).long()
        ) & (wp.to_torch(c.dist) < 0.0)
        pad = self._geom_slot.numel() - 1
        flags = torch.zeros(self.num_envs, self.num_contacts + 1, device=self.device)
        for side in (0, 1):
            g = torch.where(valid & (geom[:, side] >= 0), geom[:, side], pad)
            w = torch.where(valid, world, 0)
            flags.index_put_((w, self._geom_slot[g]), torch.ones_like(w, dtype=torch.float32))
        return flags[:, : self.num_contacts].clone()

    def _get_body_poses(self) -> tuple[torch.Tensor, torch.Tensor]:
        body = self._body_q[:, self._cols["bodies"]]
        return body[..., :3].clone(), body[..., 3:].clone()

    def _get_state(self) -> SimState:
        c, q, qd = self._cols, self._q, self._qd
        root_rot = q[:, c["root_q"][3:]]
        root_v = qd[:, c["root_qd"]]
        obj_q, obj_v = q[:, c["obj_q"]], qd[:, c["obj_qd"]]  # [N, O, 7], [N, O, 6]
        # Newton's free-joint velocity is that of the centre of mass; report the origin's.
        root_lin = root_v[:, :3] - torch.cross(
            root_v[:, 3:], quat_rotate(root_rot, self._root_com.expand_as(root_v[:, :3])), dim=-1
        )
        obj_lin = obj_v[..., :3] - torch.cross(
            obj_v[..., 3:],
            quat_rotate(obj_q[..., 3:], self._obj_com.expand_as(obj_v[..., :3])),
            dim=-1,
        )
        return SimState(
            root_pos=q[:, c["root_q"][:3]].clone(), root_rot=root_rot.clone(),
            root_lin_vel=root_lin, root_ang_vel=root_v[:, 3:].clone(),
            dof_pos=q[:, c["dof_q"]].clone(), dof_vel=qd[:, c["dof_qd"]].clone(),
            object_pos=obj_q[..., :3].clone(), object_rot=obj_q[..., 3:].clone(),
            object_lin_vel=obj_lin, object_ang_vel=obj_v[..., 3:].clone(),
        )  # fmt: skip

    # ------------------------------------------------------------------ reset
    def _reset(self, env_ids: torch.Tensor, s: SimState) -> None:
        c = self._cols
        ids = env_ids.to(self.device)
        com = quat_rotate(s.root_rot, self._root_com.expand_as(s.root_pos))
        root_q = torch.cat([s.root_pos, s.root_rot], -1)
        root_qd = torch.cat(
            [s.root_lin_vel + torch.cross(s.root_ang_vel, com, dim=-1), s.root_ang_vel], -1
        )
        self._q[ids[:, None], c["root_q"]] = root_q
        self._qd[ids[:, None], c["root_qd"]] = root_qd
        self._q[ids[:, None], c["dof_q"]] = s.dof_pos
        self._qd[ids[:, None], c["dof_qd"]] = s.dof_vel
        if self.num_objects:
            ocom = quat_rotate(s.object_rot, self._obj_com.expand_as(s.object_pos))
            oq = torch.cat([s.object_pos, s.object_rot], -1)
            oqd = torch.cat(
                [s.object_lin_vel + torch.cross(s.object_ang_vel, ocom, dim=-1), s.object_ang_vel],
                -1,
            )
            self._q[ids[:, None, None], c["obj_q"]] = oq
            self._qd[ids[:, None, None], c["obj_qd"]] = oqd
        self._target[ids[:, None], c["dof_q"]] = s.dof_pos  # hold the pose
        # No warm start carried over from the previous episode.
        self._warmstart[ids] = 0.0
        newton.eval_fk(self.model, self.state.joint_q, self.state.joint_qd, self.state)

    def _nonfinite_envs(self) -> torch.Tensor:
        # `not (max < bound)` is True for NaN as well as for inf and huge values.
        return ~(self._q.abs().amax(1) < _DIVERGED) | ~(self._qd.abs().amax(1) < _DIVERGED)

    def _close(self) -> None:
        self._graph = None
        self.solver = None


def _quiet_warp() -> None:
    """Warp logs every kernel module it loads at INFO level; keep warnings and errors only."""
    wp.config.log_level = max(wp.config.log_level, wp.LOG_WARNING)


_quiet_warp()
