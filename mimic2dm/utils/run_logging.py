"""Run directories and logging shared by every training job: wandb (offline unless the
user's ``WANDB_MODE`` says otherwise, never required to reach a server), TensorBoard, a
resolved-config copy, and a console progress bar."""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

log = logging.getLogger(__name__)


@dataclass
class LoggerConfig:
    """The ``logger`` Hydra group (``conf/logger/default.yaml``), range-checked on construction."""

    wandb: bool = True
    project: str = "mimic2dm"
    tensorboard: bool = True
    log_every: int = 1  # iterations between scalar logs
    video_every: int = 0  # iterations between rollout/preview videos (0: off)

    def __post_init__(self) -> None:
        from mimic2dm.utils.validate import check

        check("logger.log_every", self.log_every, ge=1, integer=True)
        check("logger.video_every", self.video_every, ge=0, integer=True)


def save_resolved_config(cfg: Any, run_dir: str | Path) -> Path:
    """Write the fully resolved config (OmegaConf or a mapping) as ``RUN_DIR/config.yaml``."""
    from omegaconf import OmegaConf

    path = Path(run_dir) / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    conf = cfg if OmegaConf.is_config(cfg) else OmegaConf.create(dict(cfg))
    path.write_text(OmegaConf.to_yaml(conf, resolve=True))
    return path


def make_progress() -> Progress:
    """A rich progress bar with elapsed/remaining time (console only; disabled when not a TTY is fine).

    It keeps the stdout of its creation and leaves ``sys.stdout`` alone: library prints
    that :func:`mimic2dm.utils.reporting.library_output_to_log` sends to the log while
    the bar runs must neither take the bar with them nor come back onto the console.
    """
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=Console(file=sys.stdout),
        redirect_stdout=False,
    )


class RunLogger:
    """Scalars, histograms and videos to wandb and TensorBoard at once.

    Args:
        run_dir: the run directory; wandb writes under ``run_dir/wandb``, TensorBoard under
            ``run_dir/tb``. The wandb run id is kept in ``run_dir/wandb_id`` so a resumed
            run continues the same wandb run.
        config: the resolved config (stored with the wandb run).
        project: wandb project name.
        use_wandb, use_tensorboard: switch each sink.
    """

    def __init__(
        self,
        run_dir: str | Path,
        config: Mapping | None = None,
        project: str = "mimic2dm",
        use_wandb: bool = True,
        use_tensorboard: bool = True,
        name: str | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.tb = None
        self.wandb_run = None
        if use_tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(self.run_dir / "tb"))
        if use_wandb:
            self._init_wandb(config, project, name)

    def _init_wandb(self, config: Mapping | None, project: str, name: str | None) -> None:
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        id_file = self.run_dir / "wandb_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        try:
            self.wandb_run = wandb.init(
                project=project, dir=str(self.run_dir), id=run_id, resume="allow", name=name,
                config=dict(config) if config is not None else None, reinit="finish_previous",
            )  # fmt: skip
        except Exception as e:  # noqa: BLE001 - logging must never stop training
            warnings.warn(f"wandb disabled for this run: {e}", stacklevel=2)
            self.wandb_run = None

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Log scalars (names like ``reward/pos``) at ``step``."""
        clean = {k: float(v) for k, v in metrics.items() if v is not None and np.isfinite(float(v))}
        if self.tb is not None:
            for k, v in clean.items():
                self.tb.add_scalar(k, v, step)
        if self.wandb_run is not None:
            self.wandb_run.log(clean, step=step)

    def log_video(self, name: str, frames: np.ndarray, fps: int, step: int) -> None:
        """Log ``frames [T, H, W, 3]`` uint8 as a video (an mp4 in the run dir, and to wandb).

        TensorBoard gets the video only where its encoder (``moviepy.editor``, gone in
        moviepy 2) is importable.
        """
        import importlib.util

        import imageio.v2 as imageio

        path = self.run_dir / "videos" / f"{name.replace('/', '_')}_{step:09d}.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        imageio.mimsave(path, list(frames), fps=fps, macro_block_size=1)
        if self.tb is not None and importlib.util.find_spec("moviepy.editor") is not None:
            self.tb.add_video(name, np.transpose(frames, (0, 3, 1, 2))[None], step, fps=fps)
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({name: wandb.Video(str(path), format="mp4")}, step=step)

    def log_json(self, name: str, payload: Mapping) -> Path:
        """Write ``payload`` as ``RUN_DIR/<name>.json``."""
        path = self.run_dir / f"{name}.json"
        path.write_text(json.dumps(payload, indent=2, default=float))
        return path

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None
