"""The installed copy: build the wheel, install it in a fresh venv, run ``engram`` from there.

pyproject.toml finds the packages (``[tool.setuptools.packages.find]``); this test is what
notices a sub-package or a migration file missing from the wheel, or tests/ and bench/ leaking
into it. Nothing is downloaded: the wheel is built with the venv's own setuptools and wheel
(``--no-build-isolation``; both are in the ``dev`` extra) and the fresh venv borrows the
current interpreter's site-packages for the dependencies through a ``.pth`` file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from actors.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("runtime", "actors", "memory", "migrations")
TIMEOUT = 120  # seconds, for each subprocess
PIP = ("-m", "pip", "--disable-pip-version-check")  # no network: --no-index on every call

pytestmark = pytest.mark.slow


def _source_packages(root: Path) -> set[str]:
    """Every package of the source tree: a folder under TOP_LEVEL with an ``__init__.py``."""
    found: set[str] = set()
    for top in TOP_LEVEL:
        for init in (root / top).rglob("__init__.py"):
            found.add(init.parent.relative_to(root).as_posix())
    return found


def _expected_files(root: Path) -> set[str]:
    """The wheel's files outside its dist-info: each package's modules, the migrations, the
    systemd unit, the export's schemas with their licence and the dashboard's templates
    (package data)."""
    files: set[str] = set()
    for package in _source_packages(root):
        files |= {p.relative_to(root).as_posix() for p in (root / package).glob("*.py")}
        files |= {p.relative_to(root).as_posix() for p in (root / package).glob("*.service")}
    files |= {p.relative_to(root).as_posix() for p in (root / "migrations").glob("*.sql")}
    schemas = root / "memory" / "export" / "schemas"
    files |= {p.relative_to(root).as_posix() for p in schemas.iterdir() if p.is_file()}
    templates = root / "actors" / "dashboard" / "templates"
    files |= {p.relative_to(root).as_posix() for p in templates.glob("*.html")}
    return files


def _copy_source(dest: Path) -> Path:
    """The work tree without .git, the venv, caches and build leftovers.

    Building in the work tree itself would write build/ and *.egg-info there, and a stale
    build/lib keeps modules since deleted from the source, so the wheel would still have them.
    """

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {
            n
            for n in names
            if n.startswith(".")
            or n in ("__pycache__", "build", "dist")
            or n.endswith((".egg-info", ".pyc"))
        }

    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def _clean_env(**extra: str) -> dict[str, str]:
    """The process environment without anything that could import the source tree or reach
    another interpreter's packages, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONUSERBASE")
        and not k.startswith("ENGRAM_")
        and k != "DATABASE_URL"
    }
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra)
    return env


def _run(
    argv: list[str | Path], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"{result.args} exited {result.returncode}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    return result.stdout


def _build_backend_present() -> None:
    """``--no-build-isolation`` uses this interpreter's setuptools and wheel."""
    missing = []
    for name in ("setuptools", "wheel"):
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed in {sys.prefix}: "
            "install the dev extra (pip install -e '.[dev]')"
        )


def _build_wheel(source: Path, out: Path) -> Path:
    _build_backend_present()
    _ok(
        _run(
            [
                sys.executable,
                *PIP,
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "-w",
                out,
                source,
            ],
            cwd=source,
            env=_clean_env(),
        )
    )
    (wheel,) = out.glob("engram-*.whl")
    return wheel


