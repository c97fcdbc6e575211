"""A trained policy of any task: ``load_policy(checkpoint).act(obs)``.

The checkpoint carries the network's params, the resolved config and the ``TaskSpec``
the run trained on as plain data (``meta["task_spec"]``), so evaluation can rebuild both
the network and the envs (with any number of views: the network is view-agnostic).
Its layout has a version, :data:`CHECKPOINT_VERSION`, stored as ``meta["format_version"]``;
a checkpoint of another version is refused (``scripts/convert_legacy_checkpoint.py``
converts those of version 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from rl_games.algos_torch.model_builder import ModelBuilder

import mimic2dm.rl.network  # noqa: F401 - registers the network builder
from mimic2dm.rl.config import MODEL_NAME
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import make_task
from mimic2dm.tasks.stats import StepStats
from mimic2dm.utils.checkpoint import load_checkpoint

CHECKPOINT_VERSION = 2
"""Layout of tracker checkpoints, written into every checkpoint as ``meta["format_version"]``.

Version 2: the run's ``TaskSpec`` as plain data in ``meta["task_spec"]`` and the training
time in ``train_seconds``. Version 1 (version at the top level) stored a pickled tracking
``EnvSpec`` in ``meta["env_spec"]``.
"""


def checkpoint_version(ck: dict) -> int | None:
    """The layout version of a loaded checkpoint (version 1 kept it at the top level)."""
    meta = ck.get("meta") or {}
    return meta.get("format_version", ck.get("version"))


def check_checkpoint_version(ck: dict, path: str | Path) -> None:
    """Refuse a checkpoint whose layout is not :data:`CHECKPOINT_VERSION`.

    Raises:
        ValueError: naming the file, the version found and the one expected.
    """
    found = checkpoint_version(ck)
    if found is None:
        raise ValueError(
            f"{path}: not a Mimic2DM tracker checkpoint (no format version, expected {CHECKPOINT_VERSION})"
        )
    if found != CHECKPOINT_VERSION:
        hint = " (convert it with scripts/convert_legacy_checkpoint.py)" if found == 1 else ""
        raise ValueError(
            f"{path}: checkpoint format version {found}, expected {CHECKPOINT_VERSION}{hint}"
        )


def build_model(
    network_params: dict, obs_dim: int, action_dim: int, normalize_value: bool
) -> torch.nn.Module:
    """The rl-games model (``continuous_a2c_logstd`` around our network) of a run."""
    model = ModelBuilder().load({"model": {"name": MODEL_NAME}, "network": dict(network_params)})
    return model.build({
        "actions_num": action_dim, "input_shape": (obs_dim,), "num_seqs": 1, "value_size": 1,
        "normalize_value": normalize_value, "normalize_input": False,
    })  # fmt: skip


@dataclass
class Policy:
    """A trained policy.

    Attributes:
        model: the rl-games model (network, normalisers, value normaliser).
        env_spec: the ``TaskSpec`` of the training run.
        config: the run's resolved config (plain dict).
        epoch, frame: training progress at the checkpoint.
        meta: network params and sizes (to build the same network again).
    """

    model: torch.nn.Module
    env_spec: TaskSpec
    config: dict
    epoch: int
    frame: int
    meta: dict = field(default_factory=dict)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Actions ``[N, A]`` in [-1, 1] for observations ``[N, prop + V * view]`` (any ``V >= 1``).

        Args:
            obs: raw task observations (normalisation is done here).
            deterministic: the Gaussian's mean; otherwise a sample (torch's global RNG).
        """
        self.model.eval()
        net = self.model.a2c_network
        mu = net.action_mean(obs.float())  # the actor only: observations may omit critic columns
        a = mu if deterministic else mu + torch.exp(net.logstd.expand_as(mu)) * torch.randn_like(mu)
        return a.clamp(-1.0, 1.0)

    @torch.no_grad()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Critic values ``[N]`` (denormalised)."""
        self.model.eval()
        _, _, v, _ = self.model.a2c_network({"obs": obs.float()})
        return self.model.denorm_value(v)[:, 0]


def load_policy(checkpoint: str | Path) -> Policy:
    """Load a policy checkpoint (``RUN_DIR/checkpoints/{last,best}.pt`` or a run dir).

    Raises:
        ValueError: the file is not a tracker checkpoint, or one of another format version.
    """
    path = Path(checkpoint)
    if path.is_dir():
        path = path / "checkpoints" / "last.pt"
    ck = load_checkpoint(path)
    meta = ck.get("meta") or {}
    if "network" not in meta:
        raise ValueError(f"{path}: not a Mimic2DM tracker checkpoint (no network description)")
    check_checkpoint_version(ck, path)
    model = build_model(
        meta["network"], meta["obs_dim"], meta["action_dim"], meta["normalize_value"]
    )
    model.load_state_dict(ck["model"])
    model.eval()
    sizes = {k: meta[k] for k in ("network", "obs_dim", "action_dim", "normalize_value")}
    return Policy(
        model,
        TaskSpec.from_dict(meta["task_spec"]),
        meta.get("config", {}),
        int(ck.get("epoch", 0)),
        int(ck.get("frame", 0)),
        sizes,
    )


def untrained_policy(policy: Policy, seed: int = 0) -> Policy:
    """A freshly initialised network of ``policy``'s run: the baseline a trained policy must beat."""
    torch.manual_seed(seed)
    m = policy.meta
    model = build_model(m["network"], m["obs_dim"], m["action_dim"], m["normalize_value"])
    return Policy(model.eval(), policy.env_spec, policy.config, 0, 0, dict(m))


@torch.no_grad()
def rollout_stats(
    policy: Policy | None,
    spec: TaskSpec,
    num_envs: int = 32,
    steps: int = 150,
    seed: int = 0,
    early_termination: bool = True,
) -> dict[str, float]:
    """Run a policy (or zero actions when ``policy`` is None: hold the default pose) in fresh
    envs of ``spec`` and report what training reports, without exploration noise.

    Starts come from the task's initial buffers (no critic scores), so two policies
    evaluated with the same arguments start from the same states.

    Args:
        policy: the policy (deterministic actions), or None.
        spec: the task spec (e.g. ``policy.env_spec``).
        num_envs, steps: batch size and control steps.
        seed: task seed.
        early_termination: as in training; False sets the task config's
            ``early_termination`` (tasks that have it) to measure whole episodes.

    Returns:
        ``episode_length`` (mean over ended episodes, unfinished ones counted at their
        current length), ``reward`` (mean per step), ``reward/<term>``, ``termination/<cause>``.
    """
    if not early_termination:
        spec = spec.with_config(early_termination=False)
    task = make_task(spec, num_envs, seed)
    obs = task.observe()
    stats = StepStats()
    running = torch.zeros(num_envs, dtype=torch.long, device=task.device)
    for _ in range(steps):
        act = policy.act(obs) if policy is not None else torch.zeros(num_envs, task.action_dim)
        r = task.step(act.to(task.device))
        stats.add(r)
        running = torch.where(r.done, 0, running + 1)
        obs = r.obs
    task.close()
    m = stats.metrics()
    # unfinished episodes count at their current length
    alive = running[running > 0].float()
    ended = m.get("episode/count", 0.0)
    length = (m.get("episode/length", 0.0) * ended + float(alive.sum())) / max(
        ended + alive.numel(), 1
    )
    out = {"episode_length": length, "reward": m["reward/total"]}
    out.update(
        {
            k: v
            for k, v in m.items()
            if k.startswith(("reward/", "termination/")) and k != "reward/total"
        }
    )
    return out
