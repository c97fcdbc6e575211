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


def test_bf16_precision_runs_hidden_layers_in_bfloat16_and_keeps_float32_outputs():
    fp32, bf16 = make(precision="fp32").a2c_network, make(precision="bf16").a2c_network
    bf16.load_state_dict(fp32.state_dict())
    x = obs(64, 2)
    mu32, _, v32, _ = fp32({"obs": x})
    mu16, _, v16, _ = bf16({"obs": x})
    assert mu16.dtype == torch.float32 and v16.dtype == torch.float32
    # autocast is really on (bfloat16 rounding shows) and close to the float32 network
    assert not torch.equal(mu16, mu32) and not torch.equal(v16, v32)
    assert torch.allclose(mu16, mu32, atol=1e-3) and torch.allclose(v16, v32, atol=2e-2)
    (mu16.square().sum() + v16.square().sum()).backward()
    w = bf16.actor["encoder"][0].weight
    assert w.dtype == torch.float32 and w.grad is not None and w.grad.dtype == torch.float32
    assert w.grad.abs().sum() > 0


def test_precision_is_checked_and_auto_resolves_by_the_hardware(tmp_path):
    from mimic2dm.rl.config import fast_bf16, resolve_precision
    from mimic2dm.utils.validate import ConfigError

    with pytest.raises(ConfigError, match="train.network.precision"):
        NetworkConfig(precision="fp16")
    assert resolve_precision("fp32") == "fp32" and resolve_precision("bf16") == "bf16"
    assert resolve_precision("auto") == ("bf16" if fast_bf16() else "fp32")
    assert network_params(NetworkConfig(precision="auto"), LAYOUT)["precision"] in ("fp32", "bf16")
    with_bf16, without = tmp_path / "a", tmp_path / "b"
    with_bf16.write_text("flags\t\t: fpu avx512f avx512_bf16 avx512_vnni\n")
    without.write_text("flags\t\t: fpu avx2 avx512f\n")
    assert fast_bf16("cpu", with_bf16) and not fast_bf16("cpu", without)
    assert not fast_bf16("cpu", tmp_path / "missing")
    assert resolve_precision("auto", "mps") == "fp32"
    from mimic2dm.rl.network import ViewAggregationNetwork

    params = {**network_params(NetworkConfig(), LAYOUT), "precision": "auto"}
    with pytest.raises(ValueError, match="precision"):
        ViewAggregationNetwork(params, actions_num=A)  # the network takes resolved values only


# ----------------------------------------------------------------------------- critic-only columns
CRITIC = 3


def make_asymmetric():
    torch.manual_seed(0)
    layout = {**LAYOUT, "critic": CRITIC}
    params = network_params(NetworkConfig(encoder_units=[32], head_units=[16, 16]), layout)
    width = LAYOUT["prop"] + LAYOUT["view"] + CRITIC
    return build_model(params, width, A, normalize_value=True).a2c_network


def test_critic_columns_reach_the_value_and_never_the_actor():
    """``obs_layout["critic"]``: the last columns change the value, not the action mean; the
    actor gives the same mean with or without them, with any number of views."""
    net = make_asymmetric()
    x = obs(5, 1)
    c1, c2 = torch.randn(5, CRITIC), torch.randn(5, CRITIC)
    mu1, _, v1, _ = net({"obs": torch.cat([x, c1], 1)})
    mu2, _, v2, _ = net({"obs": torch.cat([x, c2], 1)})
    assert torch.equal(mu1, mu2) and not torch.allclose(v1, v2)
    assert torch.allclose(net.action_mean(x), mu1, atol=1e-6)  # the exported actor's input
    x2 = torch.cat([x, x[:, LAYOUT["prop"] :]], 1)  # two identical views
    mu3, _, v3, _ = net({"obs": torch.cat([x2, c1], 1)})
    assert torch.allclose(mu3, mu1, atol=1e-6) and torch.allclose(v3, v1, atol=1e-6)
    with pytest.raises(ValueError, match="critic needs its 3 columns"):
        net({"obs": x})


def test_critic_columns_are_normalised_with_their_own_statistics():
    net = make_asymmetric()
    x = torch.cat([obs(64, 1), 10.0 + 3.0 * torch.randn(64, CRITIC)], 1)
    net.update_normalizers(x)
    assert torch.allclose(net.critic_norm.mean.float(), x[:, -CRITIC:].mean(0), atol=1e-4)
    assert torch.allclose(net.prop_norm.mean.float(), x[:, : LAYOUT["prop"]].mean(0), atol=1e-4)


@pytest.mark.parametrize("critic, cfg, match", [
    (LAYOUT["view"] * 2, {}, "multiple of the view width"),
    (CRITIC, {"separate_critic": False}, "separate_critic"),
])  # fmt: skip
def test_critic_columns_that_cannot_work_are_refused(critic, cfg, match):
    params = network_params(NetworkConfig(**cfg), {**LAYOUT, "critic": critic})
    with pytest.raises(ValueError, match=match):
        build_model(params, LAYOUT["prop"] + LAYOUT["view"] + critic, A, normalize_value=True)
