"""View-aggregation actor-critic for rl-games (docs/design.md section 5).

An observation is ``[prop | view_1 | ... | view_V]`` (the task's ``obs_layout``). Each
view is encoded together with the proprioception, the encodings are averaged over views
and a head maps the mean to the action mean::

    mu = head(mean_v(encoder(prop, view_v)))

A layout with ``critic: C`` appends ``C`` columns that only the critic sees (an asymmetric
actor-critic: simulation state the policy is not given, e.g. the dribble's ball state):
``[prop | views | critic]``. The critic's tower encodes ``(prop, critic, view_v)``; the
actor's path ignores those columns and also accepts observations without them (an
exported policy's input).

With ``encoder_units=[512]`` and ``head_units=[256, 256]`` this is the paper's
512-256-256 MLP when ``V = 1``. Nothing depends on ``V``: a policy trained with one view
runs with two or more zero-shot. Observations are normalised inside the network with
running statistics of the proprioception and of the views (shared by all views, so they
too are ``V``-free); the learner updates them once per epoch
(:meth:`ViewAggregationNetwork.update_normalizers`).

With ``precision: bf16`` the hidden layers of both towers run under ``torch.autocast``
in bfloat16 (3x faster matrix products on CPUs with AVX512-BF16 or AMX, and on GPUs); the
normalisers, the view mean and the output layers (action mean, value) stay float32, so the
action mean and the log-probabilities PPO compares keep float32 resolution. The weights,
their gradients and the optimiser state are float32 either way (docs/training.md "Network", precision).
"""

from __future__ import annotations

import math

import torch
from rl_games.algos_torch import model_builder
from rl_games.algos_torch.network_builder import NetworkBuilder
from torch import nn

from mimic2dm.rl.config import NETWORK_NAME


class RunningNorm(nn.Module):
    """Running mean / variance of features ``[..., D]`` (merged batch statistics).

    Args:
        dim: feature size ``D``.
        clip: normalised values are clipped to ``[-clip, clip]``.
    """

    def __init__(self, dim: int, clip: float = 5.0):
        super().__init__()
        self.clip = clip
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``x [M, D]`` into the statistics."""
        x = x.reshape(-1, x.shape[-1]).double()
        m, n = x.mean(0), float(x.shape[0])
        v = x.var(0, unbiased=False)
        total = self.count + n
        delta = m - self.mean
        self.mean += delta * n / total
        self.var.copy_((self.var * self.count + v * n + delta**2 * self.count * n / total) / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised ``x [..., D]`` (float32)."""
        y = (x - self.mean.float()) / torch.sqrt(self.var.float() + 1e-5)
        return y.clamp(-self.clip, self.clip)


