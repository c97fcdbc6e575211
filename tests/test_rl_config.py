"""The one conversion of the Hydra config: TaskSpec and rl-games params, with named errors."""

from pathlib import Path

import numpy as np
import pytest
from mimic2dm.tasks.base import TaskSpec
from omegaconf import OmegaConf

from mimic2dm.app.runspec import parse_run, ray_config, task_spec_from_cfg, train_config
from mimic2dm.rl.config import minibatch_size, rl_games_params
from mimic2dm.train import compose_config
from mimic2dm.utils.validate import ConfigError

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
    assert spec.config["reward"]["scales"] == {
        "pos": 0.6,
        "vel": 0.1,
        "obj": 0.2,
        "reg": 0.1,
        "ori": 0.0,
        "contact": 0.0,
        "scale": 0.0,
        "foot_ball": 0.0,
    }
    # every key of the engine group reaches the backend unchanged
    assert spec.engine == dict(OmegaConf.to_container(cfg.engine, resolve=True))
    # plain data round-trips (what checkpoints store)
    assert TaskSpec.from_dict(spec.to_dict()) == spec


def test_tracking3d_baselines_share_the_2d_trackers_initial_state_defaults():
    """3D-GT and Sfv* start like Mimic2DM (docs/baselines.md): lifted out of the ground,
    failure-prioritised starts counted per learner iteration."""
    from mimic2dm.tasks.tracking3d.config import Tracking3DConfig

    cfg = compose_config(["task=tracking3d", "train.horizon_length=16"])
    two = compose_config([])
    spec = task_spec_from_cfg(cfg, ["a.npz"])
    assert spec.config["initial_ground"] is True is two.task.initial_ground
    asi = spec.config["asi"]
    assert asi["start_sampling"] == two.task.asi.start_sampling == "failure"
    assert asi["iteration_steps"] == 16
    for k in ("failure_mix", "failure_decay", "failure_lead"):
        assert asi[k] == two.task.asi[k]
    assert Tracking3DConfig().initial_ground  # the dataclass carries the shipped defaults


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
    with pytest.raises(ConfigError, match="^train.learning_rat=0.001: expected a known key"):
        train_config(compose_config(["+train.learning_rat=1e-3"]))
    with pytest.raises(ConfigError, match="^task.tau_trm=0.2: expected a known key"):
        task_spec_from_cfg(compose_config(["+task.tau_trm=0.2"]), ["a.npz"])
    with pytest.raises(ConfigError, match="task.reward.scales=\\['pso'\\]: expected terms among"):
        task_spec_from_cfg(compose_config(["+task.reward.scales.pso=1.0"]), ["a.npz"])
    with pytest.raises(
        ConfigError, match="task.name='jump': expected a registered task .*stand, tracking2d"
    ):
        task_spec_from_cfg(compose_config(["task.name=jump"]), [])
    with pytest.raises(
        ConfigError, match="train.minibatch_size=500: expected a divisor of .* = 2048"
    ):
        rl_games_params(
            train_config(compose_config(["train.minibatch_size=500"])), LAYOUT, 64, 0, "/tmp/r"
        )


