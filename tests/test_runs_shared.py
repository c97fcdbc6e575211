"""Shared data through one function: ``MIMIC2DM_SHARED`` (set to ``/data/shared`` by the
Docker images) reaches :func:`mimic2dm.utils.paths.shared_dir`, the tracker config's
``shared_dir`` and the generators' mocap folder."""

import re
from pathlib import Path

import pytest

from mimic2dm.utils.paths import PROJECT_ROOT, mocap_dir, shared_dir

DOCKERFILES = sorted((PROJECT_ROOT / "docker").glob("*.Dockerfile"))


def dockerfile_shared(path: Path) -> str:
    """The value the image's ``ENV`` gives ``MIMIC2DM_SHARED``."""
    m = re.search(r"\bMIMIC2DM_SHARED=(\S+)", path.read_text())
    assert m, f"{path.name}: no MIMIC2DM_SHARED in its ENV"
    return m.group(1)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_images_setting_reaches_every_user_of_the_shared_data(dockerfile, monkeypatch):
    from mimic2dm.generators.data import build_view_dataset  # noqa: F401 - imports cleanly

    from mimic2dm.train import compose_config

    value = dockerfile_shared(dockerfile)
    assert value == "/data/shared"
    monkeypatch.setenv("MIMIC2DM_SHARED", value)
    assert shared_dir() == Path(value) and mocap_dir() == Path(value) / "data" / "mocap"
    cfg = compose_config(["data=cmu_walk"])
    assert cfg.shared_dir == value
    assert cfg.data.clips[0].make.mocap.startswith(f"{value}/data/mocap/")


def test_without_the_variable_the_shared_folder_is_next_to_the_project(monkeypatch):
    from mimic2dm.train import compose_config

    monkeypatch.delenv("MIMIC2DM_SHARED", raising=False)
    assert shared_dir() == PROJECT_ROOT.parent / "shared"
    assert Path(compose_config([]).shared_dir) == PROJECT_ROOT.parent / "shared"


def test_the_generators_build_from_the_shared_folder_of_the_environment(monkeypatch, tmp_path):
    from mimic2dm.generators.data import ViewDatasetSpec, build_view_dataset

    monkeypatch.setenv("MIMIC2DM_SHARED", str(tmp_path / "elsewhere"))
    with pytest.raises((FileNotFoundError, OSError, ValueError), match="elsewhere"):
        build_view_dataset(tmp_path / "out", ViewDatasetSpec(("cmu_walk",), pairs=1))
