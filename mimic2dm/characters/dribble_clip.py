"""A synthetic dribble: a looped running clip whose kicking foot plays a simulated ball.

No dribbling footage or mocap is reachable here, so this is a stand-in for real dribbling
clips (``mimic2dm extract`` detects the ball in a user's own videos). The ball is moved
only by the body: every touch is a contact between the reference's own legs and the ball
in MuJoCo, so a character that reproduces the body reproduces the ball.

1. The clip's gait cycle is looped to ``seconds`` (:mod:`mimic2dm.motion.looping`) and
   lifted so that the soles of the standing feet touch the ground.
2. The legs become a kinematic body (:class:`LegBody`): a capsule from hip to knee and from
   knee to ankle, and the humanoid's foot box at the ankle facing the direction of travel.
   It moves the ball in MuJoCo (the ball of :mod:`mimic2dm.characters.objects` on the
   turf's rolling resistance, about 0.6 m/s^2). Clips that turn a little per gait cycle
   (DeepMimic's run and jog loops) are straightened first: a dribble here runs straight.
3. Touches: the kicking foot (the one that lands most often) touches the ball once every
   ``touch_every`` of its strides, late in the swing, where the foot is low and slows down
   before landing. The contact model is MuJoCo's soft contact between the kinematic foot and
   the free ball: the leg bodies are heavy free bodies whose pose and velocity are set from
   the clip before every physics step, so the foot's front face pushes the ball to about
   the foot's speed along the face normal (a little more: the soft contact gives back some
   of its compression), after which ground friction turns the sliding ball into a rolling
   one (a shell keeps 3/5 of its speed). The composer tunes each touch by simulation: it
   moves the kicking foot towards the ball by a small smooth offset (the knee follows by
   two-link inverse kinematics, bone lengths kept; the sole kept low enough that the face
   spans the ball's centre), and searches the frame and the forward reach (so the moment,
   and so the foot's speed, of the contact) that roll the ball to the next touch point: a dribbler's reach, at most :data:`MAX_REACH` m across the ground.
   Steering: while in contact the foot's friction carries the ball sideways with the foot,
   so the composer sets the speed at which the foot crosses the heading through the touch
   (its *sweep*, starting from the one that cancels the clip's own sideways foot motion; a
   secant search on the ball's sideways miss at the next touch point, at most
   :data:`MAX_SWEEP`). When no touch of a stride lands the ball near the next touch point
   and letting it run does better, the foot passes inside the ball (never two strides in a
   row): a touch every one or two strides.
4. The ball at frame 0 lies ahead of both feet, rolling so that it meets the first touch,
   at a start that the legs leave alone until then.
5. The ball path is the simulation of the whole composed body, frame by frame.
   :func:`replay_error` rebuilds the kinematic body from the written keypoints and the
   ball's initial state, replays it from scratch and reports how far the replayed ball
   strays from the reference ball; ``data dribble`` refuses a clip above
   :data:`REPLAY_BOUND`.

The body and the ball are then projected together through the virtual cameras of
``data synth`` (:func:`mimic2dm.motion.synth.synthesize_views`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from mimic2dm.characters.humanoid import FOOT_SOLE_DEPTH
from mimic2dm.motion.keypoint_sets import load_keypoint_set
from mimic2dm.motion.looping import loop_keypoints
from mimic2dm.motion.synth import resample, root_trajectory

DRIBBLE_FPS = 60.0
"""Clips at a lower frame rate are resampled to this one (a swing lasts a few frames at 30)."""
SIM_DT = 1.0 / 600.0
"""MuJoCo time step (s); each clip frame is a whole number of steps (or the nearest)."""
CONTACT_HEIGHT = 0.03
"""A foot stands when its sole is within this height (m) of the ground."""
HEADING_AHEAD_S = 0.75
"""The feet face the root's position this far ahead (s, about a running stride)."""
MIN_STEP_S = 0.3
"""Two landings of one foot closer than this (s) are one step."""
MAX_REACH = 0.15
"""Largest horizontal offset (m) of the kicking foot towards the ball."""
BALL_OUTSIDE = 0.05
"""The ball rolls this far (m) outside the kicking foot's line, clear of the other foot; the
kicking foot reaches out to it."""
LOW_FOOT = 0.15
"""A touch happens in the late swing where the kicking foot's sole is at most this high (m)."""
FACE_SOLE = 0.08
"""From its touch window to landing the kicking foot's sole is kept at most this high (m), so
that its front face spans the ball's centre (a push, not a stamp)."""
REACH_RAMP_S = 0.15
"""The reach towards the ball grows over this time (s) before the touch window."""
FORWARD_SEARCH = 0.08
"""The touch's timing is tuned by moving the foot up to this far (m) along the heading."""
REPLAY_BOUND = (0.05, 0.15)
"""Largest mean and max replay error (m) of a composed ball path."""
THIGH_RADIUS, SHIN_RADIUS = 0.055, 0.05
"""Leg capsule radii (m), the humanoid's (``characters/humanoid.py``)."""
FOOT_BOX = ((0.045, 0.0, -0.0225), (0.11, 0.045, 0.0275))
"""The humanoid's foot box: centre in the foot frame (x forward, z up) and half sizes (m)."""
FOOT_FRONT = FOOT_BOX[0][0] + FOOT_BOX[1][0]
"""Distance (m) from the ankle to the foot's front face."""
LEGS = ((11, 13, 15), (12, 14, 16))
"""coco17 (hip, knee, ankle) of the left and right legs."""
START_CLEAR = 0.3
"""At frame 0 the ball lies this far (m) ahead of the leading foot's front face, clear of the legs."""
MAX_SWEEP = 2.0
"""Largest speed (m/s) at which the kicking foot crosses the heading through a touch (its
steering: the foot's friction carries the ball sideways with it)."""
SWEEP_PROBE = 0.3
"""The change of sweep (m/s) of the secant step that finds a touch's steering."""
SKIP_BELOW = 0.15
"""A stride lets the ball run (no touch) when its best touch misses by more than this (m) and
running misses less."""
LEG_MASS = 1000.0
"""Mass (kg) of each kinematic leg body: a ball contact does not slow it within a step."""