def test_minibatch_larger_than_the_batch_is_clamped(caplog):
    tc = train_config(compose_config(["train.num_envs=8", "train.minibatch_size=512"]))  # 256 < 512
    with caplog.at_level("INFO", logger="mimic2dm.rl.config"):
        c = rl_games_params(tc, LAYOUT, 8, 0, "/tmp/r")["config"]
    assert c["minibatch_size"] == 256 and "using minibatches of 256" in caplog.text
    assert minibatch_size(tc, 64) == 512  # a batch of 2048 keeps the configured minibatch
    with pytest.raises(
        ConfigError, match="train.minibatch_size=512: expected a divisor of .* 32 x 24 = 768"
    ):
        minibatch_size(tc, 24)  # 768 is not a multiple of 512


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.learning_rate=-1", "train.learning_rate=-1.0: expected a number > 0"),
        ("train.gamma=2.0", "train.gamma=2.0: expected a number with 0 < x <= 1"),
        ("train.tau=-0.1", "train.tau=-0.1: expected a number with 0 <= x <= 1"),
        ("train.mini_epochs=0", "train.mini_epochs=0: expected an integer >= 1"),
        (
            "train.network.head_units=[32,0]",
            "train.network.head_units\\[1\\]=0: expected an integer >= 1",
        ),
        ("train.network.activation=relux", "expected one of relu, tanh"),
        ("train.learning_rate=fast", "train.learning_rate='fast': expected a valid value"),
        ("engine.physics_hz=0", "engine.physics_hz=0.0: expected a number > 0"),
        (
            "task.control_hz=45",
            "engine.physics_hz=60.0: expected a whole multiple .*control_hz=45",
        ),
        ("engine.num_threads=-1", "engine.num_threads=-1: expected an integer >= 0"),
        ("logger.log_every=0", "logger.log_every=0: expected an integer >= 1"),
        ("ray=local ray.num_actors=0", "ray.num_actors=0: expected an integer >= 1"),
        ("ray=local train.num_envs=7", "train.num_envs=7: expected a multiple of ray.num_actors=2"),
        ("task.num_views=0", "task.num_views=0: expected an integer >= 1"),
        ("task.asi.temperature=-1", "task.asi.temperature=-1.0: expected a number > 0"),
        ("task.reward.alpha_pos=0", "task.reward.alpha_pos=0.0: expected a number > 0"),
        (
            "task.view_mode=photo",
            "task.view_mode='photo': expected one of clip, virtual, mixed, auto",
        ),
        ("task.camera.focal_range=[900,100]", "task.camera.focal_range\\[1\\]=100.0: expected"),
        ("data=files", "data.clips=\\[\\]: expected at least one"),
    ],
)
def test_out_of_range_values_are_named_with_their_range(override, message):
    cfg = compose_config(override.split())
    with pytest.raises(ConfigError, match=message):
        parse_run(cfg)


def test_devices_that_do_not_exist_are_refused():
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="train.device='cuda': expected cpu .*no CUDA GPU"):
            parse_run(compose_config(["train.device=cuda"]))
    with pytest.raises(ConfigError, match="train.device='gpu0'"):
        parse_run(compose_config(["train.device=gpu0"]))
    assert parse_run(compose_config(["train.device=cpu"])).train.device == "cpu"


def test_a_plain_path_in_data_clips_is_the_same_as_a_file_entry(tmp_path):
    from rl_helpers import write_demo

    from mimic2dm.app.data import prepare_data

    clip = write_demo(tmp_path / "clip.npz", seconds=1.0)
    # as typed on the command line: mimic2dm-train data=files 'data.clips=[/abs/clip.npz]'
    plain = compose_config(["data=files", f"data.clips=[{clip},{{file: {clip}}}]"])
    parse_run(plain)
    assert prepare_data(plain.data, tmp_path / "run") == [str(clip.resolve())] * 2
    with pytest.raises(
        ConfigError, match="data.clips\\[0\\].file='/no/such.npz': expected an existing"
    ):
        parse_run(compose_config(["data=files", "data.clips=[/no/such.npz]"]))
    with pytest.raises(
        ConfigError, match="data.clips\\[1\\]=3: expected a 2D-motion file path or a mapping"
    ):
        parse_run(compose_config(["data=files", f"data.clips=[{clip},3]"]))
    with pytest.raises(
        ConfigError, match="data.clips\\[0\\].file=None: expected a 2D-motion file path"
    ):
        prepare_data({"clips": [{"make": {"kind": "demo"}}]}, tmp_path / "run")


def test_cmu_all_data_config_lists_the_three_shared_clips():
    """``conf/data/cmu_all.yaml`` (the all-CMU tracker of docs/control.md) composes with virtual
    tracking views and names walk, run and hop."""
    cfg = compose_config(["data=cmu_all", "task.view_mode=virtual", "task.camera_mode=tracking"])
    parse_run(cfg)
    mocap = [Path(c["make"]["mocap"]).name for c in cfg.data.clips]
    assert mocap == ["cmu_walk.npz", "cmu_run.npz", "cmu_hop.npz"]
    assert {c["make"]["kind"] for c in cfg.data.clips} == {"synth"}
    assert all(c["make"]["ground"] for c in cfg.data.clips)  # grounded like data=cmu_walk


