"""runtime/logs.py: every record (structlog's and the stdlib's) rendered by structlog, secrets
scrubbed, and log lines written above a progress bar instead of through it."""

from __future__ import annotations

import io
import json
import logging
import warnings

import structlog

from runtime.logs import configure_logging
from runtime.progress import Progress, write_line

SECRET = "sk-very-secret-value"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_stdlib_records_and_warnings_are_json_lines(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("INFO", "json", [SECRET], stream=out)
    structlog.get_logger("engram.test").info("ours", token=SECRET)
    logging.getLogger("hypercorn.error").warning("Running on %s with %s", "http://x", SECRET)
    logging.getLogger("asyncpg.pool").info("connection %d", 3)
    logging.getLogger("httpx").info("HTTP Request: POST /x")  # quiet at INFO
    try:
        raise ValueError(f"boom {SECRET}")
    except ValueError:
        logging.getLogger("quart.app").exception("request failed")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(True)
        warnings.warn("an old API", DeprecationWarning, stacklevel=1)
        logging.captureWarnings(False)
    lines = out.getvalue().splitlines()
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    assert [e["event"] for e in events[:3]] == [
        "ours",
        "Running on http://x with [REDACTED]",
        "connection 3",
    ]
    assert events[0]["token"] == "[REDACTED]"
    assert events[1]["logger"] == "hypercorn.error" and events[1]["level"] == "warning"
    assert all("timestamp" in e for e in events)
    failed = events[3]
    assert failed["event"] == "request failed" and failed["level"] == "error"
    assert "ValueError: boom [REDACTED]" in failed["exception"]
    assert events[4]["logger"] == "py.warnings" and "an old API" in events[4]["event"]
    assert len(events) == 5  # the httpx INFO line was not written
    assert SECRET not in out.getvalue()


def test_chatty_libraries_speak_at_debug(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("DEBUG", "json", stream=out)
    logging.getLogger("httpx").info("HTTP Request: POST /x")
    assert json.loads(out.getvalue())["logger"] == "httpx"


def test_console_format_renders_stdlib_records_too(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging("INFO", "console", stream=out)
    logging.getLogger("hypercorn.error").warning("port %d busy", 8080)
    text = out.getvalue()
    assert "port 8080 busy" in text and "warning" in text.lower()
    assert not text.startswith("{")


def test_a_log_line_is_written_above_a_drawn_progress_bar() -> None:
    tty = Tty()
    bar = Progress(10, label="importing", stream=tty, min_interval=0)
    bar.start()
    bar.advance(4)
    tty.seek(0)
    tty.truncate()
    write_line(tty, "a warning")
    # the bar's line is cleared, the log line written, the bar drawn again below it
    text = tty.getvalue()
    assert text.startswith("\r\x1b[Ka warning\n\r")
    assert "4/10" in text.split("\n", 1)[1]
    bar.finish()
    tty.seek(0)
    tty.truncate()
    write_line(tty, "after")
    assert tty.getvalue() == "after\n"  # no bar any more: nothing to clear or redraw


def test_structlog_events_go_above_the_bar_too(restore_logging: None) -> None:
    tty = Tty()
    configure_logging("INFO", "json", stream=tty)
    with Progress(3, label="re-embedding", stream=tty, min_interval=0) as bar:
        bar.advance()
        structlog.get_logger().warning("slow batch")
        bar.advance()
    text = tty.getvalue()
    before, _, after = text.partition('{"event": "slow batch"')
    assert before.endswith("\r\x1b[K")  # the bar was cleared before the event was written
    assert "1/3" in before and "1/3" in after.split("\n", 1)[1]  # and redrawn after it
