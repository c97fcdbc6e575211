"""In-process and Ray-hosted vecenvs: shapes, auto-reset, ASI values, exact state, dead actors."""

import pytest
import ray
import torch
from mimic2dm.tasks.stats import StepStats
from rl_helpers import ensure_ray, spec_for, write_demo

from mimic2dm.rl.config import RayConfig
from mimic2dm.rl.envstate import states_equal
from mimic2dm.rl.vecenv import RayVecEnv, TaskVecEnv, make_vecenv, ray_temp_dir


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("clip") / "demo.npz")


@pytest.fixture(scope="module")
def ray_session():
    return ensure_ray()


def check_step(env, n: int, steps: int = 12):
    obs = env.reset()
    D = env.get_env_info()["observation_space"].shape[0]
    A = env.get_env_info()["action_space"].shape[0]
    assert obs.shape == (n, D) and obs.dtype == torch.float32
    done_total, total = 0, StepStats()
    for _ in range(steps):
        env.observe_values(torch.zeros(n))
        obs, rew, dones, infos = env.step(torch.zeros(n, A))
        assert (
            obs.shape == (n, D)
            and rew.shape == (n,)
            and dones.shape == (n,)
            and dones.dtype == torch.uint8
        )
        assert torch.isfinite(obs).all() and torch.isfinite(rew).all()
        assert (
            infos["time_outs"].shape == (n,)
            and not (infos["time_outs"].bool() & ~dones.bool()).any()
        )
        assert set(infos["stats"].terms) >= {"pos", "vel"} and infos["stats"].env_steps == n
        done_total += int(dones.sum())
        total.merge(infos["stats"])
    m = total.metrics()
    assert done_total > 0 and m["episode/count"] == done_total
    assert 1 <= m["episode/length"] <= 5  # auto-reset at max_episode_steps=5
    return obs


def test_in_process_vecenv_shapes_auto_reset_and_asi_values(clip):
    env = TaskVecEnv(spec_for(clip, max_episode_steps=5), 6, seed=0)
    assert env.obs_layout()["views"] == 1
    check_step(env, 6)
    before = env.task.asi.scores.clone()
    env.observe_values(torch.full((6,), 7.5))
    assert not torch.equal(
        before, env.task.asi.scores
    )  # the critic's values reached the ASI buffers
    assert (env.task.asi.scores == 7.5).any()
    env.close()


def test_in_process_env_state_continues_bit_for_bit(clip):
    spec = spec_for(clip)
    a, b = TaskVecEnv(spec, 5, seed=1), TaskVecEnv(spec, 5, seed=2)
    gen = torch.Generator().manual_seed(0)
    acts = [0.3 * torch.randn(5, a.task.action_dim, generator=gen) for _ in range(30)]
    a.reset()
    for t in range(15):
        a.observe_values(torch.randn(5, generator=gen))
        a.step(acts[t])
    snap = a.get_env_state()
    b.set_env_state(snap)
    assert states_equal(b.get_env_state(), snap)
    assert torch.equal(
        a.task.observe(), b.reset()
    )  # reset() right after a restore continues the episodes
    for t in range(15, 30):
        oa, ra, da, _ = a.step(acts[t])
        ob, rb, db, _ = b.step(acts[t])
        assert torch.equal(oa, ob) and torch.equal(ra, rb) and torch.equal(da, db)


def test_step_stats_merge_weights_terms_by_env_counts():
    """Two batches (1 env, 3 envs) merge into means over all envs, as one batch of 4 would."""
    a = StepStats(env_steps=1, terms={"pos": torch.tensor(1.0)}, reward=torch.tensor(1.0), episodes=torch.tensor(1),
                  length_sum=torch.tensor(3), return_sum=torch.tensor(1.0), causes={"fall": torch.tensor(1)})  # fmt: skip
    b = StepStats(env_steps=3, terms={"pos": 0.0}, reward=0.0, episodes=2.0, length_sum=4.0, return_sum=0.0,
                  causes={"fall": 1.0, "timeout": 1.0})  # fmt: skip
    m = StepStats().merge(a).merge(b.to_host()).metrics()
    assert m["reward/pos"] == pytest.approx(0.25) and m["reward/total"] == pytest.approx(0.25)
    assert m["episode/count"] == 3 and m["episode/length"] == pytest.approx(7 / 3)
    assert m["termination/fall"] == pytest.approx(2 / 3) and m[
        "termination/timeout"
    ] == pytest.approx(1 / 3)


