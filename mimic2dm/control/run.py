"""``mimic2dm control``: load the tracker and the generator, run episodes, report Table 3.

With ``random_weights`` the tracker is an untrained network of the default configs
(``conf/tracker.yaml``) and the generator an untrained one of ``conf/model/<model>.yaml``
(or, when a checkpoint is given, of that checkpoint's architecture); reports say so.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from mimic2dm.control.controller import Controller, ControlSettings
from mimic2dm.control.generator import load_any_generator, random_generator, reinitialised
from mimic2dm.control.metrics import (
    episode_metrics,
    generated_windows,
    load_fid_set,
    simulated_windows,
    static_views,
    table3,
    upright_steps,
)

PROJECT = Path(__file__).resolve().parents[2]
DEFAULT_REAL = {"coco17": "cmu_views", "dog17": "dog_views"}
"""Real motion for FID per keypoint set: the held-out views of that ``conf/gen_data`` config
(the humanoid's CMU views, the dog's looped trot and pace), built on first use."""


def random_tracker(character: str = "humanoid", seed: int = 0):
    """An untrained tracker of the default configs whose observation layout matches the task."""
    from mimic2dm.app.runspec import task_spec_from_cfg, train_config
    from mimic2dm.engines import load_engine
    from mimic2dm.engines.base import EngineOptions
    from mimic2dm.rl.config import network_params
    from mimic2dm.rl.policy import Policy, build_model
    from mimic2dm.tasks.tracking2d import observation_layout
    from mimic2dm.train import compose_config

    cfg = compose_config([f"character={character}"])
    spec = dataclasses.replace(task_spec_from_cfg(cfg, ["(random weights: no data)"]), data=())
    tc = train_config(cfg)
    with load_engine(EngineOptions(), character, 1) as e:
        layout, A = observation_layout(e, int(spec.config["num_future"])), e.num_dofs
    torch.manual_seed(seed)
    params = network_params(tc.network, layout)
    obs_dim = layout["prop"] + layout["view"]
    model = build_model(params, obs_dim, A, tc.normalize_value).eval()
    meta = {
        "network": params,
        "obs_dim": obs_dim,
        "action_dim": A,
        "normalize_value": tc.normalize_value,
    }
    return Policy(model, spec, {}, 0, 0, meta)


def default_pose_canonical(character: str) -> np.ndarray:
    """The character's default pose seen from the side, as canonical local pose ``[K, 2]``."""
    from mimic2dm.control.reference import FollowCamera
    from mimic2dm.engines import load_engine
    from mimic2dm.engines.base import EngineOptions
    from mimic2dm.motion.canonical import to_canonical
    from mimic2dm.motion.keypoint_sets import load_keypoint_set

    with load_engine(EngineOptions(), character, 1) as e:
        kp = e.get_keypoints()[0]
        kset = load_keypoint_set(e.character.keypoint_set)
    R, t, k = FollowCamera(1, 90.0).place(kp[list(kset.root)].mean(0))
    from mimic2dm.geometry.camera import project_points

    uv, _ = project_points(R[0], t[0], k[0], kp)
    return to_canonical(uv[None], kset).local[0].numpy()


def load_models(tracker: str | None, generator: str | None, random_weights: bool, random_model: str = "gpt",
                character: str = "humanoid", seed: int = 0, reference: str | None = None,
                views: int = 1):  # fmt: skip
    """``(policy, generator, tracker description)``; with ``random_weights`` untrained ones.

    ``reference`` (a 2D clip) replaces the generator by that clip's motion played back
    (``views`` of its views): the loop with real motion."""
    from mimic2dm.rl.policy import load_policy, untrained_policy

    if reference is not None and generator is not None:
        raise ValueError("--reference replaces --generator: give one of them")
    if not random_weights and (tracker is None or (generator is None and reference is None)):
        raise ValueError(
            "--tracker and --generator (or --reference) are needed (or --random-weights for a smoke run)"
        )
    if tracker is not None:
        policy = load_policy(tracker)
        policy = untrained_policy(policy, seed) if random_weights else policy
    else:
        policy = random_tracker(character, seed)
    char = policy.env_spec.character
    if reference is not None:
        from mimic2dm.control.generator import replay_generator

        gen = replay_generator(reference, views)
    elif generator is not None:
        gen = load_any_generator(generator)
        gen = reinitialised(gen, seed) if random_weights else gen
    else:
        from mimic2dm.characters import CHARACTERS

        kset = CHARACTERS.load(char).keypoint_set
        gen = random_generator(
            random_model, kset, default_pose_canonical(char), policy.env_spec.control_hz, seed=seed
        )
    desc = str(tracker) if tracker is not None else "default configs (conf/tracker.yaml)"
    return policy, gen, f"random weights ({desc})" if random_weights else desc


