"""The one fake engine of the tests: a kinematic backend for unit tests of the engine base
class and of task logic (never proof that the system works).

Joints jump to their PD targets; the root stays where it was put; keypoints and body
poses come from the character's exact forward kinematics, so projections react to actions.
"""

from __future__ import annotations

import numpy as np
import torch

from mimic2dm.engines.base import Engine, EngineLayout, SimState


class KinematicEngine(Engine):
    def _build(self) -> EngineLayout:
        spec = self.character
        self.closed = False
        self.targets = torch.zeros(self.num_envs, len(spec.dof_names))
        self.nan_envs = torch.zeros(self.num_envs, dtype=torch.bool)
        return EngineLayout(
            spec.dof_names, spec.body_names, spec.keypoint_names, spec.contact_bodies, self.objects
        )

    def _default_state(self) -> SimState:
        pose, j, o = self.character.default_pose, len(self.character.dof_names), len(self.objects)
        t = lambda x: torch.tensor(np.array(x), dtype=torch.float32)[None]  # noqa: E731
        return SimState(
            root_pos=t(pose.root_pos), root_rot=t(pose.root_quat), root_lin_vel=torch.zeros(1, 3),
            root_ang_vel=torch.zeros(1, 3), dof_pos=t(pose.dof_pos), dof_vel=torch.zeros(1, j),
            object_pos=torch.zeros(1, o, 3), object_rot=torch.tensor([0.0, 0, 0, 1]).expand(1, o, 4).clone(),
            object_lin_vel=torch.zeros(1, o, 3), object_ang_vel=torch.zeros(1, o, 3),
        )  # fmt: skip

    def _set_pd_targets(self, targets):
        lo, hi = self.get_dof_limits()
        self.targets = torch.maximum(torch.minimum(targets, hi), lo)

    def _step(self):
        self.state.dof_vel = (self.targets - self.state.dof_pos) / self.control_dt
        self.state.dof_pos = self.targets.clone()
        self.state.root_pos[self.nan_envs] = float("nan")

    def _fk(self):
        s = self.state
        return self.character.tree.fk(s.root_pos.double(), s.root_rot.double(), s.dof_pos.double())

    def _get_state(self):
        return self.state.clone()

    def _get_body_poses(self):
        pos, rot = self._fk()
        return pos.float(), rot.float()

    def _get_keypoints(self):
        s = self.state
        kp = self.character.tree.keypoints(
            self.character.site_offsets,
            s.root_pos.double(),
            s.root_rot.double(),
            s.dof_pos.double(),
        )
        return kp.float()

    def _get_contacts(self):
        return torch.ones(self.num_envs, self.num_contacts)

    def _reset(self, env_ids, state):
        if not hasattr(self, "state"):
            self.state = state.clone() if state.num_envs == self.num_envs else self.default_state()
        for name, value in vars(state).items():
            getattr(self.state, name)[env_ids] = value
        self.targets[env_ids] = state.dof_pos
        self.nan_envs[env_ids] = False

    def _nonfinite_envs(self):
        return ~(
            torch.isfinite(self.state.dof_pos).all(1) & torch.isfinite(self.state.root_pos).all(1)
        )

    def _close(self):
        self.closed = True