@dataclass
class Dribble:
    """A composed dribble.

    Attributes:
        keypoints3d: ``[T, K, 3]`` body keypoints (metres, z-up): the looped clip, lifted, with
            the kicking foot's reach towards the ball.
        ball: ``[T, 3]`` simulated ball centre.
        touches: frames at which the legs touch the ball (first frame of each contact).
        planned: frames of the planned touches of the kicking foot.
        radius: ball radius (m).
        fps: frame rate of ``keypoints3d`` and ``ball``.
        ball_state0: ``[13]`` the ball's MuJoCo state at frame 0 (position, quaternion wxyz,
            linear and angular velocity).
        info: settings and figures (for the clip's ``meta``).
    """

    keypoints3d: np.ndarray
    ball: np.ndarray
    touches: list[int]
    planned: list[int]
    radius: float
    fps: float
    ball_state0: np.ndarray
    info: dict = field(default_factory=dict)

    @property
    def kicks(self) -> list[int]:
        """The planned touches (the frames the kicking foot plays the ball)."""
        return self.planned


# ------------------------------------------------------------------------- the body
def _heading(root: np.ndarray, fps: float) -> np.ndarray:
    """``[T, 2]`` unit ground heading: towards where the root will be :data:`HEADING_AHEAD_S`
    later (the chord of a curved path: a ball sent along it meets the runner again)."""
    w = max(1, int(round(HEADING_AHEAD_S * fps)))
    T = root.shape[0]
    end = np.minimum(np.arange(T) + w, T - 1)
    d = root[end, :2] - root[np.maximum(end - w, 0), :2]
    n = np.linalg.norm(d, axis=1, keepdims=True)
    if (n < 1e-6).any():
        raise ValueError(
            "compose_dribble: the clip does not travel (a dribble needs a run or a walk)"
        )
    return d / n