def run_control(policy, gen, settings: ControlSettings, episodes: int = 1, fid_extractor: str | None = None,
                real: str | None = None, video: str | None = None, fid: bool = True,
                tracker_name: str = "", start_states: list[str] | None = None,
                clips_out: str | None = None, clip_settings=None) -> dict:  # fmt: skip
    """Run ``episodes`` controlled runs (seeds ``settings.seed + i``) and report Table 3.

    Args:
        policy, gen: tracker and generator (:func:`load_models`).
        settings: the run (``seed`` is the first episode's).
        fid_extractor: a trained extractor (``fid_extractor.pt`` / run dir); None: untrained.
        real: directory of real 2D motion for FID (default: the held-out CMU views).
        video: mp4 of the first episode (view 0 with the generated reference drawn over it).
        fid: compute FID / diversity.
        start_states: clips whose physical states episodes start from, the one matching the
            first generated frames best (:mod:`mimic2dm.control.start`); None: the default pose.
        clips_out: write each episode there as a training clip (:mod:`mimic2dm.control.clips`,
            cut by ``clip_settings``, a ``LoopClipSettings``; None: its defaults).
    """
    from mimic2dm.utils.validate import check

    check("--episodes", episodes, ge=1, integer=True)
    ctl = Controller(policy, gen)
    kset = ctl.engine.character.keypoint_set
    per_ep, sim_w, up_w, gen_w = [], [], [], []
    try:
        if start_states:
            from mimic2dm.control.start import load_start_library

            lib = load_start_library(start_states, ctl.engine.character, ctl.engine.default_state(1),
                                     ctl.cfg, ctl.hz)  # fmt: skip
            settings = dataclasses.replace(settings, start_states=lib)
        fid_set = _fid_set(kset, real, fid_extractor) if fid else None
        writer = (
            _clip_writer(ctl, clips_out, clip_settings, tracker_name, gen) if clips_out else None
        )
        for i in range(episodes):
            s = dataclasses.replace(settings, seed=settings.seed + i,
                                    record_states=(bool(video) and i == 0) or writer is not None)  # fmt: skip
            rec = ctl.run(s)
            if writer is not None:
                writer.add(rec, s.seed, s.skill if not s.switches else None)
            m = episode_metrics(rec, ctl.hz, ctl.cfg.camera.height, ctl.cfg.fall_height)
            az = rec.azimuth_deg
            per_ep.append({"seed": s.seed, "azimuth_deg": az, **m})
            if rec.start is not None:
                per_ep[-1]["start"] = rec.start
            if fid_set is not None:
                W = fid_set.extractor.window
                cams = static_views(rec.stacked("kp3d"), _kset(kset), [az + 90 * v for v in range(ctl.V)],
                                    s.elevation_deg, s.focal)  # fmt: skip
                sim_w.append(simulated_windows(rec, _kset(kset), cams, W))
                up = upright_steps(rec, ctl.cfg.fall_height)
                up_w.append(simulated_windows(rec, _kset(kset), cams, W, frames=up))
                gen_w.append(generated_windows(rec, W))
            if i == 0 and video:
                _video(ctl, rec, video)
    finally:
        ctl.close()
    empty = torch.zeros(0)
    report = table3(
        per_ep,
        torch.cat(sim_w) if sim_w else empty,
        torch.cat(gen_w) if gen_w else empty,
        fid_set,
        upright=torch.cat(up_w) if up_w else empty,
    )
    report |= {
        "tracker": tracker_name, "generator": gen.source, "generator_type": gen.model_type, "views": gen.num_views,
        "random_weights": tracker_name.startswith("random weights") or gen.source.startswith("random weights"),
        "settings": {k: v for k, v in dataclasses.asdict(dataclasses.replace(settings, start_states=None)).items()
                     if k not in ("record_states", "start_states")} | {"start_states": list(start_states or [])},
        "per_episode": per_ep,
    }  # fmt: skip
    return report


def _clip_writer(ctl: Controller, out: str, settings, tracker_name: str, gen):
    from mimic2dm.control.clips import LoopClipSettings, LoopClipWriter

    source = {"tracker": tracker_name, "generator": gen.source, "generator_type": gen.model_type}
    return LoopClipWriter(out, settings or LoopClipSettings(), ctl.spec.character,
                          ctl.engine.character.keypoint_set, ctl.hz,
                          (ctl.cfg.camera.width, ctl.cfg.camera.height), source)  # fmt: skip


def _kset(name: str):
    from mimic2dm.motion.keypoint_sets import load_keypoint_set

    return load_keypoint_set(name)


def _fid_set(kset: str, real: str | None, extractor: str | None):
    if real is None:
        if kset not in DEFAULT_REAL:
            raise ValueError(
                f"--real: no default real motion for keypoint set {kset!r}; give a directory"
            )
        real = str(ensure_default_real(kset))
    return load_fid_set(real, kset, extractor)


def ensure_default_real(kset: str) -> Path:
    """Build (once) the held-out views of ``gen_data=DEFAULT_REAL[kset]`` (its held-out spec)."""
    from omegaconf import OmegaConf

    from mimic2dm.generators.data import ensure_heldout_views

    gen_data = OmegaConf.load(PROJECT / "conf" / "gen_data" / f"{DEFAULT_REAL[kset]}.yaml")
    return ensure_heldout_views(PROJECT / gen_data.heldout_dir, gen_data.build)


def _video(ctl: Controller, rec, path: str) -> None:
    from mimic2dm.engines.base import SimState
    from mimic2dm.geometry.camera import Camera
    from mimic2dm.render import try_render, write_video

    cam = Camera(rec.stacked("cam_R")[:, 0], rec.stacked("cam_t")[:, 0], rec.stacked("cam_k")[:, 0],
                 ctl.cfg.camera.width, ctl.cfg.camera.height)  # fmt: skip
    frames = try_render(ctl.spec.character, SimState.cat(rec.states), cam, ctl.spec.objects,
                        ref_uv=rec.stacked("ref")[:, 0].numpy(), ref_mask=(rec.stacked("mask") & rec.stacked("front"))[:, 0].numpy(),
                        kset=_kset(ctl.engine.character.keypoint_set))  # fmt: skip
    if frames is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_video(path, frames, ctl.hz)
