"""Generator configs: range checks at start-up (before the run directory), the optimiser
schema, the generator model-type registry."""

import os
import subprocess
import sys

import pytest
import torch
from mimic2dm.generators import train_fid, train_generator, train_tokenizer
from mimic2dm.generators.config import validate
from mimic2dm.generators.model_types import GENERATORS, DiffusionType, GPTType
from mimic2dm.generators.optim import OptimConfig, make_optimizer
from mimic2dm.generators.runs import CONF_DIR

from mimic2dm.utils.validate import ConfigError


def compose(name: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return hydra_compose(config_name=name, overrides=overrides)


@pytest.mark.parametrize("app,args,message", [
    (train_generator, ["model=diffusion", "optim.lr=0"], "optim.lr=0: expected a number > 0"),
    (train_generator, ["model=diffusion", "optim.betas=[0.9,1.0]"], "optim.betas[1]=1.0: expected a number with 0 <= x < 1"),
    (train_generator, ["model=diffusion", "train.batch_size=0"], "train.batch_size=0: expected an integer >= 1"),
    (train_generator, ["model=diffusion", "train.max_steps=0"], "train.max_steps=0: expected an integer >= 1"),
    (train_generator, ["model=diffusion", "eval.top_k=-5"], "eval.top_k=-5: expected an integer >= 0 (or null)"),
    (train_generator, ["model=diffusion", "eval.temperature=-1"], "eval.temperature=-1: expected a number >= 0"),
    (train_generator, ["model=diffusion", "model.n_embd=130"], "model.n_embd=130: expected a multiple of model.n_head=4"),
    (train_generator, ["model=diffusion", "model.overlap=32"], "model.overlap=32: expected 0 <= x < model.window=32"),
    (train_generator, ["model=gpt_multiview", "model.num_views=0", "tokenizer=x"], "model.num_views=0: expected an integer >= 1"),
    (train_generator, ["model=gpt"], "tokenizer=None: expected a mimic2dm-train-tokenizer run directory: model=gpt needs tokenizer=RUN_DIR"),
    (train_generator, ["model=diffusion", "+model.n_layr=2"], "model.n_layr=2: expected a key of model: window, n_layer,"),
    (train_generator, ["model.type=vae", "tokenizer=x"], "model.type='vae': expected one of diffusion, gpt"),
    (train_generator, ["model=gpt", "tokenizer={tmp}/none"], "tokenizer='{tmp}/none': expected a tokenizer checkpoint"),
    (train_generator, ["model=diffusion", "fid={tmp}/none"], "fid='{tmp}/none': expected a mimic2dm-train-fid run directory"),
    (train_generator, ["model=diffusion", "gen_data=dir"], "gen_data.dir='???': expected a directory of 2D-motion files"),
    (train_generator, ["model=diffusion", "gen_data.build.pairs=0"], "gen_data.build.pairs=0: expected an integer >= 1"),
    (train_tokenizer, ["window=30"], "window=30: expected a multiple of 4 (2 ** model.down_t)"),
    (train_tokenizer, ["optim.name=sgd"], "optim.name='sgd': expected one of adamw"),
    (train_tokenizer, ["resume={tmp}/none"], "resume='{tmp}/none': expected a run directory with checkpoints/last.pt"),
    (train_tokenizer, ["model.ema_decay=1.0"], "model.ema_decay=1.0: expected a number with 0 <= x < 1"),
    (train_fid, ["model.temperature=0"], "model.temperature=0: expected a number > 0"),
    (train_fid, ["optim.warmup_steps=-1"], "optim.warmup_steps=-1: expected an integer >= 0"),
])  # fmt: skip
def test_hydra_apps_refuse_bad_values_in_one_line_before_the_run_dir(app, args, message, tmp_path, capsys, monkeypatch):  # fmt: skip
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    run_dir = tmp_path / "run"
    args = [a.format(tmp=tmp_path) for a in args]
    monkeypatch.setattr(sys, "argv", [app.__name__, *args, f"run_dir={run_dir}", "logger.wandb=false"])  # fmt: skip
    with pytest.raises(SystemExit) as e:
        app.main()
    assert e.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {message.format(tmp=tmp_path)}") and "\n" not in err, err
    assert not run_dir.exists() and not (tmp_path / "none").exists(), (
        "checked before Hydra makes the run directory"
    )


def test_console_app_prints_no_traceback(tmp_path):
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    cmd = [sys.executable, "-m", "mimic2dm.generators.train_generator", "model=diffusion",
           "optim.lr=-1e-3", f"run_dir={tmp_path / 'run'}"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == "error: optim.lr=-0.001: expected a number > 0", r.stderr
    assert "Traceback" not in r.stdout + r.stderr and not (tmp_path / "run").exists()


def test_validate_parses_the_schemas_and_the_model_type():
    app = validate(compose("train_generator", ["model=diffusion", "optim.betas=[0.5,0.6]"]), "generator")  # fmt: skip
    assert isinstance(app.gtype, DiffusionType) and app.optim.betas == (0.5, 0.6)
    assert app.train.max_steps == 3000 and app.eval.top_k is None and app.optim.lr == 5e-4
    mv = validate(compose("train_generator", ["model=gpt_multiview", "tokenizer=x", "eval.top_k=0"]), "generator")  # fmt: skip
    assert isinstance(mv.gtype, GPTType) and mv.eval.top_k == 0 and mv.gtype.betas == (0.9, 0.95)
    tok = validate(compose("train_tokenizer", []), "tokenizer")
    assert tok.train.eval_stride == 8 and tok.optim.lr == 1e-3 and tok.gtype is None
    fid = validate(compose("train_fid", []), "fid")
    assert fid.optim.warmup_steps == 50 and fid.train.batch_size == 128


def test_generator_registry_builds_every_type_and_names_the_valid_ones(tmp_path):
    from mimic2dm.generators.sample import build_generator, load_generator

    assert GENERATORS.names() == ["diffusion", "gpt"]
    for name in GENERATORS.names():
        gtype = GENERATORS.load(name)
        model = gtype.build({"n_layer": 1, "n_head": 2, "n_embd": 16})
        assert isinstance(model, gtype.model_class()) and gtype.num_views(model) == 1
    assert GENERATORS.load("gpt").build({"num_views": 2, "n_embd": 16, "n_head": 2}).config.num_views == 2  # fmt: skip
    with pytest.raises(ConfigError, match=r"model_type='vae': expected one of diffusion, gpt"):
        build_generator("vae", {})
    bad = tmp_path / "bad.pt"
    torch.save({"kind": "mimic2dm.generator", "model_type": "vae", "model_config": {}}, bad)
    with pytest.raises(
        ValueError, match=r"bad\.pt: model_type='vae': expected one of diffusion, gpt"
    ):
        load_generator(bad)


def test_optimiser_schema_ranges_and_groups():
    with pytest.raises(ConfigError, match=r"optim\.lr=-1: expected a number > 0"):
        OptimConfig(lr=-1)
    with pytest.raises(ConfigError, match=r"optim\.min_lr_ratio=2: expected a number with 0 <= x <= 1"):  # fmt: skip
        OptimConfig(min_lr_ratio=2)
    with pytest.raises(ConfigError, match=r"optim\.betas=\[0\.9\]"):
        OptimConfig(betas=[0.9])
    gpt = GPTType().build({"n_layer": 1, "n_head": 2, "n_embd": 16})
    opt = make_optimizer(gpt, OptimConfig(lr=0.1, weight_decay=0.01), GPTType.betas)
    decay, other = opt.param_groups
    assert decay["weight_decay"] == 0.01 and other["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in other["params"])
    assert decay["betas"] == (0.9, 0.95) and decay["lr"] == 0.1
    diff = DiffusionType().build({"n_layer": 1, "n_head": 2, "n_embd": 16})
    (group,) = make_optimizer(diff, OptimConfig(betas=(0.8, 0.9))).param_groups
    assert group["betas"] == (0.8, 0.9) and len(group["params"]) == len(list(diff.parameters()))
    o = OptimConfig(lr=1.0, warmup_steps=2, min_lr_ratio=0.1)
    lrs = [o.lr_at(s, 10) for s in range(10)]
    assert lrs[0] == 0.5 and lrs[1] == 1.0 and lrs[2] == pytest.approx(1.0) and lrs[-1] > 0.1
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:], strict=False))
