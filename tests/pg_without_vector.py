"""A real PostgreSQL 16 without pgvector, built from pgserver's binaries minus the extension.

Used to check the error a user gets when DATABASE_URL points at a server that lacks pgvector.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _run(cmd: list[str], user: str | None, libs: Path) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": str(libs)}
    subprocess.run(cmd, check=True, capture_output=True, user=user, timeout=60, env=env)


@contextmanager
def postgres_without_pgvector() -> Iterator[str]:
    """Start a throwaway server whose install has no vector extension; yield its URL."""
    import pgserver

    source = Path(pgserver.__file__).parent / "pginstall"
    libs = Path(pgserver.__file__).parent.parent / "pgserver.libs"  # the binaries' RPATH target
    root = Path(tempfile.mkdtemp(prefix="engram-novector-"))
    install = root / "pginstall"
    shutil.copytree(
        source, install, symlinks=True, ignore=shutil.ignore_patterns("vector*", "include")
    )
    pgdata, sock = root / "data", root / "sock"
    sock.mkdir()
    user = None
    if os.geteuid() == 0:  # postgres refuses to run as root; pgserver's user exists by now
        user = "pgserver"
        os.chmod(root, 0o755)
        shutil.chown(sock, user)
        pgdata.mkdir()
        shutil.chown(pgdata, user)
    bin_dir = install / "bin"
    try:
        initdb = str(bin_dir / "initdb")
        _run([initdb, "-D", str(pgdata), "-U", "postgres", "--auth=trust"], user, libs)
        _run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(pgdata),
                "-w",
                "-l",
                str(sock / "server.log"),
                "-o",
                f"-k {sock} -c listen_addresses=''",
                "start",
            ],
            user,
            libs,
        )
        yield f"postgresql://postgres@/postgres?host={sock}"
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            pg_ctl = str(bin_dir / "pg_ctl")
            _run([pg_ctl, "-D", str(pgdata), "-m", "immediate", "stop"], user, libs)
        shutil.rmtree(root, ignore_errors=True)
