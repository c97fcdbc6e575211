"""Generator Hydra apps end to end (tiny settings), exact resume, sampling CLI, bench."""

import json

import pytest
import torch
from generator_helpers import MOCAP, TINY, needs_mocap, run_main
from mimic2dm.generators import train_fid, train_generator, train_tokenizer
from mimic2dm.generators.runs import CONF_DIR
from typer.testing import CliRunner

from mimic2dm.motion.format import load_motion2d

pytestmark = needs_mocap
TINY_EVAL = ["eval.num_samples=16", "eval.real_windows=64", "eval.val_windows=64"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    """Small models: one torch thread is faster than two on shared cores."""


def compose(name: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose(config_name=name, overrides=overrides)


@pytest.fixture(scope="module")
def data_args(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen_data")
    return [f"gen_data.dir={d}/train", f"gen_data.heldout_dir={d}/heldout", "gen_data.build.clips=[cmu_walk,cmu_run]",
            "gen_data.build.pairs=1", "gen_data.build.heldout_pairs=1", f"gen_data.build.mocap_dir={MOCAP}",
            "logger.wandb=false", "threads=1"]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_args):
    """FID extractor (wandb offline on), tokenizer, GPT, multi-view GPT and diffusion, all tiny."""
    root = tmp_path_factory.mktemp("runs")
    runs = {k: root / k for k in ("fid", "tok", "gpt", "gptmv", "diff")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        run_main(
            train_fid,
            [*data_args, *TINY, f"run_dir={runs['fid']}", "logger.wandb=true", "eval_windows=64"],
        )
    run_main(train_tokenizer, [*data_args, *TINY, f"run_dir={runs['tok']}", "model.width=32"])
    common = [*data_args, *TINY, *TINY_EVAL, f"tokenizer={runs['tok']}", f"fid={runs['fid']}"]
    run_main(train_generator, [*common, f"run_dir={runs['gpt']}", "model=gpt"])
    run_main(train_generator, [*common, f"run_dir={runs['gptmv']}", "model=gpt_multiview"])
    run_main(
        train_generator,
        [*common, f"run_dir={runs['diff']}", "model=diffusion", "model.num_steps=8"],
    )
    return runs


def test_apps_write_runs_with_config_checkpoints_logs_and_metrics(trained):
    for name, run in trained.items():
        assert (run / "config.yaml").is_file() and (run / ".hydra").is_dir(), name
        assert (run / "checkpoints" / "last.pt").is_file() and (
            run / "checkpoints" / "best.pt"
        ).is_file(), name
        assert list((run / "tb").glob("events.out.tfevents.*")), name
        assert json.loads((run / "metrics.json").read_text())["step"] == 6, name
    assert list((trained["fid"] / "wandb").glob("offline-run-*")), "wandb runs offline"
    assert "max_steps: 6" in (trained["tok"] / "config.yaml").read_text()
    fid_m = json.loads((trained["fid"] / "metrics.json").read_text())
    assert (trained["fid"] / "fid_extractor.pt").is_file() and fid_m["fid_heldout_self"] < 1e-6
    tok = json.loads((trained["tok"] / "metrics.json").read_text())
    assert tok["recon_px"] > 0 and 0 < tok["usage"] <= 1
    for name in ("gpt", "gptmv", "diff"):
        m = json.loads((trained[name] / "metrics.json").read_text())
        assert m["fid_extractor"] == fid_m["fid_extractor"], "FID names its extractor version"
        assert (
            m["fid"] >= 0
            and m["diversity"] >= 0
            and m["fid_reference"] >= 0
            and 0 <= m["label_accuracy"] <= 1
        )
    assert (
        json.loads((trained["gptmv"] / "metrics.json").read_text())["num_generated"] == 32
    )  # 16 samples x 2 views


@pytest.mark.parametrize("app,extra", [
    (train_tokenizer, ["model.width=32"]),
    (train_generator, ["model=diffusion", "model.n_layer=1", *TINY_EVAL]),
    (train_fid, ["model.width=32", "eval_windows=32"]),
])  # fmt: skip
def test_resume_is_exact(app, extra, data_args, tmp_path):
    """N steps straight == N/2 steps, then resume=RUN_DIR to N: same weights, optimiser and counters."""
    base = [*data_args, *extra, "train.eval_every=2", "train.ckpt_every=0", "optim.warmup_steps=2"]
    run_main(app, [*base, f"run_dir={tmp_path / 'straight'}", "train.max_steps=6"])
    run_main(app, [*base, f"run_dir={tmp_path / 'split'}", "train.max_steps=3"])
    run_main(app, [*base, f"resume={tmp_path / 'split'}", "train.max_steps=6"])
    a = torch.load(tmp_path / "straight/checkpoints/last.pt", weights_only=False)
    b = torch.load(tmp_path / "split/checkpoints/last.pt", weights_only=False)
    assert a["step"] == b["step"] == 6
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert all(torch.equal(sa[i]["exp_avg"], sb[i]["exp_avg"]) for i in sa)
    assert torch.equal(a["sampler_rng"], b["sampler_rng"]) and torch.equal(
        a["rng"]["torch"], b["rng"]["torch"]
    )
    assert (tmp_path / "split/config.before_step3.yaml").is_file()


def test_bad_configs_fail_clearly(data_args, tmp_path):
    cfg = compose("train_generator", [*data_args, f"run_dir={tmp_path / 'g'}", "model=gpt"])
    with pytest.raises(ValueError, match="needs tokenizer=RUN_DIR"):
        train_generator.train(cfg)
    cfg = compose("train_tokenizer", [*data_args, f"resume={tmp_path / 'nothing'}"])
    with pytest.raises(FileNotFoundError, match="no checkpoints/last.pt"):
        train_tokenizer.train(cfg)


def test_sampling_is_deterministic_and_writes_the_2d_format(trained, tmp_path):
    from mimic2dm.generators.sample import app, sample_motion

    a = sample_motion(trained["gpt"], 50, "walk", tmp_path / "a.npz", seed=3)
    b = sample_motion(trained["gpt"], 50, "walk", tmp_path / "b.npz", seed=3)
    c = sample_motion(trained["gpt"], 50, "walk", tmp_path / "c.npz", seed=4)
    assert a.keypoints.shape == (1, 50, 17, 2) and a.labels == {"skill": "walk"}
    assert (a.keypoints == b.keypoints).all() and not (a.keypoints == c.keypoints).all()
    assert (load_motion2d(tmp_path / "a.npz").keypoints == a.keypoints).all()
    root0 = a.keypoints[0, 0, 11:13].mean(0)  # G^-1 starts at the chosen placement (hips ~ root)
    placed = sample_motion(
        trained["gpt"],
        10,
        None,
        tmp_path / "p.npz",
        camera="width=1280,height=720,root_x=0.25,root_y=0.5",
    )
    assert (
        placed.image_size == (1280, 720)
        and abs(placed.keypoints[0, 0, 11:13].mean(0) - [320, 360]).max() < 3
    )
    assert (
        abs(
            root0 - [a.meta["placement"]["root_x"] * 1920, a.meta["placement"]["root_y"] * 1080]
        ).max()
        < 3
    )
    d1 = sample_motion(trained["diff"], 40, "run", tmp_path / "d1.npz", seed=1)
    d2 = sample_motion(trained["diff"], 40, "run", tmp_path / "d2.npz", seed=1)
    assert d1.keypoints.shape == (1, 40, 17, 2) and (d1.keypoints == d2.keypoints).all()
    r = CliRunner().invoke(app, [str(trained["gptmv"]), "--frames", "20", "--condition", "run", "--out",
                                 str(tmp_path / "mv.npz"), "--preview", str(tmp_path / "mv.mp4"), "--seed", "2"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert load_motion2d(tmp_path / "mv.npz").keypoints.shape == (2, 20, 17, 2)
    assert (tmp_path / "mv.mp4").stat().st_size > 1000
    bad = CliRunner().invoke(
        app, [str(trained["gpt"]), "--condition", "jump", "--out", str(tmp_path / "x.npz")]
    )
    assert bad.exit_code == 1 and "not one of this model's labels: run, walk" in bad.output


def test_bench_generate_reports_frames_per_second(trained, tmp_path):
    from mimic2dm.generators.bench import app, bench_generate

    r = bench_generate(trained["gpt"], frames=64, warmup_frames=32)
    assert r["frames"] >= 64 and r["frames_per_s"] > 0 and r["threads"] == 1
    assert r["realtime_ratio"] == pytest.approx(r["frames_per_s"] / 30.0)
    assert torch.get_num_threads() == 1  # restored to the module's setting
    out = CliRunner().invoke(app, ["--frames", "64", "--json", str(tmp_path / "b.json")])
    assert out.exit_code == 0 and "frames/s" in out.output and "x real time at 30 fps" in out.output
    assert json.loads((tmp_path / "b.json").read_text())["frames"] >= 64


def _old_format_checkpoint(run_dir, model_type: str, model_name: str, model, optimizer, like: dict):
    """A generator checkpoint in the format of the code before the optimiser schema and the
    model-type registry (commit d414f41): ``runs.save``'s entries, ``train_generator``'s extra
    and ``CheckpointManager``'s ``step`` / ``best_metric``, in ``RUN/checkpoints/last.pt``."""
    from dataclasses import asdict

    from mimic2dm.utils.checkpoint import rng_state

    state = {"kind": "mimic2dm.generator", "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "sampler_rng": torch.Generator().manual_seed(0).get_state(), "rng": rng_state(),
             "model_type": model_type, "model_name": model_name, "model_config": asdict(model.config),
             "stats": like["stats"], "tokenizer": like["tokenizer"], "data": like["data"], "step": 4,
             "best_metric": None}  # fmt: skip
    (run_dir / "checkpoints").mkdir(parents=True)
    torch.save(state, run_dir / "checkpoints" / "last.pt")
    return state


def _one_old_step(model, optimizer) -> None:
    """One optimiser step so that the optimiser state (Adam moments) is not empty."""
    loss = sum((p.float() ** 2).sum() for p in model.parameters())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def test_checkpoints_in_the_previous_format_sample_and_resume(trained, data_args, tmp_path):
    """Checkpoints as the code before the registry wrote them (optimisers built its way) still load,
    sample the same motion as their weights give, and resume through the app."""
    from mimic2dm.generators.diffusion import Diffusion, DiffusionConfig
    from mimic2dm.generators.gpt import GPT, GPTConfig
    from mimic2dm.generators.sample import load_generator, sample_motion

    gpt_like = torch.load(trained["gpt"] / "checkpoints/last.pt", weights_only=False)
    gpt = GPT(GPTConfig(**gpt_like["model_config"]))
    opt = gpt.configure_optimizers(5e-4, 0.01)  # the old GPTJob.optimizer
    _one_old_step(gpt, opt)
    _old_format_checkpoint(tmp_path / "gpt", "gpt", "gpt", gpt, opt, gpt_like)
    diff_like = torch.load(trained["diff"] / "checkpoints/last.pt", weights_only=False)
    diff = Diffusion(DiffusionConfig(**diff_like["model_config"]))
    opt = torch.optim.AdamW(diff.parameters(), lr=5e-4, weight_decay=0.01)  # the old DiffusionJob's
    _one_old_step(diff, opt)
    _old_format_checkpoint(tmp_path / "diff", "diffusion", "diffusion", diff, opt, diff_like)

    g = load_generator(tmp_path / "gpt")
    assert g.model_type == "gpt" and g.num_views == 1 and g.tokenizer is not None
    assert all(torch.equal(v, gpt.state_dict()[k]) for k, v in g.model.state_dict().items())
    m = sample_motion(tmp_path / "gpt", 20, "walk", tmp_path / "g.npz", seed=1)
    assert m.keypoints.shape == (1, 20, 17, 2)
    d = load_generator(tmp_path / "diff")
    assert d.model_type == "diffusion" and d.num_views == 1 and d.tokenizer is None
    assert sample_motion(tmp_path / "diff", 12, "run", tmp_path / "d.npz", seed=1).num_frames == 12

    run_main(train_generator, [*data_args, *TINY_EVAL, f"resume={tmp_path / 'diff'}", "model=diffusion", "model.num_steps=8",
                               "train.max_steps=6", "train.eval_every=2", "optim.warmup_steps=2"])  # fmt: skip
    run_main(train_generator, [*data_args, *TINY_EVAL, f"resume={tmp_path / 'gpt'}", "model=gpt",
                               f"tokenizer={trained['tok']}", "train.max_steps=6", "train.eval_every=2",
                               "optim.warmup_steps=2"])  # fmt: skip
    for name, betas in (("diff", (0.9, 0.999)), ("gpt", (0.9, 0.95))):
        after = torch.load(tmp_path / name / "checkpoints/last.pt", weights_only=False)
        assert (
            after["step"] == 6
            and json.loads((tmp_path / name / "metrics.json").read_text())["step"] == 6
        )
        assert all(grp["betas"] == betas for grp in after["optimizer"]["param_groups"]), name
        assert after["model_type"] == ("gpt" if name == "gpt" else "diffusion")


def test_sample_options_out_of_range_fail_in_one_line(trained, tmp_path):
    from mimic2dm.generators.sample import app

    for args, msg in [
        (["--top-k", "-5"], "--top-k=-5: expected an integer >= 0"),
        (["--temperature", "-1"], "--temperature=-1.0: expected a number >= 0"),
        (["--seed", "-2"], "--seed=-2: expected an integer >= 0"),
    ]:
        out = tmp_path / "x.npz"
        r = CliRunner().invoke(
            app, [str(trained["gpt"]), "--frames", "8", "--out", str(out), *args]
        )
        assert r.exit_code == 1 and r.output.strip() == f"error: {msg}", r.output
        assert "Traceback" not in r.output and not out.exists()
    r = CliRunner().invoke(app, [str(trained["gpt"]), "--frames", "8", "--top-k", "3", "--temperature", "0.5",
                                 "--out", str(tmp_path / "ok.npz")])  # fmt: skip
    assert r.exit_code == 0, r.output
