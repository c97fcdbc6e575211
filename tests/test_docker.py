"""docker/*.Dockerfile without a Docker engine: hadolint passes, every path, make target,
console script and config the images use exists, and their install steps are the Makefile's."""

import fnmatch
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = {"cpu": ROOT / "docker" / "cpu.Dockerfile", "gpu": ROOT / "docker" / "gpu.Dockerfile"}
HADOLINT = Path(sys.executable).parent / "hadolint"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        cur += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def run_commands(path: Path) -> list[list[str]]:
    """Every shell command of the RUN lines (split at ``&&``), as argument lists."""
    cmds = []
    for word, args in instructions(path):
        if word == "RUN":
            cmds += [shlex.split(c) for c in args.split("&&") if c.strip()]
    return cmds


def pip_installs(cmds: list[list[str]]) -> list[list[str]]:
    """What each ``pip install`` installs (its arguments without options and their values)."""
    out = []
    for c in cmds:
        if "pip" in c and "install" in c:
            args, skip = c[c.index("install") + 1 :], False
            specs = []
            for a in args:
                if skip:
                    skip = False
                elif a in ("--index-url", "--extra-index-url", "-i"):
                    skip = True
                elif a == "-e" or not a.startswith("-"):
                    specs.append(a)
            out.append(specs)
    return out


def makefile_setup_commands() -> list[list[str]]:
    """The commands of the Makefile's ``$(STAMP)`` (``make setup``) recipe."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = lines.index("$(STAMP): pyproject.toml")
    cmds = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        cmds.append(shlex.split(line.strip()))
    return cmds


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.M))


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_hadolint_passes(name):
    res = subprocess.run([str(HADOLINT), "--config", str(ROOT / ".hadolint.yaml"), "--no-color",
                          str(DOCKERFILES[name])], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


def test_hadolint_fails_on_a_warning(tmp_path):
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install numpy\n")
    res = subprocess.run([str(HADOLINT), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(bad)],
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode != 0 and "DL3007" in res.stdout and "DL3013" in res.stdout


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_copied_paths_exist_and_are_in_the_build_context(name):
    ignored = [
        p.strip()
        for p in (ROOT / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    copies = [shlex.split(a) for w, a in instructions(DOCKERFILES[name]) if w == "COPY"]
    assert copies, "the image copies nothing"
    for args in copies:
        for src in [a for a in args[:-1] if not a.startswith("--")]:
            assert (ROOT / src).exists(), f"{DOCKERFILES[name].name}: COPY {src}: not in the repo"
            assert not any(fnmatch.fnmatch(src, pat) for pat in ignored), (
                f"COPY {src} is in .dockerignore"
            )
    copied = {s.rstrip("/") for args in copies for s in args[:-1]}
    # what `pip install -e .` needs: the project file, its readme and every package directory
    needed = {"pyproject.toml", PYPROJECT["project"]["readme"]}
    needed |= {d.split("/")[0] for d in PYPROJECT["tool"]["setuptools"]["package-dir"].values()}
    assert needed <= copied, f"{name}: not copied: {needed - copied}"


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_install_steps_are_the_makefiles(name):
    """torch at the project's pin first, then ``-e .[extras]`` with the Makefile's extras (+
    extras declared in pyproject.toml), all in the venv that the image puts first on PATH."""
    make = pip_installs(makefile_setup_commands())
    make = [m for m in make if m != ["pip"]]  # `install --upgrade pip`
    image = pip_installs(run_commands(DOCKERFILES[name]))
    assert len(make) == len(image) == 2, (make, image)
    torch_pin = next(d for d in PYPROJECT["project"]["dependencies"] if d.startswith("torch=="))
    assert make[0] == image[0] == [torch_pin]
    m_extras = re.fullmatch(r"-e \.\[([\w,]+)\]", " ".join(make[1]))
    i_extras = re.fullmatch(r"-e \.\[([\w,-]+)\]", " ".join(image[1]))
    assert m_extras and i_extras, (make[1], image[1])
    extras = set(i_extras[1].split(","))
    assert set(m_extras[1].split(",")) <= extras
    declared = set(PYPROJECT["project"]["optional-dependencies"])
    assert extras <= declared, f"{name}: extras {extras - declared} not in pyproject.toml"
    pips = [c for c in run_commands(DOCKERFILES[name]) if "pip" in c and "install" in c]
    assert all(c[0] == "/opt/venv/bin/python" for c in pips)
    env = " ".join(a for w, a in instructions(DOCKERFILES[name]) if w == "ENV")
    assert "PATH=/opt/venv/bin:$PATH" in env


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_commands_targets_and_configs_exist(name):
    path = DOCKERFILES[name]
    targets = make_targets()
    for c in run_commands(path):
        if c[0] == "make":
            assert set(c[1:]) <= targets, f"{path.name}: make {c[1:]}: no such target"
        for a in c:
            if "/" in a and not a.startswith(("/", "-", "http", "$")) and "=" not in a:
                assert (ROOT / a).exists(), f"{path.name}: {a}: not in the repo"
    cmd = next(a for w, a in instructions(path) if w == "CMD")
    argv = json.loads(cmd)
    assert argv[0] in PYPROJECT["project"]["scripts"], (
        f"{path.name}: CMD {argv[0]} is no console script"
    )
    for arg in argv[1:]:  # Hydra group choices: conf/<group>/<choice>.yaml
        key, eq, value = arg.partition("=")
        if eq and (ROOT / "conf" / key).is_dir():
            assert (ROOT / "conf" / key / f"{value}.yaml").is_file(), f"{path.name}: CMD {arg}"
    python = "3.11" if name == "gpu" else ""
    first = instructions(path)[0]
    assert first[0] == "FROM" and ("python:3.11" in first[1] or python == "3.11")
    if python:
        assert any(c[:3] == ["python3.11", "-m", "venv"] for c in run_commands(path))


def test_makefile_builds_both_images_from_the_repo_root():
    text = (ROOT / "Makefile").read_text()
    for name, path in DOCKERFILES.items():
        assert f"docker-{name}" in make_targets()
        assert re.search(rf"^docker-{name}:\n\t\$\(DOCKER\) build -f {path.relative_to(ROOT)} -t \$\(IMAGE\):{name} \.$",
                         text, re.M), f"docker-{name} does not build {path.relative_to(ROOT)}"  # fmt: skip
    assert not (ROOT / "docker" / "Dockerfile").exists()
