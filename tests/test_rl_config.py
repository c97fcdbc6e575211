"""The one conversion of the Hydra config: EnvSpec and rl-games params, with named errors."""

import pytest

from mimic2dm.rl.config import env_spec_from_cfg, ray_config, rl_games_params, train_config
from mimic2dm.train import compose_config

LAYOUT = {"prop": 140, "view": 140, "views": 1}


def test_env_spec_from_the_config_groups():
    cfg = compose_config(
        ["character=dog", "task.tau_term=0.2", "engine.control_hz=15", "task.view_mode=virtual"]
    )
    spec = env_spec_from_cfg(cfg, ["a.npz"])
    assert spec.character == "dog" and spec.data == ("a.npz",) and spec.control_hz == 15.0
    assert spec.task.tau_term == 0.2 and spec.task.fall_height == cfg.character.fall_height
    assert spec.view_mode == "virtual" and isinstance(spec.camera.focal_range, tuple)
    assert spec.engine_kwargs == {"num_threads": 1}


def test_rl_games_params_and_defaults():
    cfg = compose_config([])
    tc = train_config(cfg)
    p = rl_games_params(tc, LAYOUT, 64, seed=3, run_dir="/tmp/r")
    c = p["config"]
    assert p["algo"]["name"] == "mimic2dm_ppo" and p["network"]["obs_layout"] == LAYOUT
    assert c["num_actors"] == 64 and c["torch_compile"] is False and c["normalize_input"] is False
    assert (c["gamma"], c["tau"], c["e_clip"]) == (0.99, 0.95, 0.2) and c["save_frequency"] == 0
    assert not ray_config(cfg).enabled and ray_config(compose_config(["ray=local"])).enabled


def test_bad_keys_and_sizes_are_named():
    with pytest.raises(ValueError, match="'train'"):
        train_config(compose_config(["+train.learning_rat=1e-3"]))
    with pytest.raises(ValueError, match="'task': unknown keys \\['tau_trm'\\]"):
        env_spec_from_cfg(compose_config(["+task.tau_trm=0.2"]), ["a.npz"])
    with pytest.raises(ValueError, match="minibatch_size=500 must divide"):
        rl_games_params(
            train_config(compose_config(["train.minibatch_size=500"])), LAYOUT, 64, 0, "/tmp/r"
        )
