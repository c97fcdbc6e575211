"""The engine interface: every call a task makes on a simulator, and nothing else.

Tasks see torch tensors ``[num_envs, ...]`` (float32, xyzw quaternions, z-up world, one
body order: the character's MJCF body order), never a simulator handle. Public methods
of :class:`Engine` validate and convert their arguments, then call the ``_``-prefixed
methods a backend implements (ProtoMotions style), so every backend gets the same
checks and error messages.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from mimic2dm.geometry.rotations import wxyz_to_xyzw, xyzw_to_wxyz

if TYPE_CHECKING:
    from mimic2dm.characters import CharacterSpec

_DT_TOL = 1e-9
"""Relative tolerance for ``control_dt / physics_dt`` to count as an integer."""


@dataclass
class SimState:
    """Full simulator state of a batch of envs; enough to reproduce them exactly.

    Every tensor is float32 with leading dimension ``N`` (number of envs held).
    Velocities are in the **world frame**: ``root_ang_vel`` is the angular velocity of
    the root body expressed in world axes (MuJoCo keeps it in the body frame; engines
    convert), ``root_lin_vel`` the velocity of the root body's origin.

    Attributes:
        root_pos: ``[N, 3]`` root body position (m).
        root_rot: ``[N, 4]`` root body orientation, xyzw.
        root_lin_vel: ``[N, 3]`` root linear velocity, world frame (m/s).
        root_ang_vel: ``[N, 3]`` root angular velocity, world frame (rad/s).
        dof_pos: ``[N, J]`` joint angles in ``dof_names`` order (rad).
        dof_vel: ``[N, J]`` joint velocities (rad/s).
        object_pos: ``[N, O, 3]`` object body positions (``O`` may be 0).
        object_rot: ``[N, O, 4]`` object orientations, xyzw.
        object_lin_vel: ``[N, O, 3]`` object linear velocities, world frame.
        object_ang_vel: ``[N, O, 3]`` object angular velocities, world frame.
    """

    root_pos: torch.Tensor
    root_rot: torch.Tensor
    root_lin_vel: torch.Tensor
    root_ang_vel: torch.Tensor
    dof_pos: torch.Tensor
    dof_vel: torch.Tensor
    object_pos: torch.Tensor
    object_rot: torch.Tensor
    object_lin_vel: torch.Tensor
    object_ang_vel: torch.Tensor

    @property
    def num_envs(self) -> int:
        """Number of envs ``N`` held."""
        return self.root_pos.shape[0]

    def index(self, env_ids: torch.Tensor | slice) -> SimState:
        """States of a subset of envs (``env_ids`` LongTensor ``[M]``, bool ``[N]`` or slice)."""
        return SimState(
            **{f.name: getattr(self, f.name)[env_ids] for f in dataclasses.fields(self)}
        )

    def to(self, device: torch.device | str) -> SimState:
        """The same state on ``device`` (no copy for tensors already there)."""
        return SimState(
            **{f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)}
        )

    @staticmethod
    def cat(states: Sequence[SimState]) -> SimState:
        """Envs of ``states`` concatenated in order (``N = sum`` of theirs)."""
        names = [f.name for f in dataclasses.fields(SimState)]
        return SimState(**{n: torch.cat([getattr(s, n) for s in states]) for n in names})

    def clone(self) -> SimState:
        """Deep copy."""
        return SimState(**{f.name: getattr(self, f.name).clone() for f in dataclasses.fields(self)})

    def repeat(self, n: int) -> SimState:
        """``N == 1`` state tiled to ``n`` envs."""
        return SimState(
            **{
                f.name: getattr(self, f.name).expand(n, *getattr(self, f.name).shape[1:]).clone()
                for f in dataclasses.fields(self)
            }
        )

    @staticmethod
    def shapes(num_dofs: int, num_objects: int) -> dict[str, tuple[int, ...]]:
        """Expected per-env shapes (without ``N``) of every field."""
        o = num_objects
        return {
            "root_pos": (3,), "root_rot": (4,), "root_lin_vel": (3,), "root_ang_vel": (3,),
            "dof_pos": (num_dofs,), "dof_vel": (num_dofs,),
            "object_pos": (o, 3), "object_rot": (o, 4), "object_lin_vel": (o, 3),
            "object_ang_vel": (o, 3),
        }  # fmt: skip


@dataclass(frozen=True)
class EngineLayout:
    """Names (and so sizes and orders) of everything an engine reports.

    Attributes:
        dof_names: ``J`` actuated joints, action order.
        body_names: ``B`` character bodies, MJCF order (root first).
        keypoint_names: ``K`` keypoints, keypoint-set order.
        contact_names: ``C`` bodies with contact flags.
        object_names: ``O`` props, in the order they were passed.
        order: how the backend's own dof/body order and quaternions map to these
            (None: the backend stores them in this layout already).
    """

    dof_names: tuple[str, ...]
    body_names: tuple[str, ...]
    keypoint_names: tuple[str, ...]
    contact_names: tuple[str, ...]
    object_names: tuple[str, ...]
    order: OrderMap | None = None


@dataclass(frozen=True)
class EngineOptions:
    """How to build an engine, besides its character, ``num_envs`` and objects.

    The fields are the keys of the Hydra group ``engine`` (``conf/engine/<name>.yaml``),
    which reach the backend unchanged (:meth:`from_mapping`). Every backend takes this one
    dataclass; a field a backend has no use for is ignored by it (documented per field).

    Attributes:
        name: registered engine name (``"mujoco"``).
        physics_hz: simulator rate (Hz); ``physics_dt = 1 / physics_hz``.
        control_hz: policy rate (Hz); must divide ``physics_hz`` (``substeps`` physics
            steps per control step).
        num_threads: CPU simulation threads (0: every core this process may use); GPU
            backends ignore it.
        device: torch device of every tensor the engine takes and returns (``"cpu"``,
            ``"cuda:0"``); a CPU simulator copies at its boundary.
        persistent: MuJoCo: one ``MjData`` per env (exact read-outs at no extra cost, ~0.35
            MB per humanoid env) instead of one per thread.
        scene_xml: MuJoCo: an MJCF scene to simulate instead of the one built from the
            character and objects (needs the character's names, one actuator per dof and
            the keypoint ``framepos`` / contact ``touch`` sensors).
    """

    name: str = "mujoco"
    physics_hz: float = 60.0
    control_hz: float = 30.0
    num_threads: int = 0
    device: str = "cpu"
    persistent: bool = True
    scene_xml: str | None = None

    def __post_init__(self) -> None:
        from mimic2dm.engines import engine_names
        from mimic2dm.utils.validate import ConfigError, check, check_choice, check_device

        check_choice("engine.name", self.name, engine_names())
        check("engine.physics_hz", self.physics_hz, gt=0)
        check("engine.control_hz", self.control_hz, gt=0)
        check("engine.num_threads", self.num_threads, ge=0, integer=True)
        check_device("engine.device", self.device)
        try:
            self.substeps  # noqa: B018
        except ValueError:
            raise ConfigError("engine.physics_hz", self.physics_hz,
                              f"a whole multiple (>= 1) of engine.control_hz={self.control_hz:g}") from None  # fmt: skip

    @property
    def physics_dt(self) -> float:
        return 1.0 / self.physics_hz

    @property
    def control_dt(self) -> float:
        return 1.0 / self.control_hz

    @property
    def substeps(self) -> int:
        """Physics steps per control step (``physics_hz / control_hz``)."""
        return substeps_for(self.control_dt, self.physics_dt)

    @classmethod
    def from_mapping(cls, values, where: str = "engine") -> EngineOptions:
        """Options from a mapping (a Hydra ``engine`` group, a dict); unknown keys raise.

        Args:
            values: ``{field: value}``; missing fields keep their defaults.
            where: the config key of ``values``, named in errors.

        Raises:
            ConfigError: an unknown key or a value out of range, naming the key.
        """
        from mimic2dm.utils.config import from_mapping
        from mimic2dm.utils.validate import ConfigError

        try:
            return from_mapping(cls, dict(values), "engine")
        except ConfigError as e:
            if where == "engine":
                raise
            raise ConfigError(e.key, e.value, f"{e.allowed} (in {where})") from None

    def replace(self, **changes) -> EngineOptions:
        """A copy with ``changes`` (field names; unknown ones raise)."""
        return EngineOptions.from_mapping({**dataclasses.asdict(self), **changes}, "engine options")


@dataclass(frozen=True)
class OrderMap:
    """A backend's names, order and quaternion convention against the project's canonical layout.

    Canonical: the character's ``dof_names`` and ``body_names`` order (MJCF depth-first, root
    first) and xyzw quaternions. A backend that stores dofs or bodies in another order, or
    quaternions as wxyz, converts every read-out with ``*_to_canonical`` and every input with
    ``*_from_canonical``, so tasks see one layout whatever the simulator.

    Attributes:
        dof_names: ``J`` canonical dof names.
        backend_dof_names: the same names in the backend's order.
        body_names: ``B`` canonical body names.
        backend_body_names: the same names in the backend's order.
        quat: the backend's quaternion convention, ``"xyzw"`` or ``"wxyz"``.
    """

    dof_names: tuple[str, ...]
    backend_dof_names: tuple[str, ...]
    body_names: tuple[str, ...]
    backend_body_names: tuple[str, ...]
    quat: str = "xyzw"

    def __post_init__(self):
        for what in ("dof", "body"):
            canon, back = getattr(self, f"{what}_names"), getattr(self, f"backend_{what}_names")
            if len(set(canon)) != len(canon) or sorted(canon) != sorted(back):
                raise ValueError(
                    f"OrderMap: backend {what} names {list(back)} are not a permutation of the "
                    f"canonical {what} names {list(canon)}"
                )
        if self.quat not in ("xyzw", "wxyz"):
            raise ValueError(f"OrderMap.quat must be 'xyzw' or 'wxyz', got {self.quat!r}")

    @staticmethod
    def identity(dof_names: Sequence[str], body_names: Sequence[str]) -> OrderMap:
        """The map of a backend that already reports the canonical layout."""
        return OrderMap(tuple(dof_names), tuple(dof_names), tuple(body_names), tuple(body_names))

    @property
    def dof_index(self) -> tuple[int, ...]:
        """``J`` backend positions of the canonical dofs: ``canonical[i] = backend[dof_index[i]]``."""
        return tuple(self.backend_dof_names.index(n) for n in self.dof_names)

    @property
    def body_index(self) -> tuple[int, ...]:
        """``B`` backend positions of the canonical bodies."""
        return tuple(self.backend_body_names.index(n) for n in self.body_names)

    @property
    def is_identity(self) -> bool:
        return (
            self.dof_names == self.backend_dof_names
            and self.body_names == self.backend_body_names
            and self.quat == "xyzw"
        )

    @staticmethod
    def _gather(x: torch.Tensor, index: Sequence[int], dim: int) -> torch.Tensor:
        return x.index_select(dim, torch.tensor(index, dtype=torch.long, device=x.device))

    @staticmethod
    def _inverse(index: Sequence[int]) -> list[int]:
        inv = [0] * len(index)
        for i, j in enumerate(index):
            inv[j] = i
        return inv

    def dofs_to_canonical(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., J]`` backend dof order -> canonical order."""
        return self._gather(x, self.dof_index, -1)

    def dofs_from_canonical(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., J]`` canonical dof order -> backend order."""
        return self._gather(x, self._inverse(self.dof_index), -1)

    def bodies_to_canonical(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., B, D]`` backend body order -> canonical order."""
        return self._gather(x, self.body_index, -2)

    def bodies_from_canonical(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., B, D]`` canonical body order -> backend order."""
        return self._gather(x, self._inverse(self.body_index), -2)

    def quat_to_canonical(self, q: torch.Tensor) -> torch.Tensor:
        """``[..., 4]`` backend quaternions -> xyzw."""
        return wxyz_to_xyzw(q) if self.quat == "wxyz" else q

    def quat_from_canonical(self, q: torch.Tensor) -> torch.Tensor:
        """``[..., 4]`` xyzw quaternions -> the backend's convention."""
        return xyzw_to_wxyz(q) if self.quat == "wxyz" else q


