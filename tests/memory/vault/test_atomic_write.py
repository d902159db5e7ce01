"""Atomic vault writes, from outside the process: a writer SIGKILLed between writing (and
fsyncing) the temporary file and renaming it over the page leaves the old page whole, and the
next sync removes the leftover temporary file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from memory.vault.files import TEMP_MARK, atomic_write, sync_folder

# The child stops inside atomic_write at the rename (os.replace): the temporary file is
# written and fsynced; it says so, then waits to be killed.
CHILD = """
import os, sys, time
from pathlib import Path
from memory.vault.files import atomic_write

def stop_here(src, dst):
    print("ready", src, flush=True)
    time.sleep(60)

os.replace = stop_here
atomic_write(Path(sys.argv[1]), sys.argv[2].encode())
"""


def test_a_kill_between_temp_and_rename_leaves_the_old_file(tmp_path: Path) -> None:
    page = tmp_path / "patterns" / "1-likes-tea.md"
    page.parent.mkdir()
    old = "---\nid: 1\n---\n\n# Likes tea\n"
    atomic_write(page, old.encode())
    new = "---\nid: 1\n---\n\n# Likes green tea, a lot\n" * 50
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(page), new],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("ready"), line
        temp = Path(line.split(" ", 1)[1].strip())
        assert temp.parent == page.parent and TEMP_MARK in temp.name
        assert temp.read_text() == new  # the new text is complete, only not renamed yet
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert page.read_text() == old  # the old page, whole
    stats = sync_folder(tmp_path, {"patterns/1-likes-tea.md": new})
    assert stats.written == 1
    assert sorted(p.name for p in page.parent.iterdir()) == ["1-likes-tea.md"]  # no leftover
    assert page.read_text() == new


def test_a_failed_rename_raises_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "MEMORY.md"
    target.mkdir()  # a folder where the page should be: the rename fails
    (target / "keep").write_text("x")
    try:
        atomic_write(target, b"new\n")
    except OSError:
        pass
    else:
        raise AssertionError("renaming over a non-empty folder succeeded")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["MEMORY.md"]
    assert (target / "keep").read_text() == "x"
