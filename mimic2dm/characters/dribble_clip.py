"""A synthetic dribble: a looped running/walking clip with a simulated size-5 ball.

No dribbling footage or mocap is reachable here, so this is a stand-in for real dribbling
clips (``mimic2dm extract`` already detects the ball in a user's own videos):

1. the clip's gait cycle is looped to ``seconds`` (:mod:`mimic2dm.motion.looping`);
2. the kicks are planned at touchdowns of one foot (a contact every gait cycle): at each
   kick the ball lies :data:`BALL_AHEAD` m ahead of that foot along the heading;
3. the ball (``objects.py``: radius, mass, friction, shell inertia) rolls on a
   ground plane in MuJoCo. The feet are kinematic: a kick sets the ball's velocity
   (rolling, no slip) to the speed that brings it, under MuJoCo's contact and rolling
   friction, to the next kick point at the next kick frame (found by bisection on
   copies of the simulation). Between kicks the ball moves only under the simulation.

The body and the ball are then projected together through the virtual cameras of
``data synth`` (:func:`mimic2dm.motion.synth.synthesize_views`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mimic2dm.motion.keypoint_sets import load_keypoint_set
from mimic2dm.motion.looping import loop_keypoints
from mimic2dm.motion.synth import root_trajectory

BALL_AHEAD = 0.3
"""Ball centre ahead of the kicking ankle at a kick (m, ground plane): ankle-to-toe plus radius."""
CONTACT_HEIGHT = 0.05
"""A foot is on the ground when its ankle is within this height (m) of its lowest point."""
SIM_DT = 1.0 / 600.0
"""MuJoCo time step (s); each clip frame is a whole number of steps."""
MAX_KICK_SPEED = 15.0
"""Upper bound (m/s) of the kick speed search: a hard shot."""
HEADING_WINDOW_S = 0.5
"""The heading is the root velocity averaged over this window (s): steady through strides."""
MIN_STEP_S = 0.3
"""Two landings of one foot closer than this (s) are one step."""


@dataclass
class Dribble:
    """A composed dribble.

    Attributes:
        keypoints3d: ``[T, K, 3]`` looped body keypoints (metres, z-up).
        ball: ``[T, 3]`` simulated ball centre.
        kicks: frames of the kicks.
        radius: ball radius (m).
        info: loop and kick settings (for the clip's ``meta``).
    """

    keypoints3d: np.ndarray
    ball: np.ndarray
    kicks: list[int]
    radius: float
    info: dict


def _scene_xml(dt: float) -> str:
    from mimic2dm.characters.objects import make_ball

    spec = make_ball()
    head, sep, tail = spec.body_xml.partition(">")  # the opening <body name="ball"> tag
    body = f'{head} pos="0 0 {spec.radius!r}"{sep}<freejoint name="ball_root"/>{tail}'
    return (
        f'<mujoco model="dribble"><option timestep="{dt!r}"/><worldbody>'
        '<geom name="ground" type="plane" size="0 0 1" condim="6" friction="1 0.005 0.0001"/>'
        f"{body}</worldbody></mujoco>"
    )


def _touchdowns(z: np.ndarray, min_gap: int) -> list[int]:
    """Frames where a foot with ankle height ``z [T]`` lands (first frame of each contact);
    a landing within ``min_gap`` frames of the previous one is the same step (mocap jitter)."""
    on = z <= z.min() + CONTACT_HEIGHT
    out: list[int] = []
    for k in np.flatnonzero(on[1:] & ~on[:-1]) + 1:
        if not out or k - out[-1] >= min_gap:
            out.append(int(k))
    return out


def _heading(root: np.ndarray, fps: float) -> np.ndarray:
    """``[T, 2]`` unit ground heading: the root velocity averaged over :data:`HEADING_WINDOW_S`."""
    w = max(1, int(round(HEADING_WINDOW_S * fps)))
    idx = np.arange(root.shape[0])
    d = root[np.minimum(idx + w, len(idx) - 1), :2] - root[np.maximum(idx - w, 0), :2]
    n = np.linalg.norm(d, axis=1, keepdims=True)
    if (n < 1e-6).any():
        raise ValueError(
            "compose_dribble: the clip does not travel (a dribble needs a walk or a run)"
        )
    return d / n


class _Ball:
    """The ball in MuJoCo: set a rolling velocity, advance whole clip frames."""

    def __init__(self, fps: float):
        import mujoco

        self.mj = mujoco
        self.model = mujoco.MjModel.from_xml_string(_scene_xml(SIM_DT))
        self.data = mujoco.MjData(self.model)
        self.radius = float(self.model.geom_size[self.model.geom("ball_geom").id][0])
        self.substeps = max(1, int(round(1.0 / (fps * SIM_DT))))

    def place(self, xy: np.ndarray) -> None:
        self.data.qpos[:] = [xy[0], xy[1], self.radius, 1.0, 0.0, 0.0, 0.0]
        self.data.qvel[:] = 0.0
        self.mj.mj_forward(self.model, self.data)

    def kick(self, v: np.ndarray) -> None:
        """Ground velocity ``v [2]`` with the spin of rolling without slip (w = z x v / r).

        A free joint's angular velocity is in the body's own frame: the world spin is rotated
        into it (set as world, a ball that has rolled before spins about a tilted axis and curves).
        """
        R = np.empty(9)
        self.mj.mju_quat2Mat(R, self.data.qpos[3:7])
        w = R.reshape(3, 3).T @ np.array([-v[1] / self.radius, v[0] / self.radius, 0.0])
        self.data.qvel[:] = [v[0], v[1], 0.0, *w]

    def step_frames(self, n: int) -> np.ndarray:
        """Advance ``n`` frames; ``[n, 3]`` positions at their ends."""
        out = np.empty((n, 3))
        for i in range(n):
            self.mj.mj_step(self.model, self.data, nstep=self.substeps)
            out[i] = self.data.qpos[:3]
        return out

    def save(self) -> tuple[np.ndarray, np.ndarray]:
        return self.data.qpos.copy(), self.data.qvel.copy()

    def load(self, state: tuple[np.ndarray, np.ndarray]) -> None:
        self.data.qpos[:], self.data.qvel[:] = state
        self.data.time = 0.0
        self.mj.mj_forward(self.model, self.data)

    def aim(self, target: np.ndarray, frames: int) -> np.ndarray:
        """Kick velocity ``[2]`` that lands the ball on ``target [2]`` after ``frames`` frames."""
        start = self.save()
        d = target - start[0][:2]
        dist = float(np.linalg.norm(d))
        if dist < 1e-6:
            return np.zeros(2)
        u = d / dist
        lo, hi = 0.0, MAX_KICK_SPEED
        for _ in range(20):  # the distance rolled grows with the kick speed (15 m/s / 2^20 ~ 1e-5)
            mid = 0.5 * (lo + hi)
            self.load(start)
            self.kick(mid * u)
            self.mj.mj_step(self.model, self.data, nstep=frames * self.substeps)
            end = self.data.qpos[:2]
            lo, hi = (mid, hi) if float((end - start[0][:2]) @ u) < dist else (lo, mid)
        self.load(start)
        return 0.5 * (lo + hi) * u


def compose_dribble(
    keypoints3d: np.ndarray, keypoint_set: str, fps: float, *, seconds: float = 10.0
) -> Dribble:
    """Loop a running or walking clip and dribble a simulated ball ahead of it.

    Args:
        keypoints3d: ``[T, K, 3]`` world keypoints of a human clip (``coco17``).
        keypoint_set: must be ``coco17`` (ankles drive the kicks).
        fps: frame rate.
        seconds: length of the dribble.

    Returns:
        The :class:`Dribble` (body, ball, kick frames).
    """
    if keypoint_set != "coco17":
        raise ValueError(f"compose_dribble: needs a human coco17 clip, got {keypoint_set!r}")
    kp, _, loop = loop_keypoints(keypoints3d, keypoint_set, fps, seconds=seconds)
    kp = kp.astype(np.float64)
    kset = load_keypoint_set(keypoint_set)
    ankles = [kset.index("left_ankle"), kset.index("right_ankle")]
    heading = _heading(root_trajectory(kp, keypoint_set), fps)
    # kick with the foot that lands most often (a touch every gait cycle)
    downs = [_touchdowns(kp[:, a, 2], int(round(MIN_STEP_S * fps))) for a in ankles]
    foot = int(np.argmax([len(d) for d in downs]))
    kicks = [k for k in downs[foot] if k > 0]
    if not kicks:
        raise ValueError("compose_dribble: no foot contact found in the clip")
    points = [kp[k, ankles[foot], :2] + BALL_AHEAD * heading[k] for k in kicks]
    ball = _Ball(fps)
    T = kp.shape[0]
    track = np.empty((T, 3))
    # the ball starts ahead of the leading foot (the kicking foot may be the rear one at frame 0,
    # which would put the ball between the feet), rolling to the first kick
    lead = max(ankles, key=lambda a: float((kp[0, a, :2] - kp[0, ankles, :2].mean(0)) @ heading[0]))
    ball.place(kp[0, lead, :2] + BALL_AHEAD * heading[0])
    track[0] = ball.data.qpos[:3]
    ball.kick(ball.aim(points[0], kicks[0]))
    track[1 : kicks[0] + 1] = ball.step_frames(kicks[0])
    for i, k in enumerate(kicks):
        nxt = kicks[i + 1] if i + 1 < len(kicks) else None
        # after the last touch: a final kick as long as the previous one, then it rolls out
        span = (nxt - k) if nxt is not None else (k - kicks[i - 1] if i else T - 1 - k)
        target = (
            points[i + 1]
            if nxt is not None
            else ball.data.qpos[:2] + (points[i] - points[i - 1] if i else 0.0)
        )
        ball.kick(ball.aim(np.asarray(target, dtype=np.float64), max(1, span)))
        end = nxt if nxt is not None else T - 1
        if end > k:
            track[k + 1 : end + 1] = ball.step_frames(end - k)
    info = {
        "loop": loop,
        "kicks": kicks,
        "kick_foot": ["left", "right"][foot],
        "ball_ahead_m": BALL_AHEAD,
    }
    return Dribble(kp.astype(np.float32), track.astype(np.float32), kicks, ball.radius, info)


def dribble_clip(
    mocap, *, views: int = 1, seed: int = 0, seconds: float = 10.0, camera: str = "tracking"
):
    """A synthetic dribble clip from a running or walking mocap file, projected through
    ``views`` virtual cameras (what ``mimic2dm data dribble`` writes).

    Returns:
        ``(Motion2D, Dribble)``: the clip (body keypoints, ball centre and box) and the
        composed dribble.
    """
    from mimic2dm.characters.clips import load_mocap_keypoints
    from mimic2dm.motion.synth import synthesize_views

    clip = load_mocap_keypoints(mocap)
    d = compose_dribble(clip.keypoints, clip.keypoint_set, clip.fps, seconds=seconds)
    meta = {"source": str(mocap), "character": clip.character, "source_fps": clip.fps,
            "dribble": {**d.info, "ball_radius": d.radius, "generator": __name__}}  # fmt: skip
    m = synthesize_views(d.keypoints3d, clip.keypoint_set, clip.fps, num_views=views, camera=camera,
                         seed=seed, object3d=d.ball, object_radius=d.radius,
                         labels={"skill": "dribble"}, meta=meta)  # fmt: skip
    return m, d


def ball_distance(d: Dribble) -> np.ndarray:
    """``[T]`` ground distance (m) from the character's root to the ball."""
    root = root_trajectory(d.keypoints3d.astype(np.float64), "coco17")
    return np.linalg.norm((d.ball - root)[:, :2], axis=1)