def split_views(obs: torch.Tensor, prop: int, view: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``obs [B, prop + V * view]`` into ``prop [B, prop]`` and ``views [B, V, view]``.

    Raises:
        ValueError: the width is not ``prop + V * view`` for a whole ``V >= 1``.
    """
    extra = obs.shape[-1] - prop
    if extra <= 0 or extra % view:
        raise ValueError(
            f"observation width {obs.shape[-1]} is not prop ({prop}) + V x view ({view}) for a whole V >= 1"
        )
    return obs[:, :prop], obs[:, prop:].reshape(obs.shape[0], extra // view, view)


class ViewAggregationNetwork(NetworkBuilder.BaseNetwork):
    """rl-games a2c network: returns ``(mu [B, A], logstd [B, A], value [B, 1], None)``.

    Args:
        params: the ``network`` params (see :class:`mimic2dm.rl.config.NetworkConfig`,
            plus ``obs_layout``).
        actions_num: action size ``A``.
        value_size: value outputs (1).
    """

    def __init__(self, params: dict, actions_num: int, value_size: int = 1, **kwargs):
        super().__init__()
        layout = params["obs_layout"]
        self.prop_dim, self.view_dim = int(layout["prop"]), int(layout["view"])
        self.train_views = int(layout["views"])
        self.normalize_input = bool(params.get("normalize_input", True))
        precision = str(params.get("precision", "fp32"))
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"network precision {precision!r}: expected 'fp32' or 'bf16'")
        self.bf16 = precision == "bf16"
        clip = float(params.get("obs_clip", 5.0))
        self.prop_norm = RunningNorm(self.prop_dim, clip)
        self.view_norm = RunningNorm(self.view_dim, clip)
        self.critic_dim = int(layout.get("critic", 0))
        if self.critic_dim and self.critic_dim % self.view_dim == 0:
            raise ValueError(f"obs_layout critic width {self.critic_dim} is a multiple of the view width "
                             f"{self.view_dim}: observations with and without it could not be told apart")  # fmt: skip
        if self.critic_dim:
            self.critic_norm = RunningNorm(self.critic_dim, clip)
        act = params.get("activation", "relu")
        enc, head = list(params["encoder_units"]), list(params["head_units"])
        self.actor = self._tower(enc, head, act)
        self.separate_critic = bool(params.get("separate_critic", True))
        if self.critic_dim and not self.separate_critic:
            raise ValueError("obs_layout 'critic' columns need network.separate_critic: true")
        self.critic = self._tower(enc, head, act, self.critic_dim) if self.separate_critic else None
        self.mu = nn.Linear(head[-1], actions_num)
        self.value = nn.Linear(head[-1], value_size)
        with torch.no_grad():
            self.mu.weight.mul_(float(params.get("mu_init_scale", 0.01)))
            self.mu.bias.zero_()
        logstd = math.log(float(params.get("sigma_init", 0.2)))
        self.logstd = nn.Parameter(
            torch.full((actions_num,), logstd), requires_grad=bool(params.get("learn_sigma", False))
        )

    def _mlp(self, sizes: list[int], act: str) -> nn.Sequential:
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:], strict=True):
            layers += [nn.Linear(a, b), self.activations_factory.create(act)]
        return nn.Sequential(*layers)

    def _tower(self, enc: list[int], head: list[int], act: str, extra: int = 0) -> nn.ModuleDict:
        return nn.ModuleDict({
            "encoder": self._mlp([self.prop_dim + extra + self.view_dim, *enc], act),
            "head": self._mlp([enc[-1], *head], act),
        })  # fmt: skip

    def _features(self, tower: nn.ModuleDict, x: torch.Tensor) -> torch.Tensor:
        """``x [B, V, prop + view]`` -> head features ``[B, H]`` (mean over views), float32."""
        if not self.bf16:
            return tower["head"](tower["encoder"](x).mean(dim=1))
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            h = tower["head"](tower["encoder"](x).float().mean(dim=1))
        return h.float()

    def split_critic(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``obs`` -> ``(obs [B, prop + V * view], critic columns [B, C] or None)``: the
        critic's columns are there when the width is not a whole number of views without them."""
        if self.critic_dim and (obs.shape[-1] - self.prop_dim) % self.view_dim:
            return obs[:, : -self.critic_dim], obs[:, -self.critic_dim :]
        return obs, None

    def normalized_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs [B, prop + V * view]`` -> per-view inputs ``[B, V, prop + view]``."""
        prop, views = split_views(obs, self.prop_dim, self.view_dim)
        if self.normalize_input:
            prop, views = self.prop_norm(prop), self.view_norm(views)
        return torch.cat([prop[:, None].expand(-1, views.shape[1], -1), views], dim=-1)

    @torch.no_grad()
    def update_normalizers(self, obs: torch.Tensor) -> None:
        """Fold a batch of raw observations ``[M, prop + V * view]`` into the running statistics."""
        if self.normalize_input:
            obs, extra = self.split_critic(obs)
            prop, views = split_views(obs, self.prop_dim, self.view_dim)
            self.prop_norm.update(prop)
            self.view_norm.update(views.reshape(-1, self.view_dim))
            if extra is not None:
                self.critic_norm.update(extra)

    def critic_inputs(self, x: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        """The critic tower's per-view inputs: ``x [B, V, prop + view]`` with the critic's
        normalised columns inserted after the proprioception."""
        if not self.critic_dim:
            return x
        if extra is None:
            raise ValueError(f"the critic needs its {self.critic_dim} columns (obs_layout 'critic') "
                             "after the views; this observation has none")  # fmt: skip
        c = self.critic_norm(extra) if self.normalize_input else extra
        c = c[:, None].expand(-1, x.shape[1], -1)
        return torch.cat([x[..., : self.prop_dim], c, x[..., self.prop_dim :]], dim=-1)

    def forward(self, obs_dict: dict):
        obs, extra = self.split_critic(obs_dict["obs"])
        x = self.normalized_inputs(obs)
        a = self._features(self.actor, x)
        mu = self.mu(a)
        c = self._features(self.critic, self.critic_inputs(x, extra)) if self.separate_critic else a
        value = self.value(c)
        return mu, self.logstd.expand_as(mu), value, None

    def action_mean(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's ``mu [B, A]`` of raw observations ``obs [B, prop + V * view]``, with or
        without the critic's columns (the :meth:`forward` value without the critic's tower)."""
        obs, _ = self.split_critic(obs)
        return self.mu(self._features(self.actor, self.normalized_inputs(obs)))

    def get_value_layer(self):
        return self.value


class ViewAggregationBuilder(NetworkBuilder):
    """rl-games network builder registered as :data:`mimic2dm.rl.config.NETWORK_NAME`."""

    def load(self, params: dict) -> None:
        self.params = params

    def build(self, name, **kwargs) -> ViewAggregationNetwork:
        return ViewAggregationNetwork(self.params, **kwargs)


model_builder.register_network(NETWORK_NAME, ViewAggregationBuilder)
