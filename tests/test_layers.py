"""The import graph follows the layer table (docs/layout.md).

Every module of ``mimic2dm`` (with ``tasks/`` and ``generators/`` installed as
``mimic2dm.tasks`` / ``mimic2dm.generators``) is parsed with ``ast``; every import counts,
including those inside functions and under ``TYPE_CHECKING``, and the string module names
handed to ``importlib.import_module`` / the registries' ``_lazy``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"mimic2dm": ROOT / "mimic2dm", "mimic2dm.tasks": ROOT / "tasks",
           "mimic2dm.generators": ROOT / "generators"}  # fmt: skip

# ---------------------------------------------------------------------------- the table
# Layer of each package (``mimic2dm.<name>`` sub-package or top-level module). A module may
# import its own package and packages on a LOWER layer only; packages that share a layer
# never import each other.
LAYERS: dict[str, int] = {
    "mimic2dm": 0,  # the package root: only __version__
    "utils": 0,
    "geometry": 1,
    "metrics": 1,
    "motion": 2,
    "characters": 3,
    "engines": 4,
    "render": 4,
    "tasks": 5,
    "video": 5,
    "generators": 5,
    "preprocess": 5,
    "rl": 6,
    # apps: anything below, and each other
    "train": 7,
    "app": 7,
    "eval": 7,
    "cli": 7,
    "demo": 7,
    "export": 7,
    "jobs": 7,
    "train_bench": 7,
    "control": 7,
    "compare": 7,
    "imitate": 7,
    "distill": 7,
}
APP_LAYER = 7

# Within a layer, these may use their neighbour (render draws the engines' states).
SAME_LAYER_USES: dict[str, set[str]] = {"render": {"engines"}}

# Packages beside ``tasks`` use a narrower set of what is below them.
SIDE_DEPS: dict[str, set[str]] = {
    "video": {"mimic2dm", "utils", "geometry", "metrics", "motion", "characters"},
    "preprocess": {"mimic2dm", "utils", "geometry", "metrics", "motion", "characters"},
    # characters: the shared mocap clips of the view dataset; render: videos of samples
    "generators": {"mimic2dm", "utils", "geometry", "metrics", "motion", "characters", "render"},
}

# The keypoint sets are the leaf of ``motion``: characters and every layer above refer to
# them, so they import nothing of the project but the registry helper.
LEAVES: dict[str, set[str]] = {"mimic2dm.motion.keypoint_sets": {"utils"}}

# Command-line front ends and benchmarks inside a package count as apps (layer 7): they
# may import anything, and no non-app module may import them.
APP_MODULE_NAMES = {"cli", "bench"}
APP_MODULE_SUFFIXES = ("_cli", "_bench")

# Known exceptions, each with its reason. Keep this short.
ALLOWED: dict[tuple[str, str], str] = {
    ("mimic2dm.motion.format", "mimic2dm.characters.registry"): (
        "a Motion2D file's init_* states name their character; validating them needs its DoF "
        "count (lazy import in _check_estimates)"
    ),
}

# Tolerated violations, each with the fix it needs, so the rest is enforced; reported as
# stale (so it is removed) as soon as the import is gone. Empty today.
PENDING: dict[tuple[str, str], str] = {}


# ---------------------------------------------------------------------------- the graph
def _modules() -> dict[str, Path]:
    mods = {}
    for pkg, folder in SOURCES.items():
        for p in sorted(folder.rglob("*.py")):
            rel = p.relative_to(folder).with_suffix("")
            mods[".".join([pkg, *rel.parts]).removesuffix(".__init__")] = p
    return mods


MODULES = _modules()


def package(mod: str) -> str:
    """``mimic2dm.motion.format`` -> ``motion``; ``mimic2dm.cli`` -> ``cli``."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "mimic2dm"


def _app_named(mod: str) -> bool:
    last = mod.rsplit(".", 1)[-1]
    return last in APP_MODULE_NAMES or last.endswith(APP_MODULE_SUFFIXES)


def is_app(mod: str) -> bool:
    return _app_named(mod) or LAYERS[package(mod)] == APP_LAYER


def layer(mod: str) -> int:
    return APP_LAYER if is_app(mod) else LAYERS[package(mod)]


