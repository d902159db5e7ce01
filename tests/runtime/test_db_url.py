"""DATABASE_URL's one redaction rule and its validation (runtime/db_url.py), and their use in
``engram config``, the ``db.open`` log line and the unreachable-database error."""

from __future__ import annotations

import io
import json
import socket

import pytest
import trio

from actors.cli.config import config_lines
from actors.settings import load_settings
from runtime import db as dbmod
from runtime import errors
from runtime.db_url import database_url, redact_url, url_passwords, url_problem
from runtime.logs import configure_logging

PW = "Hunter2-secret"  # what no output may contain


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h:5/d", "postgresql://u:***@h:5/d"),
        ("postgresql://u@h/d", "postgresql://u@h/d"),
        (
            "postgres://h/d?password=x&sslmode=require",
            "postgres://h/d?password=***&sslmode=require",
        ),
        ("postgresql://u:p%40w@h/d?PassWord=y#f", "postgresql://u:***@h/d?PassWord=***#f"),
        (
            "postgresql://h/d?sslmode=disable&PASSWORD=",
            "postgresql://h/d?sslmode=disable&PASSWORD=***",
        ),
        ("postgresql://u:a@h/d?sslpassword=k", "postgresql://u:***@h/d?sslpassword=***"),
        ("postgresql://h1:5432,h2:5433/db", "postgresql://h1:5432,h2:5433/db"),
        ("postgresql://u:pw@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
        # not usable: nothing after the scheme is shown (a cut password may be anywhere)
        ("postgresql://u:p/ss@h/d", "postgresql://***"),
        ("postgresql://u:pw@localhost:notaport/db", "postgresql://***"),
        ("no url at all", "postgresql://***"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_url_passwords_are_every_secret_piece_as_written_and_decoded() -> None:
    assert url_passwords("postgresql://u:p%40w@h/d?PassWord=y&sslpassword=z&user=me") == [
        "p%40w",
        "p@w",
        "y",
        "z",
    ]
    assert url_passwords("postgresql://u@h/d") == []


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pw@localhost:5432/db",
        "postgres://localhost/db",
        "postgresql:///db?host=/var/run/postgresql&port=5433",
        "postgresql://h1:5432,h2:5433/db?target_session_attrs=read-write",
        "postgresql://[::1]:5432/db?sslmode=verify-full",
        "postgresql://u:p%2Fss@h/db",
    ],
)
def test_usable_urls_pass(url: str) -> None:
    assert url_problem(url) is None
    assert database_url(f"  {url} ") == url


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("mysql://x", "must start with postgresql://"),
        ("postgresql://u:Hunter2-secret@localhost:notaport/db", "port must be a number"),
        ("postgresql://localhost:99999/db", "port must be a number"),
        ("postgresql://localhost:٣/db", "port must be a number"),  # a non-ASCII digit
        ("postgresql://h/db?port=x", "port= parameter"),
        ("postgresql://u:Hunter2/secret@h/db", "@ after the host"),
        ("postgresql://u:Hunter2@secret@h/db", "more than one @"),
        ("postgresql://h/db?sslmode=Hunter2-secret", "sslmode must be one of"),
        ("postgresql://h/db?Hunter2-secret", "not name=value pairs"),
        ("postgresql://[::1/db", "IPv6"),
    ],
)
def test_unusable_urls_are_described_without_quoting_them(url: str, words: str) -> None:
    problem = url_problem(url)
    assert problem is not None and words in problem
    for piece in ("Hunter2", "secret", "notaport", "99999", "٣"):
        assert piece not in problem
    with pytest.raises(ValueError, match=words):
        database_url(url)


def test_settings_error_for_a_bad_port_names_the_variable_and_hides_the_password() -> None:
    with pytest.raises(errors.SettingsError) as info:
        load_settings({"DATABASE_URL": f"postgresql://u:{PW}@localhost:notaport/db"}, dotenv=None)
    assert info.value.name == "DATABASE_URL"
    assert PW not in str(info.value) and "notaport" not in str(info.value)


@pytest.mark.parametrize(
    "url", [f"postgresql://u:{PW}@db.example:5432/engram", f"postgresql://u@db/e?password={PW}"]
)
def test_config_shows_the_url_redacted_and_its_passwords_are_scrubbed_secrets(url: str) -> None:
    settings = load_settings({"DATABASE_URL": url}, dotenv=None)
    line = next(x for x in config_lines(settings) if x.startswith("DATABASE_URL="))
    assert line == f"DATABASE_URL={redact_url(url)}" and "***" in line
    assert PW not in line
    assert PW in settings.secrets()


@pytest.mark.parametrize("form", ["userinfo", "query"])
async def test_unreachable_database_error_and_log_have_no_password(
    form: str, restore_logging: None
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    url = (
        f"postgresql://u:{PW}@127.0.0.1:{port}/d"
        if form == "userinfo"
        else f"postgresql://u@127.0.0.1:{port}/d?password={PW}"
    )
    out = io.StringIO()
    configure_logging("DEBUG", "json", stream=out)
    async with dbmod.asyncio_loop():
        with pytest.raises(errors.DatabaseUnavailable) as info:
            async with dbmod.open_database(url, connect_timeout=0.5):
                pass
    assert PW not in str(info.value) + out.getvalue()
    assert f"127.0.0.1:{port}" in str(info.value) and "***" in str(info.value)


async def test_open_database_refuses_an_unusable_url_as_a_settings_error() -> None:
    async with dbmod.asyncio_loop():
        with pytest.raises(errors.SettingsError) as info:
            async with dbmod.open_database(f"postgresql://u:{PW}@h:notaport/d"):
                pass
    assert info.value.name == "DATABASE_URL" and PW not in str(info.value)


@pytest.mark.parametrize("form", ["userinfo", "query"])
async def test_db_open_log_line_shows_the_url_redacted(
    form: str, database_url: str, restore_logging: None
) -> None:
    # the test server trusts local connections: any password is accepted and must not show
    scheme, rest = database_url.split("://", 1)
    if form == "userinfo":
        user, host = rest.split("@", 1) if "@" in rest else ("postgres", rest)
        url = f"{scheme}://{user.split(':')[0]}:{PW}@{host}"
    else:
        url = f"{database_url}{'&' if '?' in database_url else '?'}password={PW}"
    out = io.StringIO()
    configure_logging("INFO", "json", stream=out)
    async with dbmod.asyncio_loop(), dbmod.open_database(url) as db:
        assert await db.fetchval("SELECT 1") == 1
    await trio.lowlevel.checkpoint()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    opened = next(e for e in events if e["event"] == "db.open")
    assert opened["url"] == redact_url(url) and "***" in opened["url"]
    assert PW not in out.getvalue()
