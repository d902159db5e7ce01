"""The local token: made once, mode 0600, shared by every user of ENGRAM_HOME, refused when
others may read it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from actors.local.errors import TokenProblem
from actors.local.token import load_or_create, matches, token_path


def test_created_on_first_use_with_mode_0600_then_reused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    token = load_or_create(home)
    path = token_path(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 32
    assert load_or_create(home) == token
    assert [p.name for p in home.iterdir()] == [path.name]  # no temporary file left


def test_a_second_creator_keeps_the_first_token(tmp_path: Path) -> None:
    first = load_or_create(tmp_path)
    token_path(tmp_path).unlink()
    second = load_or_create(tmp_path)
    assert second != first  # a deleted token is replaced by a new one
    assert load_or_create(tmp_path) == second


def test_a_token_others_may_read_is_refused(tmp_path: Path) -> None:
    load_or_create(tmp_path)
    token_path(tmp_path).chmod(0o644)
    with pytest.raises(TokenProblem, match="chmod 600"):
        load_or_create(tmp_path)


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    path = token_path(tmp_path)
    path.write_text("\n")
    path.chmod(0o600)
    with pytest.raises(TokenProblem, match="no token"):
        load_or_create(tmp_path)


def test_matches_compares_whole_tokens() -> None:
    assert matches("a" * 43, "a" * 43)
    assert not matches("a" * 43, "a" * 42)
    assert not matches("a" * 43, "")
