"""The one conversion of the Hydra config: TaskSpec and rl-games params, with named errors."""

import pytest
from mimic2dm.tasks.base import TaskSpec
from omegaconf import OmegaConf

from mimic2dm.rl.config import ray_config, rl_games_params, task_spec_from_cfg, train_config
from mimic2dm.train import compose_config

LAYOUT = {"prop": 140, "view": 140, "views": 1}


def test_task_spec_from_the_config_groups():
    cfg = compose_config(
        ["character=dog", "task.tau_term=0.2", "task.control_hz=15", "task.view_mode=virtual"]
    )
    spec = task_spec_from_cfg(cfg, ["a.npz"])
    assert spec.task == "tracking2d" and spec.character == "dog" and spec.data == ("a.npz",)
    assert spec.control_hz == 15.0
    # the task config as plain data; fall_height is a reference to the character's
    assert (
        spec.config["tau_term"] == 0.2
        and spec.config["fall_height"] == cfg.character.fall_height == 0.15
    )
    assert spec.config["view_mode"] == "virtual" and spec.config["camera"]["focal_range"] == [
        1000.0,
        1800.0,
    ]
    assert spec.config["reward"]["scales"] == {"pos": 0.6, "vel": 0.1, "obj": 0.2, "reg": 0.1}
    # every key of the engine group reaches the backend unchanged
    assert spec.engine == dict(OmegaConf.to_container(cfg.engine, resolve=True))
    # plain data round-trips (what checkpoints store)
    assert TaskSpec.from_dict(spec.to_dict()) == spec


def test_stand_task_needs_no_data():
    spec = task_spec_from_cfg(compose_config(["task=stand"]), ["a.npz"])
    assert spec.task == "stand" and spec.data == () and spec.config["scales"]["pose"] == 0.5


def test_rl_games_params_and_defaults():
    cfg = compose_config([])
    tc = train_config(cfg)
    p = rl_games_params(tc, LAYOUT, 64, seed=3, run_dir="/tmp/r")
    c = p["config"]
    assert p["algo"]["name"] == "mimic2dm_ppo" and p["network"]["obs_layout"] == LAYOUT
    assert c["num_actors"] == 64 and c["torch_compile"] is False and c["normalize_input"] is False
    assert (c["gamma"], c["tau"], c["e_clip"]) == (0.99, 0.95, 0.2) and c["save_frequency"] == 0
    assert not ray_config(cfg).enabled and ray_config(compose_config(["ray=local"])).enabled
    assert c["env_name"] == "mimic2dm_tracking2d"
    assert (
        rl_games_params(tc, LAYOUT, 64, 3, "/tmp/r", task="stand")["config"]["env_name"]
        == "mimic2dm_stand"
    )


def test_bad_keys_and_sizes_are_named():
    with pytest.raises(ValueError, match="'train'"):
        train_config(compose_config(["+train.learning_rat=1e-3"]))
    with pytest.raises(
        ValueError, match="conf/task/tracking2d.yaml: Key 'tau_trm' not in 'TrackingConfig'"
    ):
        task_spec_from_cfg(compose_config(["+task.tau_trm=0.2"]), ["a.npz"])
    with pytest.raises(ValueError, match="unknown terms \\['pso'\\]"):
        task_spec_from_cfg(compose_config(["+task.reward.scales.pso=1.0"]), ["a.npz"])
    with pytest.raises(KeyError, match="unknown task 'jump'; valid names: stand, tracking2d"):
        task_spec_from_cfg(compose_config(["task.name=jump"]), [])
    with pytest.raises(ValueError, match="minibatch_size=500 must divide"):
        rl_games_params(
            train_config(compose_config(["train.minibatch_size=500"])), LAYOUT, 64, 0, "/tmp/r"
        )