def test_cmu_all_10s_loops_each_clip_to_ten_seconds():
    """``conf/data/cmu_all_10s.yaml`` (docs/control.md): the same three clips, looped to 10 s."""
    base = compose_config(["data=cmu_all"]).data.clips
    cfg = compose_config(
        ["data=cmu_all_10s", "task.view_mode=virtual", "task.camera_mode=tracking"]
    )
    parse_run(cfg)
    assert [c["make"]["mocap"] for c in cfg.data.clips] == [c["make"]["mocap"] for c in base]
    assert all(c["make"]["seconds"] == 10.0 and c["make"]["ground"] for c in cfg.data.clips)


def test_synth_recipes_label_clips_with_their_skill(tmp_path):
    """Clips made by `synth` recipes carry ``skill`` (the mocap stem without ``cmu_``), which
    `mimic2dm rollouts` copies into the two-view generator's data; a recipe's `labels` wins."""
    from generator_helpers import HAVE_MOCAP, MOCAP

    from mimic2dm.app.data import prepare_data
    from mimic2dm.motion.format import load_motion2d

    if not HAVE_MOCAP:
        pytest.skip(f"mocap clips not found in {MOCAP}")
    make = {
        "kind": "synth",
        "mocap": str(MOCAP / "cmu_hop.npz"),
        "views": 1,
        "camera": "static",
        "fps": 30.0,
    }
    paths = prepare_data({"clips": [{"file": "hop.npz", "make": make},
                                    {"file": "jump.npz", "make": {**make, "labels": {"skill": "jump"}}}]},
                         tmp_path / "run")  # fmt: skip
    assert [load_motion2d(p).labels for p in paths] == [{"skill": "hop"}, {"skill": "jump"}]


def test_synth_recipe_ground_lifts_the_clip(tmp_path):
    """``ground: true`` in a synth recipe lifts the 3D motion before projecting it (meta
    ``ground_lift_m``); without it the clip is the mocap as it is."""
    from generator_helpers import HAVE_MOCAP, MOCAP

    from mimic2dm.app.data import prepare_data
    from mimic2dm.motion.format import load_motion2d

    if not HAVE_MOCAP:
        pytest.skip(f"mocap clips not found in {MOCAP}")
    make = {"kind": "synth", "mocap": str(MOCAP / "cmu_walk.npz"), "views": 1, "fps": 30.0}
    plain, grounded = (load_motion2d(p) for p in prepare_data(
        {"clips": [{"file": "a.npz", "make": make}, {"file": "b.npz", "make": {**make, "ground": True}}]},
        tmp_path / "run"))  # fmt: skip
    lift = grounded.meta["ground_lift_m"]
    assert "ground_lift_m" not in plain.meta and 0.045 < lift < 0.06
    np.testing.assert_allclose(
        grounded.keypoints3d[..., 2], plain.keypoints3d[..., 2] + lift, atol=1e-5
    )
    # the virtual camera frames the motion, so it rises with it: the 2D keypoints stay where
    # they were and the floor moves down in the image by the lift
    centre = lambda m: -np.einsum("vfji,vfj->vfi", m.camera_R, m.camera_t)  # noqa: E731
    np.testing.assert_allclose(centre(grounded)[..., 2], centre(plain)[..., 2] + lift, atol=1e-4)
    np.testing.assert_allclose(grounded.camera_R, plain.camera_R, atol=1e-6)
    np.testing.assert_allclose(grounded.keypoints, plain.keypoints, atol=0.01)


def test_env_groups_must_divide_the_envs():
    with pytest.raises(
        ConfigError, match=r"train.env_groups=3: expected a divisor of train.num_envs=256"
    ):
        parse_run(compose_config(["train.env_groups=3"]))
    tc = parse_run(compose_config(["train.env_groups=2"])).train
    assert tc.env_groups == 2