def _resolve(name: str) -> str:
    """The longest known module that ``name`` starts with (``pkg.attr`` -> ``pkg``)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


@functools.cache
def imports_of(mod: str) -> frozenset[tuple[str, int]]:
    """Project modules imported anywhere in ``mod``, with the line number."""
    path = MODULES[mod]
    pkg_parts = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    pkg_parts[: len(pkg_parts) - node.level + 1] + ([base] if base else [])
                )
            # `from pkg import sub` imports the module pkg.sub
            names = [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call):
            fn = node.func
            fname = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if fname in ("import_module", "_lazy"):
                names = [
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                ]
        for n in names:
            if n == "mimic2dm" or n.startswith("mimic2dm."):
                out.add((_resolve(n), node.lineno))
    return frozenset(out)


def violations() -> list[str]:
    bad = []
    for mod in MODULES:
        src_pkg, src_layer = package(mod), layer(mod)
        src_pkg = mod if src_layer == APP_LAYER and src_pkg not in LAYERS else src_pkg
        for dst, line in sorted(imports_of(mod)):
            dst_pkg = package(dst)
            if (mod, dst) in ALLOWED or (mod, dst) in PENDING or dst == mod:
                continue
            why = None
            if mod in LEAVES and dst_pkg not in LEAVES[mod]:
                why = f"{mod} is a leaf (may import {sorted(LEAVES[mod])} only)"
            elif is_app(dst) and not is_app(mod):
                why = "only apps import apps"
            elif dst_pkg == src_pkg or src_layer == APP_LAYER:
                continue
            elif dst_pkg in SAME_LAYER_USES.get(src_pkg, ()) and layer(dst) == src_layer:
                continue
            elif layer(dst) >= src_layer:
                why = f"layer {src_pkg}={src_layer} imports {dst_pkg}={layer(dst)}"
            elif src_pkg in SIDE_DEPS and dst_pkg not in SIDE_DEPS[src_pkg]:
                why = f"{src_pkg} may import {sorted(SIDE_DEPS[src_pkg])}"
            if why:
                bad.append(f"{MODULES[mod].relative_to(ROOT)}:{line}: {mod} -> {dst} ({why})")
    return bad


# ---------------------------------------------------------------------------- tests
def test_every_package_has_a_layer():
    missing = sorted({package(m) for m in MODULES if not _app_named(m)} - set(LAYERS))
    assert not missing, (
        f"add these packages to LAYERS (tests/test_layers.py, docs/layout.md): {missing}"
    )


def test_imports_follow_the_layers():
    bad = violations()
    assert not bad, "imports against the layer table (docs/layout.md):\n" + "\n".join(bad)


def test_allowed_exceptions_are_still_needed():
    used = {(m, d) for m in MODULES for d, _ in imports_of(m)}
    stale = sorted((set(ALLOWED) | set(PENDING)) - used)
    assert not stale, f"remove these from ALLOWED / PENDING in tests/test_layers.py: {stale}"


@pytest.mark.parametrize(
    "src, dst, expected",
    [
        (
            "mimic2dm.geometry.camera",
            "mimic2dm.motion.keypoint_sets",
            "geometry=1 imports motion=2",
        ),
        ("mimic2dm.rl.observer", "mimic2dm.eval", "only apps import apps"),
        ("mimic2dm.video.pipeline", "mimic2dm.engines.base", "video may import"),
        ("mimic2dm.motion.keypoint_sets", "mimic2dm.geometry.rotations", "is a leaf"),
        ("mimic2dm.tasks.base", "mimic2dm.video.pipeline", "tasks=5 imports video=5"),
        ("mimic2dm.engines.base", "mimic2dm.render", "engines=4 imports render=4"),
    ],
)
def test_the_checker_catches_a_bad_import(monkeypatch, src, dst, expected):
    """The checker itself: a planted upward import is reported with its reason."""
    real = imports_of

    def planted(mod):
        return real(mod) | ({(dst, 1)} if mod == src else set())

    monkeypatch.setitem(globals(), "imports_of", planted)
    bad = [b for b in violations() if f"{src} -> {dst}" in b]
    assert bad and expected in bad[0], bad


def test_apps_inside_packages_are_apps():
    assert is_app("mimic2dm.motion.cli") and is_app("mimic2dm.engines.bench_cli")
    assert is_app("mimic2dm.video.bench") and not is_app("mimic2dm.video.pipeline")
    assert layer("mimic2dm.characters.clips") == 3