def _subcommands() -> set[str]:
    (action,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(action.choices)


def _make_venv(root: Path, cwd: Path) -> Path:
    _ok(_run([sys.executable, "-m", "venv", root], cwd=cwd, env=_clean_env()))
    return root / "bin" / "python"


def _venv_site_packages(python: Path, cwd: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return Path(_ok(_run([python, "-c", code], cwd, _clean_env())).strip())


def test_wheel_installs_and_runs(tmp_path: Path, database_url: str) -> None:
    source = _copy_source(tmp_path / "src")
    wheel = _build_wheel(source, tmp_path / "dist")

    # the wheel holds every package and migration of the source tree, and nothing else
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    dist_info = {n for n in names if n.split("/")[0].endswith(".dist-info")}
    packaged = set(names) - dist_info
    packaged_dirs = {n.rsplit("/", 1)[0] for n in packaged if "/" in n}
    assert _source_packages(REPO) <= _source_packages(source)  # the copy missed nothing
    assert _source_packages(source) - packaged_dirs == set(), "sub-packages missing from wheel"
    sql = {f"migrations/{p.name}" for p in (source / "migrations").glob("*.sql")}
    assert sql, "no migrations in the source tree"
    assert sql <= packaged, f"migrations missing from the wheel: {sorted(sql - packaged)}"
    assert packaged == _expected_files(source), (
        f"missing: {sorted(_expected_files(source) - packaged)}; "
        f"unexpected: {sorted(packaged - _expected_files(source))}"
    )
    assert {n.split("/")[0] for n in packaged} == set(TOP_LEVEL)  # no tests/, bench/
    entry_points = next(n for n in dist_info if n.endswith("/entry_points.txt"))
    with zipfile.ZipFile(wheel) as zf:
        assert "engram = actors.cli.main:main" in zf.read(entry_points).decode()

    # a fresh venv, run from a folder outside the repository with PYTHONPATH unset
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    venv = tmp_path / "venv"
    python = _make_venv(venv, outside)
    _ok(
        _run(
            [python, *PIP, "install", "-q", "--no-deps", "--no-index", wheel],
            outside,
            _clean_env(),
        )
    )
    # the dependencies come from this interpreter's site-packages, added after the venv's own
    # (written only now, so pip above saw no second engram); a .pth line only extends sys.path,
    # the editable install's own .pth over there is not processed
    venv_site = _venv_site_packages(python, outside)
    here = [*site.getsitepackages(), sysconfig.get_path("purelib")]
    (venv_site / "_engram_test_deps.pth").write_text("".join(f"{p}\n" for p in dict.fromkeys(here)))

    env = _clean_env(DATABASE_URL=database_url, ENGRAM_HOME=str(tmp_path / "home"))
    where = _ok(
        _run(
            [
                python,
                "-c",
                "import actors.cli.main as m, migrations; "
                "print(m.__file__); print(migrations.__file__)",
            ],
            outside,
            env,
        )
    )
    for line in where.splitlines():
        assert Path(line).resolve().is_relative_to(venv_site.resolve()), where

    engram = venv / "bin" / "engram"
    help_text = _ok(_run([engram, "--help"], outside, env))
    listed = {m[1] for m in re.finditer(r"^\s{2,}(\S+)\s", help_text, re.M)}
    assert _subcommands() <= listed, f"not in --help: {_subcommands() - listed}\n{help_text}"

    migrated = _ok(_run([engram, "migrate"], outside, env)).strip().splitlines()[-1]
    files = ", ".join(sorted(p.rsplit("/", 1)[1] for p in sql))
    assert migrated == f"applied {len(sql)} migration(s): {files}", migrated
    again = _ok(_run([engram, "migrate"], outside, env)).strip().splitlines()[-1]
    assert again == "applied 0 migration(s)", again

    # the export's schemas are package data: a Letta Agent File is checked against its schema
    # and an import checks the snapshot against the shipped one
    af = outside / "empty.af"
    _ok(_run([engram, "memory", "export", "--chat", "1", "--format", "af", "-o", af], outside, env))
    assert json.loads(af.read_text())["blocks"][0]["label"] == "human"
    snap = outside / "empty.json"
    _ok(_run([engram, "memory", "export", "--chat", "1", "-o", snap], outside, env))
    restored = _ok(_run([engram, "memory", "import", snap, "--embeddings", "none"], outside, env))
    assert "chat 1: imported" in restored, restored

    # the systemd unit is package data: the installed command prints it, pointing at itself
    unit = _ok(_run([engram, "systemd-unit", "--user", "bot"], outside, env))
    assert f"ExecStart={engram} serve" in unit
    assert "User=bot" in unit and f"EnvironmentFile={outside.resolve()}/.env" in unit
