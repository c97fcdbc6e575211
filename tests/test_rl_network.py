"""The view-aggregation network as rl-games builds it: shapes, any number of views, normalisers."""

import pytest
import torch
from rl_games.algos_torch import model_builder

from mimic2dm.rl.config import NETWORK_NAME, NetworkConfig, network_params
from mimic2dm.rl.network import RunningNorm, split_views
from mimic2dm.rl.policy import build_model

LAYOUT = {"prop": 11, "view": 7, "views": 1}
A = 5


def make(**kw):
    torch.manual_seed(0)
    params = network_params(NetworkConfig(encoder_units=[32], head_units=[16, 16], **kw), LAYOUT)
    return build_model(params, LAYOUT["prop"] + LAYOUT["view"], A, normalize_value=True)


def obs(batch: int, views: int) -> torch.Tensor:
    return torch.randn(batch, LAYOUT["prop"] + views * LAYOUT["view"])


def test_registered_with_rl_games():
    assert NETWORK_NAME in model_builder.NETWORK_REGISTRY


def test_shapes_of_rl_games_forward_train_and_eval():
    model = make()
    x = obs(6, 1)
    model.eval()
    res = model({"is_train": False, "obs": x.clone(), "prev_actions": None, "rnn_states": None})
    assert (
        res["actions"].shape == (6, A)
        and res["mus"].shape == (6, A)
        and res["values"].shape == (6, 1)
    )
    assert res["neglogpacs"].shape == (6,)
    model.train()
    res = model({"is_train": True, "obs": x.clone(), "prev_actions": torch.zeros(6, A)})
    assert (
        res["prev_neglogp"].shape == (6,)
        and res["values"].shape == (6, 1)
        and res["sigmas"].shape == (6, A)
    )


def test_policy_trained_with_one_view_runs_with_two_zero_shot():
    net = make().a2c_network
    x1 = obs(4, 1)
    mu1, logstd1, v1, _ = net({"obs": x1})
    # two identical views aggregate to the same features as one
    x2 = torch.cat([x1, x1[:, LAYOUT["prop"] :]], dim=1)
    mu2, logstd2, v2, _ = net({"obs": x2})
    assert (
        mu2.shape == (4, A)
        and torch.allclose(mu1, mu2, atol=1e-6)
        and torch.allclose(v1, v2, atol=1e-6)
    )
    # a different second view changes the action: the views are really aggregated
    x3 = torch.cat([x1, torch.randn(4, LAYOUT["view"])], dim=1)
    mu3, _, _, _ = net({"obs": x3})
    assert not torch.allclose(mu1, mu3)
    assert net({"obs": obs(3, 4)})[0].shape == (3, A)


def test_bad_observation_width_is_named():
    with pytest.raises(ValueError, match="prop .11. \\+ V x view .7."):
        split_views(torch.zeros(2, 11 + 10), 11, 7)


def test_sigma_fixed_or_learned():
    assert not make(learn_sigma=False).a2c_network.logstd.requires_grad
    net = make(learn_sigma=True, sigma_init=0.3).a2c_network
    assert net.logstd.requires_grad and torch.allclose(net.logstd.exp(), torch.full((A,), 0.3))


def test_separate_or_shared_critic():
    shared = make(separate_critic=False).a2c_network
    sep = make(separate_critic=True).a2c_network
    assert shared.critic is None and sep.critic is not None
    assert sum(p.numel() for p in sep.parameters()) > sum(p.numel() for p in shared.parameters())


def test_running_norm_matches_batch_statistics_and_is_view_free():
    norm = RunningNorm(3)
    data = [torch.randn(50, 3) * 2 + 1, torch.randn(70, 3) * 2 + 1]
    for d in data:
        norm.update(d)
    allx = torch.cat(data).double()
    assert torch.allclose(norm.mean, allx.mean(0), atol=1e-3)
    assert torch.allclose(norm.var, allx.var(0, unbiased=False), atol=1e-3)
    net = make().a2c_network
    x = obs(64, 2)
    net.update_normalizers(x)
    assert net.view_norm.count > 127  # both views fed one shared statistic
    assert net({"obs": obs(2, 3)})[0].shape == (2, A)
