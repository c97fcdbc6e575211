"""Start-up of long clips: fitted initial states are cached (a second start skips the
inverse kinematics) and equal the eager fit; ``mimic2dm bench startup`` measures it."""

import json

import pytest
import torch
from typer.testing import CliRunner

from mimic2dm.characters import load_character
from mimic2dm.utils.paths import mocap_dir

pytestmark = pytest.mark.skipif(
    not (mocap_dir() / "cmu_walk.npz").is_file(), reason="shared mocap missing"
)


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    from mimic2dm.startup_bench import make_clip

    return make_clip(1.0, tmp_path_factory.mktemp("clip") / "walk.npz")


def test_a_second_start_reads_the_fit_back_equal_to_the_eager_fit(
    walk, tmp_path, monkeypatch, caplog
):
    import mimic2dm.tasks.tracking2d.initial as initial
    from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary

    monkeypatch.setenv("MIMIC2DM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(initial, "_FIT_CACHE", {})
    spec = load_character("humanoid")
    lib = ReferenceLibrary.from_files([walk], 30.0)
    kp = lib.clips[0].keypoints3d
    caplog.set_level("INFO", logger=initial.__name__)
    # the first start fits eagerly, as every start did before the cache (``_fit``)
    first = eager = initial.fit_reference_poses(kp, spec, lib.control_hz)
    assert f"fitting the humanoid to {kp.shape[0]} reference frames" in caplog.text  # progress line
    assert len(list((tmp_path / "cache" / "initial_states").glob("*.pt"))) == 1
    monkeypatch.setattr(initial, "_FIT_CACHE", {})  # a new process
    monkeypatch.setattr(
        initial, "_fit", lambda *a: pytest.fail("fitted again instead of reading the cache")
    )
    second = initial.fit_reference_poses(kp, spec, lib.control_hz)
    assert "(cached fit)" in caplog.text
    for k in eager:
        assert torch.allclose(first[k], eager[k], atol=1e-5) and torch.allclose(
            second[k], eager[k], atol=1e-5
        ), k
    # another setting of the fit is another file
    monkeypatch.setattr(initial, "_fit", lambda *a: {k: v + 1 for k, v in eager.items()})
    other = initial.fit_reference_poses(kp, spec, lib.control_hz, level_feet=True)
    assert torch.allclose(other["dof_pos"], eager["dof_pos"] + 1)


@pytest.mark.slow
def test_bench_startup_reports_cold_and_warm_times_and_the_ratio(tmp_path):
    from mimic2dm.cli import app

    out = tmp_path / "startup.json"
    res = CliRunner().invoke(
        app, ["bench", "startup", "--seconds", "1,2", "--num-envs", "4", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert set(r["clips"]) == {"1s", "2s"} and {
        "cold_s",
        "warm_s",
        "cold_extra_mb",
        "warm_extra_mb",
    } <= set(r["ratios"])
    assert all(
        c[m]["build_s"] > 0 and c[m]["peak_mb"] > 0
        for c in r["clips"].values()
        for m in ("cold", "warm")
    )
    assert "long / short" in res.output
