"""Shared set-up of the generator tests (``tests/test_generators_*.py``): the CMU clips and
small real view datasets built from them."""

import sys

import pytest

from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()
HAVE_MOCAP = (MOCAP / "cmu_walk.npz").is_file()
needs_mocap = pytest.mark.skipif(not HAVE_MOCAP, reason=f"CMU clips not found in {MOCAP}")
TINY = ["train.max_steps=6", "train.eval_every=3", "train.ckpt_every=3", "optim.warmup_steps=2"]
"""Generator app settings of a few steps (tests of the plumbing, not of learning)."""


def run_main(app, args: list[str]) -> None:
    """Call a Hydra app's ``main`` in-process with command-line overrides."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", [app.__name__, *args])
        app.main()


def build_views(tmp_path_factory, name: str = "views", **spec):
    """A view dataset of CMU walk and run (``ViewDatasetSpec(**spec)``) in a fresh folder.

    Returns:
        ``(folder, spec, written files)``; skips the test where the clips are absent.
    """
    from mimic2dm.generators.data import ViewDatasetSpec, build_view_dataset

    if not HAVE_MOCAP:
        pytest.skip(f"CMU clips not found in {MOCAP}")
    out = tmp_path_factory.mktemp(name)
    s = ViewDatasetSpec(**{"clips": ("cmu_walk", "cmu_run"), **spec})
    return out, s, build_view_dataset(out, s, MOCAP)