def test_ray_temp_dir_stays_short(tmp_path):
    assert ray_temp_dir("/r") == "/r/ray"
    assert len(ray_temp_dir(tmp_path / ("x" * 80))) <= 40


def test_ray_vecenv_shapes_auto_reset_values_state_and_dead_actor(clip, ray_session):
    rc = RayConfig(enabled=True, num_actors=2, actor_cpus=0.5)
    env = make_vecenv(spec_for(clip, max_episode_steps=5), 8, seed=0, rc=rc)
    assert isinstance(env, RayVecEnv) and env.counts == [4, 4] and not env.owns_ray
    check_step(env, 8)
    env.observe_values(torch.full((8,), 9.0))
    env.step(torch.zeros(8, env.get_env_info()["action_space"].shape[0]))
    assert env.stats()["asi/score_max"] == pytest.approx(
        9.0
    )  # values went to the actors with the step
    snap = env.get_env_state()
    assert len(snap["tasks"]) == 2
    # kill actor 0: the next step replaces it, its envs report done (as time-outs), training goes on
    old = env.actors[0]
    ray.kill(old)
    A = env.get_env_info()["action_space"].shape[0]
    obs, rew, dones, infos = env.step(torch.zeros(8, A))
    assert infos["actor_restarts"] == 1 and env.restarts == 1 and env.actors[0] is not old
    assert dones[:4].all() and infos["time_outs"][:4].all() and obs.shape[0] == 8
    assert env.stats()["asi/score_max"] == pytest.approx(
        9.0
    )  # the replacement got the checkpointed ASI buffers
    for _ in range(3):
        obs, rew, dones, infos = env.step(torch.zeros(8, A))
        assert infos["actor_restarts"] == 0 and torch.isfinite(obs).all()
    env.close()


class _LosesResults:
    """Real Ray, except that ``get`` of the next ``n`` results raises the error Ray raises when
    the node holding a finished actor's result dies before the driver fetched it."""

    def __init__(self, n: int):
        self.n, self.exceptions = n, ray.exceptions

    def __getattr__(self, name):
        return getattr(ray, name)

    def get(self, ref, **kw):
        out = ray.get(ref, **kw)  # the actor did answer; its result is then lost
        if self.n > 0 and not isinstance(ref, list):
            self.n -= 1
            raise ray.exceptions.ObjectReconstructionFailedError(ref.hex(), None, "")
        return out


def test_ray_vecenv_result_lost_with_its_node_counts_as_a_dead_actor(clip, ray_session):
    rc = RayConfig(enabled=True, num_actors=2, actor_cpus=0.5)
    env = make_vecenv(spec_for(clip, max_episode_steps=5), 8, seed=0, rc=rc)
    A = env.get_env_info()["action_space"].shape[0]
    env.reset()
    first = env.get_env_state()
    env.ray = _LosesResults(1)  # the checkpoint's get_state answer of actor 0 is lost
    snap = env.get_env_state()
    assert env.ray.n == 0 and len(snap["tasks"]) == 2
    assert states_equal(snap["tasks"][0], first["tasks"][0])  # its last snapshot stands in
    env.ray.n = 1  # a step's result is lost: that actor is replaced, training goes on
    old = env.actors[0]
    obs, rew, dones, infos = env.step(torch.zeros(8, A))
    assert infos["actor_restarts"] == 1 and env.actors[0] is not old and dones[:4].all()
    obs, rew, dones, infos = env.step(torch.zeros(8, A))
    assert infos["actor_restarts"] == 0 and torch.isfinite(obs).all()
    env.close()
