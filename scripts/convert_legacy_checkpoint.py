"""Convert a tracker checkpoint of format version 1 to the current format.

Version 1 kept its version at the top level. Its first layout stored the run's task as a
pickled tracking ``EnvSpec`` in ``meta["env_spec"]`` (``w_<term>`` reward weights, view and
engine settings beside the task config) and did not record the training time; its later
layout already stored the ``TaskSpec`` as plain data in ``meta["task_spec"]``. The current format
(:data:`mimic2dm.rl.policy.CHECKPOINT_VERSION`) has the ``TaskSpec`` as plain data in
``meta["task_spec"]``, the version in ``meta["format_version"]`` and ``train_seconds``.

Usage::

    .venv/bin/python scripts/convert_legacy_checkpoint.py OLD.pt NEW.pt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import load_task

from mimic2dm.rl.policy import CHECKPOINT_VERSION, checkpoint_version
from mimic2dm.utils.checkpoint import atomic_torch_save, load_checkpoint, records_to_plain

OLD_VERSION = 1
OLD_TASK = "tracking2d"
"""Version 1 predates the task registry: every checkpoint is of the 2D tracking task."""


def convert(ck: dict, path: str | Path = "checkpoint") -> dict:
    """The loaded version-1 checkpoint ``ck`` in the current layout (weights, optimiser,
    env state and RNG states unchanged).

    Raises:
        ValueError: ``ck`` is not of version 1 (``path`` names it).
    """
    found = checkpoint_version(ck)
    meta = dict(ck.get("meta") or {})
    if found != OLD_VERSION or not ({"env_spec", "task_spec"} & set(meta)):
        raise ValueError(
            f"{path}: checkpoint format version {found}, expected {OLD_VERSION} with "
            "meta['env_spec'] or meta['task_spec']"
        )
    if "env_spec" in meta:
        old_spec = records_to_plain(meta.pop("env_spec"))
        spec = TaskSpec.from_dict(load_task(OLD_TASK).upgrade_spec(old_spec))
        meta["task_spec"] = spec.to_dict()
    meta["format_version"] = CHECKPOINT_VERSION
    out = {k: v for k, v in ck.items() if k != "version"}
    out["meta"] = meta
    out["train_seconds"] = float(ck.get("train_seconds", 0.0))  # version 1 did not record it
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="checkpoint of format version 1 (.pt)")
    ap.add_argument("out", type=Path, help="converted checkpoint (.pt)")
    args = ap.parse_args(argv)
    try:
        out = convert(load_checkpoint(args.src), args.src)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    atomic_torch_save(out, args.out)
    print(
        f"wrote {args.out}: format version {CHECKPOINT_VERSION}, task {out['meta']['task_spec']['task']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
