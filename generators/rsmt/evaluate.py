"""RSMT's evaluation (paper sec. 5.1) on the held-out clips: ``mimic2dm bench rsmt``.

Cases: ``cases`` transitions of each length (1 s and 2 s at 30 fps by default), each between
two frames of one held-out clip (start frame drawn with ``seed``, target ``frames`` later),
in that clip's own style: the style example is a window of a *training* clip of that style
(drawn with the same seed). Every case is generated from the true start frame and its phase
and scored on the raw output (no blending or snapping onto the target):

- ``last_frame_error_m``: mean per-joint distance between the generated last frame and the
  target (and the fraction of cases within ``bound_m``);
- ``l2_pos``: L2 of global positions over the generated frames (Harvey et al.'s convention,
  per frame the norm of all 45 numbers) and ``joint_error_m`` (mean per-joint distance);
- ``npss``: on the 6D orientations; ``foot_skating`` (m/s, RSMT's weighting) beside the
  ground truth's;
- ``speed_ok``: fraction of generated frames whose fastest joint stays within the training
  corpus's 99th-percentile joint speed (``speed_ok_gt``: the same for the true in-betweens);
- ``style_accuracy``: the style classifier (``part=classifier`` run) on the in-between
  (start frame included), beside its accuracy on the true in-betweens;
- ``other_style_accuracy``: the same cases with another style requested (the target pose
  still from the clip): how often the classifier recognises the requested style;
- ``diversity``: mean pairwise distance of ``samples`` generations of the first
  ``diversity_cases`` cases.

The plain baseline is :func:`baseline.linear_transition` (positions lerped, orientations
slerped) on the same cases; its last frame is the target by construction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
import typer
from mimic2dm.generators.rsmt import data as rdata
from mimic2dm.generators.rsmt import features as F
from mimic2dm.generators.rsmt import metrics as M
from mimic2dm.generators.rsmt.baseline import linear_transition
from mimic2dm.generators.rsmt.inference import RSMT, load_rsmt
from mimic2dm.generators.rsmt.phase import clip_phases


@dataclass
class Cases:
    """Transition cases: true windows ``x [N, frames+1, 180]`` (world), styles, start phases."""

    x: torch.Tensor
    style: torch.Tensor
    phase0: torch.Tensor
    examples: torch.Tensor


def make_cases(model: RSMT, train: rdata.Corpus, held: rdata.Corpus, n: int, frames: int, seed: int) -> Cases:  # fmt: skip
    """``n`` cases of ``frames`` in-between frames from the held-out clips (see module doc)."""
    gen = torch.Generator().manual_seed(seed)
    w = rdata.clip_weights(held, frames + 1)
    if w.sum() == 0:
        raise ValueError(f"no held-out clip has {frames + 1} frames")
    clips = torch.multinomial(torch.as_tensor(w), n, replacement=True, generator=gen).tolist()
    phases = {}
    xs, p0 = [], []
    for c in clips:
        clip = held.clips[c]
        s = int(torch.randint(clip.frames - frames, (1,), generator=gen))
        if c not in phases:
            phases[c] = clip_phases(model.phase, clip.x)["p"]
        xs.append(clip.x[s : s + frames + 1])
        p0.append(phases[c][s])
    style = torch.tensor([held.clips[c].style for c in clips])
    sf = min(model.sampler.cfg.style_frames, max(c.frames for c in train.clips))
    examples = rdata.sample_windows(train, n, sf, gen, styles=style).x
    return Cases(torch.stack(xs), style, torch.stack(p0), examples)


def generate(model: RSMT, cases: Cases, seed: int, batch: int = 100) -> torch.Tensor:
    """In-betweens ``[N, frames+1, 180]`` (start frame first) of every case, world coordinates."""
    frames = cases.x.shape[1] - 1
    gen = torch.Generator().manual_seed(seed)
    outs = []
    for i in range(0, len(cases.x), batch):
        sl = slice(i, i + batch)
        x = cases.x[sl]
        out = model.transition(x[:, 0], cases.phase0[sl], x[:, -1], frames, cases.examples[sl], gen)
        outs.append(torch.cat([x[:, :1], out], 1))
    return torch.cat(outs)


def score(pred: torch.Tensor, cases: Cases, speed_limit: float, bound_m: float, classifier=None) -> dict:  # fmt: skip
    """The metrics of in-betweens ``pred [N, frames+1, 180]`` against the cases."""
    gt = cases.x
    last = (F.positions(pred[:, -1]) - F.positions(gt[:, -1])).norm(dim=-1).mean(-1)
    out = {
        "last_frame_error_m": float(last.mean()),
        "last_frame_within_bound": float((last <= bound_m).float().mean()),
        "l2_pos": M.l2_global_positions(pred[:, 1:], gt[:, 1:]),
        "joint_error_m": M.mean_joint_error(pred[:, 1:], gt[:, 1:]),
        "npss": M.npss(pred[:, 1:], gt[:, 1:]),
        "foot_skating": M.foot_skating(pred),
        "foot_skating_gt": M.foot_skating(gt),
        "speed_ok": M.speed_within(pred, speed_limit),
        "speed_ok_gt": M.speed_within(gt, speed_limit),
    }
    if classifier is not None:
        with torch.no_grad():
            out["style_accuracy"] = float((classifier.predict(F.canonicalise(pred)) == cases.style).float().mean())  # fmt: skip
            out["style_accuracy_gt"] = float((classifier.predict(F.canonicalise(gt)) == cases.style).float().mean())  # fmt: skip
    return out


def diversity(model: RSMT, cases: Cases, n_cases: int, samples: int, seed: int) -> float:
    """Mean pairwise distance of ``samples`` generations of each of the first ``n_cases`` cases."""
    vals = []
    for i in range(min(n_cases, len(cases.x))):
        rep = Cases(cases.x[i : i + 1].expand(samples, -1, -1), cases.style[i : i + 1].expand(samples),
                    cases.phase0[i : i + 1].expand(samples, -1), cases.examples[i : i + 1].expand(samples, -1, -1))  # fmt: skip
        vals.append(M.diversity(generate(model, rep, seed + i)[:, 1:]))
    return sum(vals) / max(len(vals), 1)


def other_style(model: RSMT, train: rdata.Corpus, cases: Cases, classifier, seed: int) -> float:
    """The same cases with another style requested (the styles after the clip's own, in turn):
    the fraction whose in-between the classifier assigns to the requested style."""
    n, styles = len(cases.style), len(train.styles)
    shift = 1 + torch.arange(n) % (styles - 1)
    want = (cases.style + shift) % styles
    gen = torch.Generator().manual_seed(seed + 1)
    examples = rdata.sample_windows(train, n, cases.examples.shape[1], gen, styles=want).x
    pred = generate(model, Cases(cases.x, want, cases.phase0, examples), seed)
    with torch.no_grad():
        return float((classifier.predict(F.canonicalise(pred)) == want).float().mean())


def load_classifier(path):
    """The style classifier of a ``part=classifier`` run (None for None)."""
    if path is None:
        return None
    from mimic2dm.generators.rsmt.classifier import StyleClassifier, StyleClassifierConfig
    from mimic2dm.generators.rsmt.train import load_part

    d = load_part(path, "classifier")
    st = rdata.Stats.from_dict(d["stats"])
    m = StyleClassifier(StyleClassifierConfig(**d["model_config"]), st.mean, st.std)
    m.load_state_dict(d["model"])
    return m.eval(), list(d["styles"])


def evaluate(model: RSMT, train: rdata.Corpus, held: rdata.Corpus, cases: int = 100,
             seconds: tuple[float, ...] = (1.0, 2.0), seed: int = 0, classifier=None,
             bound_m: float = 0.10, diversity_cases: int = 10, samples: int = 10) -> dict:  # fmt: skip
    """The report: per length, RSMT's and the linear baseline's metrics (module doc)."""
    speed_limit = M.joint_speed_percentile(torch.cat([c.x for c in train.clips])[None], 99.0)
    report = {"cases": cases, "seed": seed, "bound_m": bound_m, "speed_limit_mps": speed_limit,
              "held_out": [c.name for c in held.clips], "styles": train.styles, "lengths": {}}  # fmt: skip
    for s in seconds:
        frames = int(round(s * F.FPS))
        cs = make_cases(model, train, held, cases, frames, seed)
        t0 = time.perf_counter()
        pred = generate(model, cs, seed)
        took = time.perf_counter() - t0
        base = torch.cat([cs.x[:, :1], linear_transition(cs.x[:, 0], cs.x[:, -1], frames)], 1)
        r = {"frames": frames, "rsmt": score(pred, cs, speed_limit, bound_m, classifier),
             "linear": score(base, cs, speed_limit, bound_m, classifier),
             "batched_frames_per_second": cases * frames / took}  # fmt: skip
        if classifier is not None and len(train.styles) > 1:
            r["rsmt"]["other_style_accuracy"] = other_style(model, train, cs, classifier, seed)
        if samples > 1 and diversity_cases > 0:
            r["rsmt"]["diversity"] = diversity(model, cs, diversity_cases, samples, seed)
            r["linear"]["diversity"] = 0.0
        report["lengths"][f"{s:g}s"] = r
    return report


def bench_rsmt_cmd(
    model: Annotated[
        Path, typer.Option("--model", help="RSMT sampler run directory or checkpoint.")
    ],
    classifier: Annotated[
        Path | None,
        typer.Option(help="Style classifier run (mimic2dm-train-rsmt part=classifier)."),
    ] = None,
    data: Annotated[
        str, typer.Option(help="Corpus config (conf/rsmt_data/NAME.yaml) or a YAML file.")
    ] = "deepmimic_styles",
    cases: Annotated[int, typer.Option(min=1, help="Transitions per length.")] = 100,
    seconds: Annotated[
        str, typer.Option(help="Transition lengths in seconds, comma-separated.")
    ] = "1,2",
    seed: Annotated[int, typer.Option(min=0)] = 0,
    samples: Annotated[int, typer.Option(min=1, help="Samples per case for the diversity.")] = 10,
    json_out: Annotated[
        str | None, typer.Option("--json", help="Write the report (- for stdout).")
    ] = None,
) -> None:
    """RSMT on held-out transitions (last-frame error, L2, NPSS, foot skating, style, diversity)
    against linear interpolation, on the corpus's held-out clips."""
    from mimic2dm.utils.reporting import write_json_report

    torch.set_num_threads(1)
    try:
        secs = tuple(float(v) for v in seconds.split(","))
        if any(v <= 0 for v in secs):
            raise ValueError
    except ValueError:
        raise typer.BadParameter(
            f"--seconds {seconds!r}: expected positive numbers like 1,2"
        ) from None
    rsmt = load_rsmt(model)
    cls = load_classifier(classifier)
    if cls is not None and cls[1] != rsmt.styles:
        raise typer.BadParameter(f"--classifier: styles {cls[1]} differ from the model's {rsmt.styles}")  # fmt: skip
    train, held = rdata.load_corpus(corpus_config(data))
    rep = evaluate(rsmt, train, held, cases, secs, seed, cls[0] if cls else None, samples=samples)
    rep["model"], rep["classifier"] = str(model), str(classifier) if classifier else None
    if json_out == "-":
        write_json_report(rep, "-")
        return
    for k, r in rep["lengths"].items():
        for name in ("rsmt", "linear"):
            m = r[name]
            sty = f", style {m['style_accuracy']:.0%}" if "style_accuracy" in m else ""
            typer.echo(f"{k} {name:6s}: last frame {m['last_frame_error_m'] * 100:.1f} cm, L2 {m['l2_pos']:.3f}, "
                       f"NPSS {m['npss']:.4f}, foot skate {m['foot_skating']:.3f} (gt {m['foot_skating_gt']:.3f}), "
                       f"speed ok {m['speed_ok']:.0%}{sty}, diversity {m.get('diversity', 0.0):.3f}")  # fmt: skip
    if json_out:
        write_json_report(rep, json_out)


def corpus_config(name: str) -> rdata.CorpusConfig:
    """The corpus of ``conf/rsmt_data/NAME.yaml`` or of a YAML file."""
    from mimic2dm.generators.config import parse
    from mimic2dm.generators.runs import CONF_DIR
    from omegaconf import OmegaConf

    p = Path(name)
    if not p.suffix:
        p = Path(CONF_DIR) / "rsmt_data" / f"{name}.yaml"
    if not p.is_file():
        raise typer.BadParameter(f"--data {name}: no such corpus config ({p})")
    return parse(rdata.CorpusConfig, OmegaConf.load(p), "rsmt_data")