def substeps_for(control_dt: float, physics_dt: float) -> int:
    """Physics steps per control step; raises unless ``control_dt`` is a multiple of ``physics_dt``.

    Args:
        control_dt: policy period (s), e.g. 1/30.
        physics_dt: simulator timestep (s), e.g. 1/60.

    Returns:
        ``round(control_dt / physics_dt)`` (>= 1).
    """
    for name, v in (("control_dt", control_dt), ("physics_dt", physics_dt)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive number of seconds, got {v!r}")
    ratio = control_dt / physics_dt
    n = round(ratio)
    if n < 1 or abs(ratio - n) > _DT_TOL * max(1.0, ratio):
        raise ValueError(
            f"control_dt ({control_dt!r} s) must be a whole multiple (>= 1) of physics_dt "
            f"({physics_dt!r} s); got control_dt / physics_dt = {ratio!r}"
        )
    return n


def resolve_character(character: str | CharacterSpec) -> CharacterSpec:
    """A :class:`CharacterSpec` from a registry name or a spec.

    Raises:
        KeyError: ``character`` names no registered character; lists the valid names.
    """
    if not isinstance(character, str):
        return character
    from mimic2dm.characters import load_character

    try:
        return load_character(character)
    except KeyError as err:
        raise KeyError(f"character: {err.args[0]}") from None


class Engine(abc.ABC):
    """``num_envs`` copies of one character (plus optional props) simulated in lockstep.

    A control step (:meth:`step`) advances every env by ``control_dt`` = ``substeps``
    physics steps of ``physics_dt``, with the PD targets held fixed. Backends implement
    the ``_``-prefixed methods; they receive validated float32 tensors on ``device``.

    Args:
        character: registry name (``"humanoid"``) or a ``CharacterSpec``.
        num_envs: number of parallel envs ``N``.
        objects: prop names (``"ball"``) simulated in every env.
        options: rates, threads, device and backend options (default: ``EngineOptions()``).
    """

    background_step = True
    """:meth:`step_async` runs the step on a background thread (False: in the caller's
    thread, for backends whose step must stay on the thread that built them)."""

    def __init__(
        self,
        character: str | CharacterSpec,
        num_envs: int,
        objects: Sequence[str] = (),
        options: EngineOptions | None = None,
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if isinstance(objects, str):
            raise TypeError(f"objects must be a sequence of names, got the string {objects!r}")
        options = EngineOptions() if options is None else options
        if not isinstance(options, EngineOptions):
            raise TypeError(f"options must be an EngineOptions, got {type(options).__name__}")
        self.options = options
        self.substeps = options.substeps
        self.control_dt = options.control_dt
        self.physics_dt = options.physics_dt
        self.device = torch.device(options.device)
        self.num_envs = num_envs
        self.physics_seconds = 0.0  # wall time spent in _step, for the training time breakdown
        self.wait_seconds = 0.0  # time callers spent blocked in wait() on a background step
        self._bg: _BackgroundStep | None = None  # the thread of step_async (made on first use)
        # engines that share a lock step one at a time (e.g. env groups on few cores)
        self.step_lock: threading.Lock | None = None
        self.character = resolve_character(character)
        self.objects = tuple(objects)
        self.layout = self._build()
        self.order_map = self.layout.order or OrderMap.identity(
            self.layout.dof_names, self.layout.body_names
        )
        self._default = self._default_state().to(self.device)
        # Every engine starts with all envs in the default state.
        self._reset(torch.arange(num_envs, device=self.device), self.default_state())

    # ------------------------------------------------------------------ sizes and names
    @property
    def dof_names(self) -> tuple[str, ...]:
        return self.layout.dof_names

    @property
    def body_names(self) -> tuple[str, ...]:
        return self.layout.body_names

    @property
    def keypoint_names(self) -> tuple[str, ...]:
        return self.layout.keypoint_names

    @property
    def contact_names(self) -> tuple[str, ...]:
        return self.layout.contact_names

    @property
    def object_names(self) -> tuple[str, ...]:
        return self.layout.object_names

    @property
    def num_dofs(self) -> int:
        return len(self.layout.dof_names)

    @property
    def num_bodies(self) -> int:
        return len(self.layout.body_names)

    @property
    def num_keypoints(self) -> int:
        return len(self.layout.keypoint_names)

    @property
    def num_contacts(self) -> int:
        return len(self.layout.contact_names)

    @property
    def num_objects(self) -> int:
        return len(self.layout.object_names)

    # ------------------------------------------------------------------ control
    def set_pd_targets(self, targets: torch.Tensor) -> None:
        """Set the PD position targets held during the next control steps.

        Args:
            targets: ``[N, J]`` joint angle targets (rad), ``dof_names`` order; clipped
                to the joint ranges by the simulator.
        """
        targets = self._check_tensor("targets", targets, (self.num_envs, self.num_dofs))
        if not bool(torch.isfinite(targets).all()):
            raise ValueError("targets contain NaN or inf")
        self.wait()
        self._set_pd_targets(targets)

    def step(self, targets: torch.Tensor | None = None) -> None:
        """Advance every env by one control step (``substeps`` physics steps).

        The wall time of the backend's step is added to ``physics_seconds`` (a running total;
        on a GPU backend that does not synchronise it is the launch time only).

        Args:
            targets: optional ``[N, J]`` PD targets to set first (see :meth:`set_pd_targets`).
        """
        if targets is not None:
            self.set_pd_targets(targets)
        self.wait()
        self._timed_step()

    def _timed_step(self) -> None:
        with self.step_lock or contextlib.nullcontext():
            t0 = time.perf_counter()
            self._step()
            self.physics_seconds += time.perf_counter() - t0

    def step_async(self, targets: torch.Tensor | None = None) -> None:
        """Start :meth:`step` on a background thread and return at once.

        The caller may do other work (e.g. another engine's envs, a policy forward pass)
        while this engine's physics runs; backends whose step releases the GIL (MuJoCo's
        ``Batch.step``) then really run in parallel. Every other public method first waits
        for the step in flight (:meth:`wait`), so a read-out always sees the stepped state.
        Errors of the step are raised by :meth:`wait`. The result is bit-identical to
        :meth:`step`.

        Args:
            targets: optional ``[N, J]`` PD targets to set first (see :meth:`set_pd_targets`).
        """
        if targets is not None:
            self.set_pd_targets(targets)
        self.wait()
        if not self.background_step:
            self._timed_step()
            return
        if self._bg is None:
            self._bg = _BackgroundStep(self._timed_step, f"{type(self).__name__}-step")
        self._bg.start()

    def wait(self) -> None:
        """Block until the step started by :meth:`step_async` (if any) is done; re-raise
        its error. The blocked time is added to ``wait_seconds``."""
        if self._bg is None or not self._bg.busy:
            return
        t0 = time.perf_counter()
        self._bg.join()
        self.wait_seconds += time.perf_counter() - t0

    @property
    def stepping(self) -> bool:
        """A step started by :meth:`step_async` has not been waited for yet."""
        return self._bg is not None and self._bg.busy

    # ------------------------------------------------------------------ read-out
    def get_state(self) -> SimState:
        """Full state of all envs (root, dofs, objects), world-frame velocities."""
        self.wait()
        return self._get_state()

    def get_body_poses(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Character body poses.

        Returns:
            ``pos [N, B, 3]`` and ``rot [N, B, 4]`` (xyzw) of the bodies in ``body_names`` order.
        """
        self.wait()
        return self._get_body_poses()

    def get_keypoints(self) -> torch.Tensor:
        """World positions ``[N, K, 3]`` of the keypoint sites, ``keypoint_names`` order."""
        self.wait()
        return self._get_keypoints()

    def get_contacts(self) -> torch.Tensor:
        """Contact flags ``[N, C]`` (float32, 1.0 = touching) of ``contact_names`` bodies."""
        self.wait()
        return self._get_contacts()

    def get_object_contacts(self) -> torch.Tensor:
        """Flags ``[N, O]`` (float32, 1.0 = touching) of each object in contact with the
        character at the end of the last step (a contact shorter than a physics step between
        two read-outs is not seen).

        Raises:
            NotImplementedError: the engine does not report object contacts.
        """
        self.wait()
        return self._get_object_contacts()

    def _get_object_contacts(self) -> torch.Tensor:
        raise NotImplementedError(f"engine {type(self).__name__!r} does not report object contacts")

    def get_dof_limits(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint limits ``lower [J]``, ``upper [J]`` (rad), also the PD target range."""
        rng = torch.tensor(self.character.joint_range, dtype=torch.float32, device=self.device)
        return rng[:, 0].clone(), rng[:, 1].clone()

    # ------------------------------------------------------------------ reset
    def default_state(self, n: int | None = None) -> SimState:
        """The character's standing pose (objects at their spawn poses), at rest.

        Args:
            n: number of envs to tile to (default ``num_envs``).
        """
        return self._default.repeat(self.num_envs if n is None else n)

    def reset(self, env_ids: torch.Tensor | None = None, state: SimState | None = None) -> None:
        """Set envs to full states; untouched envs are not affected.

        PD targets of the reset envs become their ``dof_pos`` (hold the pose).

        Args:
            env_ids: ``[M]`` LongTensor of distinct env indices (default: all envs).
            state: ``SimState`` with ``M`` envs, row ``i`` for ``env_ids[i]``
                (default: :meth:`default_state`).
        """
        env_ids = self._check_env_ids(env_ids)
        if env_ids.numel() == 0:
            return
        self.wait()
        state = (
            self.default_state(env_ids.numel())
            if state is None
            else self._check_state(state, env_ids.numel())
        )
        self._reset(env_ids, state)

    def nonfinite_envs(self) -> torch.Tensor:
        """``[N]`` bool: envs whose state holds NaN, inf or a diverged (> 1e10) value."""
        self.wait()
        return self._nonfinite_envs()

    def reset_nonfinite(self) -> torch.Tensor:
        """Reset the envs flagged by :meth:`nonfinite_envs` to the default state.

        Returns:
            ``[M]`` LongTensor of the envs that were reset (possibly empty).
        """
        env_ids = torch.nonzero(self.nonfinite_envs()).flatten()
        if env_ids.numel():
            self._reset(env_ids, self.default_state(env_ids.numel()))
        return env_ids

    def state_dict(self) -> dict:
        """Exact state of every env, for checkpoints (exact resume of a training run).

        The default keeps :meth:`get_state` (float32, no solver warm start), so a restored
        run continues closely but not bit for bit; backends that can do better override
        this and :meth:`load_state_dict`.
        """
        return {"sim_state": self.get_state().clone()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` of an engine with the same model and ``num_envs``."""
        self.reset(None, state["sim_state"])

    def close(self) -> None:
        """Release simulator resources (threads, memory); the engine is unusable after."""
        if self._bg is not None:
            with contextlib.suppress(Exception):  # a failed last step does not block closing
                self.wait()
            self._bg.stop()
            self._bg = None
        self._close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ validation helpers
    def _check_tensor(self, name: str, x, shape: tuple[int, ...]) -> torch.Tensor:
        """``x`` as a float32 tensor on ``self.device``; raises naming ``name`` and ``shape``."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor of shape {list(shape)}, got {type(x).__name__}"
            )
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} must have shape {list(shape)}, got {list(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
        return x.to(device=self.device, dtype=torch.float32)

    def _check_env_ids(self, env_ids: torch.Tensor | None) -> torch.Tensor:
        if env_ids is None:
            return torch.arange(self.num_envs, device=self.device)
        if (
            not isinstance(env_ids, torch.Tensor)
            or env_ids.dtype != torch.long
            or env_ids.dim() != 1
        ):
            got = (
                f"{env_ids.dtype} {list(env_ids.shape)}"
                if isinstance(env_ids, torch.Tensor)
                else type(env_ids).__name__
            )
            raise TypeError(f"env_ids must be a 1-D LongTensor [M], got {got}")
        # one boolean read-back, no host copies of the ids (they may live on a GPU)
        if env_ids.numel() and bool(((env_ids < 0) | (env_ids >= self.num_envs)).any()):
            raise ValueError(f"env_ids must be in [0, {self.num_envs}), got {env_ids.tolist()}")
        if torch.unique(env_ids).numel() != env_ids.numel():
            raise ValueError(f"env_ids must be distinct, got {env_ids.tolist()}")
        return env_ids.to(self.device)

    def _check_state(self, state: SimState, m: int) -> SimState:
        if not isinstance(state, SimState):
            raise TypeError(f"state must be a SimState, got {type(state).__name__}")
        out = {}
        for name, shape in SimState.shapes(self.num_dofs, self.num_objects).items():
            out[name] = self._check_tensor(f"state.{name}", getattr(state, name), (m, *shape))
        return SimState(**out)

    # ------------------------------------------------------------------ backend hooks
    @abc.abstractmethod
    def _build(self) -> EngineLayout:
        """Create the simulation (``num_envs``, ``character``, ``objects``, dts are set)."""

    @abc.abstractmethod
    def _default_state(self) -> SimState:
        """Default state of one env (``N == 1``)."""

    @abc.abstractmethod
    def _set_pd_targets(self, targets: torch.Tensor) -> None:
        """``targets [N, J]`` float32, validated."""

    @abc.abstractmethod
    def _step(self) -> None:
        """Advance all envs by ``substeps`` physics steps."""

    @abc.abstractmethod
    def _get_state(self) -> SimState: ...

    @abc.abstractmethod
    def _get_body_poses(self) -> tuple[torch.Tensor, torch.Tensor]: ...

    @abc.abstractmethod
    def _get_keypoints(self) -> torch.Tensor: ...

    @abc.abstractmethod
    def _get_contacts(self) -> torch.Tensor: ...

    @abc.abstractmethod
    def _reset(self, env_ids: torch.Tensor, state: SimState) -> None:
        """``env_ids [M]`` distinct, in range; ``state`` validated float32 with ``M`` envs."""

    @abc.abstractmethod
    def _nonfinite_envs(self) -> torch.Tensor: ...

    @abc.abstractmethod
    def _close(self) -> None: ...


class _BackgroundStep:
    """One daemon thread that runs ``fn`` each time :meth:`start` is called (a reusable
    worker: starting a thread per control step would cost more than a small step)."""

    def __init__(self, fn, name: str):
        self.fn, self.busy = fn, False
        self._go, self._done = threading.Event(), threading.Event()
        self._error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._go.wait()
            self._go.clear()
            if self._stop:
                return
            try:
                self.fn()
            except BaseException as err:  # noqa: BLE001 - handed to the caller of join()
                self._error = err
            self._done.set()

    def start(self) -> None:
        self.busy = True
        self._done.clear()
        self._go.set()

    def join(self) -> None:
        self._done.wait()
        self.busy = False
        err, self._error = self._error, None
        if err is not None:
            raise err

    def stop(self) -> None:
        self._stop = True
        self._go.set()
        self._thread.join(timeout=5.0)