def _quats_z_to(v: np.ndarray) -> np.ndarray:
    """``[..., 4]`` wxyz quaternions that turn +z onto the directions ``v [..., 3]``."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    u = v / np.maximum(n, 1e-9)
    q = np.concatenate([1.0 + u[..., 2:3], -u[..., 1:2], u[..., 0:1], np.zeros_like(n)], axis=-1)
    flip = q[..., 0] < 1e-9  # pointing straight down: half turn about x
    q[flip] = (0.0, 1.0, 0.0, 0.0)
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def _quats_yaw(h: np.ndarray) -> np.ndarray:
    """``[..., 4]`` wxyz quaternions of the yaws that turn +x onto ground directions ``h [..., 2]``."""
    a = 0.5 * np.arctan2(h[..., 1], h[..., 0])
    z = np.zeros_like(a)
    return np.stack([np.cos(a), z, z, np.sin(a)], axis=-1)


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], -1)  # fmt: skip


class LegBody:
    """The legs of a keypoint clip as kinematic MuJoCo bodies beside a free ball.

    Thigh and shin capsules keep the clip's median bone lengths (centred on each bone); the
    foot box sits at the ankle, level, facing the heading. Each leg body is a heavy free body
    whose pose and velocity are set from the clip before every physics step, so the contact
    solver sees the foot's true velocity (a mocap body would push with zero velocity and its
    contact damping would hold the ball back); legs touch the ball only.
    """

    def __init__(self, keypoints3d: np.ndarray | None, fps: float):
        """``keypoints3d [T, K, 3]`` give the bone lengths; ``None``: the ball alone."""
        import mujoco

        from mimic2dm.characters.objects import make_ball

        self.mj = mujoco
        self.substeps = max(1, int(round(1.0 / (fps * SIM_DT))))
        self.dt = 1.0 / (fps * self.substeps)
        self.lengths = {}
        for side, (h, k, a) in zip("lr", LEGS, strict=True) if keypoints3d is not None else ():
            kp = np.asarray(keypoints3d, dtype=np.float64)
            self.lengths[f"{side}thigh"] = float(
                np.median(np.linalg.norm(kp[:, k] - kp[:, h], axis=-1))
            )
            self.lengths[f"{side}shin"] = float(
                np.median(np.linalg.norm(kp[:, a] - kp[:, k], axis=-1))
            )
        ball = make_ball()
        head, sep, tail = ball.body_xml.partition(">")
        ball_xml = f'{head} pos="0 0 {ball.radius!r}"{sep}<freejoint name="ball_root"/>{tail}'
        inertial = f'<inertial pos="0 0 0" mass="{LEG_MASS!r}" diaginertia="{LEG_MASS!r} {LEG_MASS!r} {LEG_MASS!r}"/>'
        legs, names = [], []
        for name, length in self.lengths.items():
            r = THIGH_RADIUS if "thigh" in name else SHIN_RADIUS
            legs.append(
                f'<body name="{name}" pos="0 0 {10 + len(legs)!r}"><freejoint name="{name}"/>{inertial}'
                f'<geom name="{name}" type="capsule" fromto="0 0 {-length / 2!r} 0 0 {length / 2!r}" '
                f'size="{r!r}" contype="1" conaffinity="0"/></body>'
            )
            names.append(name)
        (cx, cy, cz), (sx, sy, sz) = FOOT_BOX
        for side in "lr" if self.lengths else ():
            legs.append(
                f'<body name="{side}foot" pos="0 0 {10 + len(legs)!r}"><freejoint name="{side}foot"/>{inertial}'
                f'<geom name="{side}foot" type="box" pos="{cx!r} {cy!r} {cz!r}" size="{sx!r} {sy!r} {sz!r}" '
                'contype="1" conaffinity="0"/></body>'
            )
            names.append(f"{side}foot")
        exclude = "".join(f'<exclude body1="world" body2="{n}"/>' for n in names)
        exclude = f"<contact>{exclude}</contact>" if names else ""
        xml = (
            f'<mujoco model="dribble"><option timestep="{self.dt!r}"/><worldbody>'
            '<geom name="ground" type="plane" size="0 0 1" condim="6" friction="1 0.005 0.0001"/>'
            f"{ball_xml}{''.join(legs)}</worldbody>{exclude}</mujoco>"
        )
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.data = mujoco.MjData(self.model)
        self.radius = ball.radius
        self.ball_geom = self.model.geom("ball_geom").id
        self.names = names
        self.qadr = {n: int(self.model.jnt_qposadr[self.model.joint(n).id]) for n in names}
        self.vadr = {n: int(self.model.jnt_dofadr[self.model.joint(n).id]) for n in names}
        self.geom_leg = {self.model.geom(n).id: n for n in names}
        q0 = np.array([self.qadr[n] for n in names], dtype=int)[:, None]
        v0 = np.array([self.vadr[n] for n in names], dtype=int)[:, None]
        self._qp, self._qq = q0 + np.arange(3), q0 + 3 + np.arange(4)
        self._vl, self._va = v0 + np.arange(3), v0 + 3 + np.arange(3)

    def poses(self, kp: np.ndarray, heading: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions ``[F, B, 3]`` and wxyz quaternions ``[F, B, 4]`` of the leg bodies (in
        :attr:`names` order) at keypoints ``kp [F, K, 3]``, feet facing ``heading [F, 2]``."""
        pos, quat = [], []
        for h, k, a in LEGS:
            for p, q in ((kp[:, h], kp[:, k]), (kp[:, k], kp[:, a])):
                pos.append(0.5 * (p + q))
                quat.append(_quats_z_to(q - p))
        for *_, a in LEGS:
            pos.append(kp[:, a])
            quat.append(_quats_yaw(heading))
        return np.stack(pos, 1).astype(np.float64), np.stack(quat, 1)

    def set_legs(
        self, now: tuple[np.ndarray, np.ndarray], nxt: tuple[np.ndarray, np.ndarray] | None
    ) -> None:
        """Leg poses ``now`` (``[B, 3]``, ``[B, 4]``) and the velocities that reach ``nxt`` one
        physics step later (``None``: at rest)."""
        d = self.data
        d.qpos[self._qp] = now[0]
        d.qpos[self._qq] = now[1]
        if nxt is None:
            d.qvel[self._vl] = 0.0
            d.qvel[self._va] = 0.0
            return
        d.qvel[self._vl] = (nxt[0] - now[0]) / self.dt
        conj = now[1] * np.array([1.0, -1.0, -1.0, -1.0])
        dq = _qmul(conj, nxt[1])  # body-frame rotation over the step
        d.qvel[self._va] = 2.0 * np.sign(dq[:, :1] + 1e-12) * dq[:, 1:] / self.dt

    def place_ball(self, state: np.ndarray) -> None:
        """Set the ball's ``[13]`` state (position, wxyz quaternion, linear and angular velocity)."""
        self.data.qpos[:7] = state[:7]
        self.data.qvel[:6] = state[7:13]
        self.data.time = 0.0
        self.mj.mj_forward(self.model, self.data)

    def ball_state(self) -> np.ndarray:
        return np.concatenate([self.data.qpos[:7], self.data.qvel[:6]])

    def snapshot(self) -> tuple:
        d = self.data
        return d.qpos.copy(), d.qvel.copy(), d.qacc_warmstart.copy(), d.time

    def restore(self, snap) -> None:
        self.data.qpos[:], self.data.qvel[:], self.data.qacc_warmstart[:], self.data.time = snap
        self.mj.mj_forward(self.model, self.data)

    def step_frame(self, pose_a: tuple[np.ndarray, np.ndarray] | None,
                   pose_b: tuple[np.ndarray, np.ndarray] | None) -> set[str]:  # fmt: skip
        """Advance one clip frame, the legs moving from ``pose_a`` to ``pose_b`` (frames of
        :meth:`poses`; linear in between; ``None``: no legs); returns the leg bodies that
        touched the ball during it."""
        touched: set[str] = set()
        S = self.substeps
        if pose_a is None:
            self.mj.mj_step(self.model, self.data, nstep=S)
            return touched
        (pa, qa), (pb, qb) = pose_a, pose_b
        flip = np.where(((qa * qb).sum(-1) < 0.0)[:, None], -1.0, 1.0)
        qb = qb * flip
        now = (pa, qa)
        for s in range(1, S + 1):
            w = s / S
            q = (1.0 - w) * qa + w * qb
            nxt = ((1.0 - w) * pa + w * pb, q / np.linalg.norm(q, axis=-1, keepdims=True))
            self.set_legs(now, nxt)
            self.mj.mj_step(self.model, self.data)
            now = nxt
            n = self.data.ncon
            if n:
                g = self.data.contact.geom[:n]
                for a, b in g[(g == self.ball_geom).any(1)]:
                    other = int(b if a == self.ball_geom else a)
                    if other in self.geom_leg:
                        touched.add(self.geom_leg[other])
        self.set_legs(now, None)
        return touched


def rolling_ball_state(pos_xy: np.ndarray, vel_xy: np.ndarray, radius: float) -> np.ndarray:
    """``[13]`` state of a ball on the ground at ``pos_xy`` rolling without slip at ``vel_xy``."""
    w = np.array([-vel_xy[1] / radius, vel_xy[0] / radius, 0.0])
    return np.array(
        [pos_xy[0], pos_xy[1], radius, 1.0, 0.0, 0.0, 0.0, vel_xy[0], vel_xy[1], 0.0, *w]
    )


def simulate(body: LegBody, kp: np.ndarray, heading: np.ndarray, ball_state0: np.ndarray
             ) -> tuple[np.ndarray, list[tuple[int, set[str]]]]:  # fmt: skip
    """Replay: the ball from ``ball_state0`` under the kinematic legs of ``kp [T, K, 3]``.

    Returns:
        ``([T, 3] ball centres, [(frame, leg bodies touching)]``).
    """
    pos, quat = body.poses(kp, heading)
    body.place_ball(ball_state0)
    body.set_legs((pos[0], quat[0]), None)
    body.mj.mj_forward(body.model, body.data)
    track = np.empty((kp.shape[0], 3))
    track[0] = body.data.qpos[:3]
    contacts = []
    for t in range(1, kp.shape[0]):
        touched = body.step_frame((pos[t - 1], quat[t - 1]), (pos[t], quat[t]))
        if touched:
            contacts.append((t, touched))
        track[t] = body.data.qpos[:3]
    return track, contacts


@functools.cache
def rolling_deceleration() -> float:
    """Deceleration (m/s^2) of the ball rolling on the ground, measured in MuJoCo (1 s from 4 m/s)."""
    body = LegBody(None, 60.0)
    body.place_ball(rolling_ball_state(np.zeros(2), np.array([4.0, 0.0]), body.radius))
    for _ in range(60):
        body.step_frame(None, None)
    return float(4.0 - body.data.qvel[0])


# ---------------------------------------------------------------------- gait events
def _standing(sole_z: np.ndarray) -> np.ndarray:
    return sole_z <= CONTACT_HEIGHT


def _swings(sole_z: np.ndarray, min_gap: int) -> list[tuple[int, int]]:
    """``(toe_off, landing)`` frame pairs of one foot's complete swings."""
    on = _standing(sole_z)
    offs = list(np.flatnonzero(on[:-1] & ~on[1:]) + 1)
    lands = list(np.flatnonzero(~on[:-1] & on[1:]) + 1)
    out = []
    for o in offs:
        later = [x for x in lands if x > o]
        if later and later[0] - o >= min_gap // 2 and (not out or o > out[-1][1]):
            out.append((int(o), int(later[0])))
    return out


def _straighten(x: np.ndarray, keypoint_set: str) -> tuple[np.ndarray, float]:
    """``x [T, K, 3]`` with its loop's turning undone (each frame turned about its root by
    minus the cycle's yaw times its phase, the root path re-integrated), and that yaw (deg per
    loop): a dribble runs straight, the ball rolls straight between touches."""
    from mimic2dm.motion.looping import find_cycle

    cyc = find_cycle(x, keypoint_set)
    idx = list(load_keypoint_set(keypoint_set).root)
    root = x[:, idx].mean(axis=1)
    root[:, 2] = 0.0
    ang = -cyc.yaw * (np.arange(x.shape[0]) - cyc.start) / cyc.period
    c, s = np.cos(ang), np.sin(ang)
    R = np.zeros((x.shape[0], 3, 3))
    R[:, 0, 0], R[:, 0, 1], R[:, 1, 0], R[:, 1, 1], R[:, 2, 2] = c, -s, s, c, 1.0
    step = np.einsum("tij,tj->ti", R[:-1], np.diff(root, axis=0))
    new_root = np.concatenate([root[:1], root[:1] + np.cumsum(step, axis=0)])
    out = np.einsum("tij,tkj->tki", R, x - root[:, None]) + new_root[:, None]
    return out, float(np.degrees(cyc.yaw))


def _f32(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to float32 (the written clip's precision), as float64."""
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def _smoothstep(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def _two_link(
    hip: np.ndarray, knee: np.ndarray, ankle: np.ndarray, target: np.ndarray
) -> np.ndarray:
    """The knee that puts the ankle at ``target`` with the hip fixed, thigh and shin lengths
    kept, bending in the plane the original knee bends in."""
    l1, l2 = np.linalg.norm(knee - hip), np.linalg.norm(ankle - knee)
    v = target - hip
    d = float(np.clip(np.linalg.norm(v), abs(l1 - l2) + 1e-6, l1 + l2 - 1e-6))
    u = v / max(np.linalg.norm(v), 1e-9)
    a = (l1 * l1 - l2 * l2 + d * d) / (2.0 * d)
    h = math.sqrt(max(l1 * l1 - a * a, 0.0))
    n = (knee - hip) - ((knee - hip) @ u) * u
    nn = np.linalg.norm(n)
    n = n / nn if nn > 1e-9 else np.array([0.0, 0.0, 1.0])
    return hip + a * u + h * n


def _apply_reach(kp: np.ndarray, leg: tuple[int, int, int], offset: np.ndarray) -> np.ndarray:
    """``kp`` with the ankle of ``leg`` moved by ``offset [T, 3]``, the knee placed by two-link
    IK (bone lengths kept) and the hip kept."""
    out = kp.copy()
    h, k, a = leg
    for t in np.flatnonzero(np.linalg.norm(offset, axis=1) > 1e-9):
        target = kp[t, a] + offset[t]
        out[t, k] = _two_link(kp[t, h], kp[t, k], kp[t, a], target)
        out[t, a] = target
    return out


# --------------------------------------------------------------------- composition
def _foot_speed(ankle_xy: np.ndarray, heading: np.ndarray, fps: float) -> np.ndarray:
    """``[T]`` forward speed of a foot (m/s), smoothed over 3 frames (clips repeat frames)."""
    v = np.gradient(ankle_xy, axis=0) * fps
    s = (v * heading).sum(1)
    return np.convolve(np.pad(s, 1, mode="edge"), np.ones(3) / 3.0, mode="valid")


def compose_dribble(
    keypoints3d: np.ndarray,
    keypoint_set: str,
    fps: float,
    *,
    seconds: float = 10.0,
    touch_every: int = 1,
) -> Dribble:
    """Loop a running clip and let its kicking foot dribble a simulated ball.

    Args:
        keypoints3d: ``[T, K, 3]`` world keypoints of a human clip (``coco17``).
        keypoint_set: must be ``coco17``.
        fps: frame rate.
        seconds: length of the dribble.
        touch_every: the kicking foot touches the ball once every this many of its strides
            (a stride may let the ball run besides). Each touch sends the ball to where the
            foot will meet it, so the touch rate sets how hard the ball is pushed: 1, small
            touches; 2, pushes twice as long.

    Returns:
        The :class:`Dribble` (body, ball, touches).
    """
    if keypoint_set != "coco17":
        raise ValueError(f"compose_dribble: needs a human coco17 clip, got {keypoint_set!r}")
    if touch_every < 1:
        raise ValueError(f"compose_dribble: touch_every must be >= 1, got {touch_every}")
    if fps < DRIBBLE_FPS:  # touches need the foot's speed within a swing
        keypoints3d = resample(np.asarray(keypoints3d, dtype=np.float64), fps, DRIBBLE_FPS)
        fps = DRIBBLE_FPS
    straight, turn = _straighten(np.asarray(keypoints3d, dtype=np.float64), keypoint_set)
    kp, _, loop = loop_keypoints(straight, keypoint_set, fps, seconds=seconds)
    loop["straightened_deg_per_loop"] = turn
    kp = kp.astype(np.float64)
    kset = load_keypoint_set(keypoint_set)
    ankles = [kset.index("left_ankle"), kset.index("right_ankle")]
    lift = FOOT_SOLE_DEPTH - float(np.percentile(np.min(kp[:, ankles, 2], axis=1), 2))
    kp[..., 2] += lift  # the standing soles on the ground
    T = kp.shape[0]
    root = root_trajectory(kp, keypoint_set)
    heading = _heading(root, fps)
    lateral = np.stack([-heading[:, 1], heading[:, 0]], axis=1)
    swings = [_swings(kp[:, a, 2] - FOOT_SOLE_DEPTH, int(round(MIN_STEP_S * fps))) for a in ankles]
    foot = int(np.argmax([len(x) for x in swings]))
    leg = LEGS[foot]
    outside = (
        (1.0 if foot == 0 else -1.0) * BALL_OUTSIDE * lateral
    )  # the left foot's outside: +lateral
    speed = _foot_speed(kp[:, leg[2], :2], heading, fps)
    runner = float(np.linalg.norm(root[-1, :2] - root[0, :2]) / ((T - 1) / fps))
    plan = [x for x in swings[foot] if x[0] >= int(round(0.25 * fps)) and x[1] < T - 1][
        ::touch_every
    ]
    if not plan:
        raise ValueError(
            "compose_dribble: the clip is too short for a touch (one swing of the kicking foot)"
        )
    body = LegBody(kp, fps)
    r = body.radius

    sole = kp[:, leg[2], 2] - FOOT_SOLE_DEPTH

    def window(sw: tuple[int, int]) -> np.ndarray:
        """Late swing: the frames before landing where the foot is within :data:`LOW_FOOT`
        of the ground and slows down."""
        o, land = sw
        peak = o + int(np.argmax(speed[o:land]))
        frames = np.arange(peak, land)
        low = frames[sole[frames] <= LOW_FOOT]
        return low if len(low) else frames[-1:]

    def meet(t: int) -> np.ndarray:
        """Ball centre (ground) that the kicking foot's front face meets at ``t``, unreached."""
        return kp[t, leg[2], :2] + (FOOT_FRONT + r) * heading[t]

    # nominal touches: mid-window
    nominal = [int(window(x)[len(window(x)) // 2]) for x in plan]
    alone = LegBody(None, fps)

    def roll(state: np.ndarray, frames: int) -> np.ndarray:
        alone.place_ball(state)
        alone.mj.mj_step(alone.model, alone.data, nstep=frames * alone.substeps)
        return alone.data.qpos[:2].copy()

    # frame 0: the ball lies ahead of both feet, clear of the legs, outside the kicking foot's
    # line, rolling so that it meets the first touch whose point lies ahead of it
    h0 = heading[0]
    c0 = nominal[0]
    want0 = meet(c0) + outside[c0]
    clear = max(float(kp[0, a, :2] @ h0) for a in ankles) + FOOT_FRONT + r + START_CLEAR
    first_reach = max(plan[0][0], int(window(plan[0])[0]) - int(round(REACH_RAMP_S * fps)))
    kp32 = _f32(kp)
    lp, lq = body.poses(kp32[: first_reach + 1], heading[: first_reach + 1])

    def launch(back: float) -> np.ndarray:
        """The rolling state ``back`` m behind the first touch point that reaches it at ``c0``."""
        start = want0 - back * h0
        lo, hi = 0.0, 2.0 * runner + 1.0
        for _ in range(24):
            v0 = 0.5 * (lo + hi)
            ahead = float((roll(rolling_ball_state(start, v0 * h0, r), c0) - want0) @ h0)
            lo, hi = (v0, hi) if ahead < 0.0 else (lo, v0)
        return _f32(rolling_ball_state(start, v0 * h0, r))

    def untouched(state: np.ndarray) -> bool:
        """Whether the legs leave the ball alone until the first touch's reach begins."""
        body.place_ball(state)
        body.set_legs((lp[0], lq[0]), None)
        ok = not any(body.step_frame((lp[i], lq[i]), (lp[i + 1], lq[i + 1]))
                     for i in range(first_reach))  # fmt: skip
        return ok

    # as if the touch before frame 0 had sent it (about the runner's travel behind the touch
    # point), else from further ahead, clear of both feet
    backs = [*np.linspace(runner * c0 / fps, max(float(want0 @ h0) - clear, 0.0), 6), 0.0]
    state0 = next((s for s in map(launch, backs) if untouched(s)), None)
    if state0 is None:
        raise ValueError(
            "compose_dribble: no start of the ball clear of the legs before the first touch"
        )
    kp = _f32(kp)  # the body as written: the replay of the written clip is this simulation
    comp = kp.copy()
    pos, quat = body.poses(comp, heading)
    body.place_ball(state0)
    body.set_legs((pos[0], quat[0]), None)
    body.mj.mj_forward(body.model, body.data)
    track = np.empty((T, 3))
    track[0] = body.data.qpos[:3]
    contacts: list[tuple[int, set[str]]] = []
    offset = np.zeros((T, 3))
    t = 0
    planned: list[int] = []
    skipped: list[int] = []
    sweeps: list[float] = []
    foot_vel = np.gradient(kp[:, leg[2], :2], axis=0) * fps
    kick_names = {f"{'lr'[foot]}foot", f"{'lr'[foot]}shin"}

    def run_to(end: int) -> None:
        nonlocal t
        while t < end:
            touched = body.step_frame((pos[t], quat[t]), (pos[t + 1], quat[t + 1]))
            t += 1
            track[t] = body.data.qpos[:3]
            if touched:
                contacts.append((t, touched))

    def ghost_states(end: int) -> dict[int, np.ndarray]:
        """The ball's states up to frame ``end`` without the kicking leg."""
        snap = body.snapshot()
        ghost = comp[t : end + 1].copy()
        ghost[:, [leg[1], leg[2]], 2] += 50.0
        gp, gq = body.poses(ghost, heading[t : end + 1])
        out = {}
        for tt in range(t, end):
            body.step_frame((gp[tt - t], gq[tt - t]), (gp[tt - t + 1], gq[tt - t + 1]))
            out[tt + 1] = body.ball_state()
        body.restore(snap)
        return out

    def weights(c: int, sw: tuple[int, int]) -> np.ndarray:
        """``[T]`` weight of a touch's reach and turn: up from the swing's start (or now) to
        ``c``, held through the stance, back to 0 over the next swing."""
        o, land = max(sw[0], t), sw[1]
        w = np.zeros(T)
        w[o : c + 1] = _smoothstep((np.arange(o, c + 1) - o) / max(c - o, 1))
        nxt = [x for x in swings[foot] if x[0] > land]
        if nxt:
            o2, l2 = nxt[0]
            w[c + 1 : o2] = 1.0
            w[o2 : l2 + 1] = 1.0 - _smoothstep((np.arange(o2, l2 + 1) - o2) / max(l2 - o2, 1))
        else:
            w[c + 1 :] = 1.0
        return w

    def reach_offset(
        c: int, need: np.ndarray, sw: tuple[int, int], sweep: float = 0.0
    ) -> np.ndarray:
        """``offset`` with the kicking foot's horizontal reach at ``c`` moved to ``need [2]``
        (at most :data:`MAX_REACH`), and the foot kept low (sole at most :data:`FACE_SOLE`
        high) from the window on to landing. Across the heading the reach is complete before
        the touch window: the ball is centred on the front face whenever the contact comes."""
        o, land = max(sw[0], t), sw[1]
        n = float(np.linalg.norm(need))
        if n > MAX_REACH:
            need = need * (MAX_REACH / n)
        delta = need - offset[c, :2]
        w = weights(c, sw)
        first = int(window(sw)[0])
        lat = lateral[c] * float(delta @ lateral[c])
        wl = w.copy()
        e = max(min(first, c) - 2, o + 1)
        wl[o : e + 1] = _smoothstep((np.arange(o, e + 1) - o) / max(e - o, 1))
        wl[e + 1 : c + 1] = 1.0
        out = offset.copy()
        out[:, :2] += w[:, None] * (delta - lat)[None, :] + wl[:, None] * lat[None, :]
        if sweep:  # the foot crosses the touch window at ``sweep`` m/s across the heading
            ex = np.zeros(T)
            ex[first : land + 1] = sweep * (np.arange(first, land + 1) - c) / fps
            ex[o:first] = wl[o:first] * ex[first]
            ex[land + 1 :] = w[land + 1 :] * ex[land]
            out[:, :2] += ex[:, None] * lateral[c][None, :]
        ramp = _smoothstep((np.arange(o, land + 1) - o) / max(first - o, 1))
        out[o : land + 1, 2] = np.minimum(0.0, FACE_SOLE - sole[o : land + 1]) * ramp
        return out

    def trial(off: np.ndarray, c: int, end: int, horizon: int) -> tuple[np.ndarray, bool]:
        """Miss ``[2]`` (m, along and across the heading) of the ball at the next touch point
        at ``horizon``, and whether the kicking leg touched it (around ``c``; ``c < 0``: at
        all): the legs move it up to ``end`` (where the next touch's reach begins), then it
        rolls alone."""
        snap = body.snapshot()
        trial_kp = _f32(_apply_reach(kp[t : end + 1], leg, off[t : end + 1]))
        tp, tq = body.poses(trial_kp, heading[t : end + 1])
        hit = False
        for tt in range(t, end):
            touched = body.step_frame((tp[tt - t], tq[tt - t]), (tp[tt - t + 1], tq[tt - t + 1]))
            hit |= bool(touched & kick_names) and (c < 0 or c - 3 <= tt + 1 <= c + 3)
        at = roll(body.ball_state(), horizon - end)
        d = at - meet(horizon) - outside[horizon]
        body.restore(snap)
        return np.array([d @ heading[horizon], d @ lateral[horizon]]), hit

    def reach_start(sw: tuple[int, int]) -> int:
        return max(sw[0], int(window(sw)[0]) - int(round(REACH_RAMP_S * fps)))

    def score(miss: np.ndarray, hit: bool) -> float:
        return float(np.abs(miss).sum()) + (0.0 if hit else 10.0)

    for j, sw in enumerate(plan):
        cands = window(sw)
        run_to(max(reach_start(sw), t))
        if j + 1 < len(plan):
            horizon, end = nominal[j + 1], reach_start(plan[j + 1])
        else:
            gap = nominal[j] - nominal[j - 1] if j else int(round(MIN_STEP_S * 2.5 * fps))
            horizon = end = min(T - 1, nominal[j] + gap)
        ghost = ghost_states(int(cands[-1]))

        def tune(
            c: int, sweep: float, steer: int, sw=sw, ghost=ghost, end=end, horizon=horizon
        ) -> tuple:
            """Forward reach by bisection on the forward miss, then ``steer`` rounds of the
            foot's sweep by a secant step on the miss across (each followed by the reach
            again); returns ``(score, c, need, sweep, miss, hit)``."""
            base = ghost[c][:2] - meet(c)

            def run(f: float, u: float) -> tuple[np.ndarray, bool]:
                return trial(reach_offset(c, base + f * heading[c], sw, u), c, end, horizon)

            def reach(u: float) -> tuple[float, tuple[np.ndarray, bool]]:
                lo, hi = -FORWARD_SEARCH, FORWARD_SEARCH
                res = {lo: run(lo, u), hi: run(hi, u)}
                if res[lo][0][0] < 0.0 < res[hi][0][0]:
                    for _ in range(6):  # a later contact (foot further back) is a slower push
                        mid = 0.5 * (lo + hi)
                        res[mid] = run(mid, u)
                        lo, hi = (mid, hi) if res[mid][0][0] < 0.0 else (lo, mid)
                f = min(res, key=lambda k: score(*res[k]))
                return f, res[f]

            f, (m, h) = reach(sweep)
            out = [(score(m, h), c, base + f * heading[c], sweep, m, h)]
            for _ in range(steer):
                probe = sweep + (SWEEP_PROBE if sweep <= 0.0 else -SWEEP_PROBE)
                m1, _ = run(f, probe)
                slope = (m1[1] - m[1]) / (probe - sweep)
                if abs(slope) < 1e-3:
                    break
                sweep = float(np.clip(sweep - m[1] / slope, -MAX_SWEEP, MAX_SWEEP))
                f, (m, h) = reach(sweep)
                out.append((score(m, h), c, base + f * heading[c], sweep, m, h))
            return min(out, key=lambda x: x[0])

        # steering starts from the sweep that cancels the foot's own motion across the heading
        mid = int(cands[len(cands) // 2])
        u0 = float(np.clip(-(foot_vel[mid] @ lateral[mid]), -MAX_SWEEP, MAX_SWEEP))
        best = min((tune(int(c), u0, 0) for c in cands), key=lambda x: x[0])
        best = min(best, tune(best[1], best[3], 2), key=lambda x: x[0])
        # or let the ball run this stride (the foot passes inside it): a touch every two strides
        if j + 1 < len(plan) and (not skipped or skipped[-1] != j - 1) and best[0] > SKIP_BELOW:
            c = int(cands[len(cands) // 2])
            away = -(1.0 if foot == 0 else -1.0) * MAX_REACH * lateral[c]
            miss, touched = trial(reach_offset(c, away, sw), -1, end, horizon)
            if not touched and float(np.abs(miss).sum()) < best[0]:
                best = (float(np.abs(miss).sum()), c, away, 0.0, miss, False)
                skipped.append(j)
        _, c, need, sweep, miss, hit = best
        offset = reach_offset(c, need, sw, sweep if hit else 0.0)
        comp[t:] = _f32(_apply_reach(kp[t:], leg, offset[t:]))
        pos[t:], quat[t:] = body.poses(comp[t:], heading[t:])
        if hit:
            planned.append(c)
            sweeps.append(sweep)
    run_to(T - 1)
    frames = sorted({f for f, _ in contacts})
    touches = [f for f in frames if f - 1 not in frames]
    info = {
        "loop": loop,
        "kick_foot": ["left", "right"][foot],
        "touch_every": touch_every,
        "planned": planned,
        "skipped_strides": len(skipped),
        "touches": touches,
        "max_sweep_m_s": float(max(np.abs(sweeps), default=0.0)),
        "lift_m": lift,
        "max_reach_m": float(np.linalg.norm(offset[:, :2], axis=1).max()),
        "runner_speed_m_s": runner,
        "strides": len(swings[foot]),
        "ball_travel_ratio": float(
            np.linalg.norm(track[-1, :2] - track[0, :2])
            / np.linalg.norm(root[-1, :2] - root[0, :2])
        ),
    }
    return Dribble(
        comp.astype(np.float32), track.astype(np.float32), touches, planned, r, fps, state0, info
    )


def ball_distance(d: Dribble) -> np.ndarray:
    """``[T]`` ground distance (m) from the character's root to the ball."""
    root = root_trajectory(d.keypoints3d.astype(np.float64), "coco17")
    return np.linalg.norm((d.ball - root)[:, :2], axis=1)


def replay_error(d: Dribble) -> tuple[float, float]:
    """Mean and max distance (m) between ``d``'s ball and the ball that a kinematic copy of
    ``d``'s body (rebuilt from its keypoints) moves in MuJoCo from ``d.ball_state0``."""
    kp = np.asarray(d.keypoints3d, dtype=np.float64)
    heading = _heading(root_trajectory(kp, "coco17"), d.fps)
    track, _ = simulate(LegBody(kp, d.fps), kp, heading, d.ball_state0)
    err = np.linalg.norm(track - np.asarray(d.ball, dtype=np.float64), axis=1)
    return float(err.mean()), float(err.max())


def dribble_clip(mocap, *, views: int = 1, seed: int = 0, seconds: float = 10.0,
                 camera: str = "tracking", touch_every: int = 1):  # fmt: skip
    """A synthetic dribble clip from a running human clip, projected through ``views``
    virtual cameras (what ``mimic2dm data dribble`` writes).

    Returns:
        ``(Motion2D, Dribble)``: the clip (body keypoints, ball centre and box; ``meta``
        holds the settings, touches and replay error) and the composed dribble.
    """
    from mimic2dm.characters.clips import load_mocap_keypoints
    from mimic2dm.motion.synth import synthesize_views

    clip = load_mocap_keypoints(mocap)
    d = compose_dribble(clip.keypoints, clip.keypoint_set, clip.fps, seconds=seconds,
                        touch_every=touch_every)  # fmt: skip
    mean, worst = replay_error(d)
    d.info["replay_error_m"] = {"mean": mean, "max": worst}
    if mean > REPLAY_BOUND[0] or worst > REPLAY_BOUND[1]:
        raise ValueError(
            f"dribble: the replayed ball strays {mean:.3f} m on average and {worst:.3f} m at most "
            f"from the composed path (bound {REPLAY_BOUND[0]:g} / {REPLAY_BOUND[1]:g} m): "
            "the clip is not written"
        )
    meta = {"source": str(mocap), "character": clip.character, "source_fps": clip.fps,
            "dribble": {**d.info, "ball_radius": d.radius, "ball_state0": d.ball_state0.tolist(),
                        "generator": __name__}}  # fmt: skip
    m = synthesize_views(d.keypoints3d, clip.keypoint_set, d.fps, num_views=views, camera=camera,
                         seed=seed, object3d=d.ball, object_radius=d.radius,
                         labels={"skill": "dribble"}, meta=meta)  # fmt: skip
    return m, d
