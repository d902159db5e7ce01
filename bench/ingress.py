"""Webhook ingress: acknowledged updates per second and ack latency, engram vs aiogram 3.

Starts, on this machine and in this run:

* a stub Bot API server (answers getMe / sendMessage / sendChatAction / anything with
  ``ok: true``) that also answers Anthropic's ``POST /v1/messages`` with a short text reply, so
  engram's background turns and replies never wait on the network (its embeddings are local);
* the real ``engram serve --webhook`` as a subprocess (without the flag and a webhook URL it
  long-polls and answers 404 on ``/api/telegram``), with a throwaway ``ENGRAM_HOME``
  (embedded PostgreSQL) or ``--url``, ``LOG_LEVEL=WARNING``, ``TELEGRAM_API_BASE_URL`` at the
  stub; loading starts once ``/readyz`` answers 200;
* an aiogram 3 webhook bot in its own subprocess: aiohttp web + ``SimpleRequestHandler(...,
  secret_token=..., handle_in_background=True)``, a message handler that does nothing and a
  ``Bot`` whose API server is the same stub.

Then, per round (the order alternates between rounds; before each run the bench waits until
its own processes are idle, so engram's background reply work never overlaps aiogram's run),
the load generator (``bench/_loadgen.py``, a separate process: asyncio raw sockets, keep-alive
HTTP/1.1, one request in flight per connection; no wrk needed) sends warm-up requests and then
``--requests`` distinct Telegram updates (unique ``update_id``, text message, chats from the
allowlist) over ``--concurrency`` connections, with the secret header. Only 200s count as
acknowledged. Each run also reports the CPU time per request of every process involved (read
from /proc), and how much CPU other processes on the machine used meanwhile (noise).

Not the same work: engram writes every update durably to PostgreSQL before its 200 (and its
chat actors then answer each one through the stub); aiogram stores nothing and answers 200
before its handler runs.

    python bench/ingress.py [--url postgresql://...] [--requests 5000] [--concurrency 32]
                            [--warmup 500] [--rounds 3] [--breakdown] [--profile FILE]
                            [--keep-logs DIR] [--smoke]

``--breakdown`` adds runs against engram without the database (``GET /healthz``, and updates of
a kind engram acknowledges without storing) and against the *hypercorn floor*: hypercorn with
engram's configuration serving a bare ASGI app that only answers 200, the most any app under
hypercorn can acknowledge here. ``--profile FILE`` profiles engram (cProfile, on
only during its measured runs; its figures then include the profiler's overhead) and prints the
top functions.

Last line: ``ingress ours_rps=<x> aiogram_rps=<y> ratio=<ours/aiogram> p50_ms=<a> p99_ms=<b>``
(medians over rounds; p50/p99 are engram's ack latency). Goal: ratio >= 1, p99 <= 20 ms.
A run in which a server acknowledges no update ends the bench with an error. ``--smoke`` (200
updates, 1 round) goes on without aiogram when it is not installed (the ``bench`` extra) and
says so; the last line then has ``aiogram_rps=skipped ratio=skipped``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib.util
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from _smoke import add_smoke_flag, shrink

REPO = Path(__file__).resolve().parent.parent
LOADGEN = Path(__file__).resolve().parent / "_loadgen.py"
HOST = "127.0.0.1"
WEBHOOK_PATH = "/api/telegram"
TOKEN = "123456789:BENCH_fake-token_for-local-stub_only"
SECRET = "bench-ingress-secret_0123456789"
CHAT_IDS = (1001, 1002, 1003, 1004)
GOAL_P99_MS = 20.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ``engram serve`` with cProfile switched on by SIGUSR1 and off (stats dumped) by SIGUSR2, so
# only the measured runs are profiled (the server code is not touched).
PROFILE_WRAPPER = """
import cProfile, runpy, signal, sys
path = sys.argv[1]
prof = cProfile.Profile()
def on(signum, frame):
    prof.enable()
def off(signum, frame):
    prof.disable()
    prof.dump_stats(path)
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGUSR2, off)
sys.argv = ["engram", "serve", "--webhook"]
runpy.run_module("actors.cli", run_name="__main__", alter_sys=True)
"""


class BenchError(Exception):
    """A failure that ends the benchmark with one line on stderr."""


# --- role: stub Bot API server (subprocess) -------------------------------------------------


def role_stub(port: int) -> None:
    """Minimal keep-alive HTTP/1.1 Bot API stub on asyncio; prints call counts on SIGTERM."""
    import asyncio

    counts: dict[str, int] = {}
    next_id = [1]

    def answer(method: str) -> bytes:
        counts[method] = counts.get(method, 0) + 1
        result: Any = True
        if method == "messages":  # Anthropic Messages API (engram's turns): a short answer
            message = {
                "id": f"msg_bench{next_id[0]}",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "Noted."}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 50, "output_tokens": 3},
            }
            next_id[0] += 1
            body = json.dumps(message).encode()
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            return head.encode() + body
        if method == "getMe":
            result = {
                "id": 123456789,
                "is_bot": True,
                "first_name": "Bench",
                "username": "bench_bot",
            }
        elif method == "sendMessage":
            next_id[0] += 1
            result = {
                "message_id": next_id[0],
                "date": int(time.time()),
                "chat": {"id": 1, "type": "private"},
                "text": "",
            }
        body = json.dumps({"ok": True, "result": result}).encode()
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    class Stub(asyncio.Protocol):
        def __init__(self) -> None:
            self.buf = bytearray()
            self.transport: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport
            counts["(connections)"] = counts.get("(connections)", 0) + 1

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while True:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end])
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(self.buf) < end + 4 + length:
                    return
                del self.buf[: end + 4 + length]
                target = head.split(b" ", 2)[1].decode("latin-1")
                method = target.rstrip("/").rsplit("/", 1)[-1] or "?"
                assert self.transport is not None
                self.transport.write(answer(method))

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        server = await loop.create_server(Stub, HOST, port)
        async with server:
            await stop.wait()
        print(json.dumps(counts), flush=True)

    asyncio.run(serve())


# --- role: aiogram 3 webhook bot (subprocess) -----------------------------------------------


def role_aiogram(port: int, stub_port: int) -> None:
    """aiohttp web + aiogram SimpleRequestHandler(handle_in_background=True); no storage."""
    import logging

    from aiogram import Bot, Dispatcher
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.types import Message
    from aiogram.webhook.aiohttp_server import SimpleRequestHandler, setup_application
    from aiohttp import web

    logging.basicConfig(level=logging.WARNING)
    dispatcher = Dispatcher()

    @dispatcher.message()  # type: ignore[untyped-decorator]  # aiogram: no stubs in CI
    async def on_message(message: Message) -> None:
        return None  # nothing heavy, no Telegram call, nothing stored

    session = AiohttpSession(api=TelegramAPIServer.from_base(f"http://{HOST}:{stub_port}"))
    bot = Bot(TOKEN, session=session)
    app = web.Application()
    SimpleRequestHandler(dispatcher, bot, secret_token=SECRET, handle_in_background=True).register(
        app, path=WEBHOOK_PATH
    )
    setup_application(app, dispatcher, bot=bot)
    web.run_app(app, host=HOST, port=port, print=None, access_log=None)


def role_floor(port: int) -> None:
    """hypercorn (trio worker, engram's configuration) serving a bare ASGI app that answers
    every request 200 with ``{}`` after reading the body: no routing, no parsing, no storage.
    Its throughput is the most any app under hypercorn can acknowledge on this machine."""
    import trio
    from hypercorn.trio import serve

    sys.path.insert(0, str(REPO))
    from runtime.http import hypercorn_config

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    trio.run(partial(serve, app, hypercorn_config(HOST, port)))  # type: ignore[arg-type]


# --- process plumbing -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def proc_cpu_s(pid: int) -> float:
    """utime + stime of one process (all threads), seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def process_tree(root: int) -> list[int]:
    """``root`` and every process whose parent is ``root`` (a postmaster and its backends)."""
    pids = [root]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == root:
            pids.append(int(entry.name))
    return pids


def system_busy_s() -> float:
    """Busy CPU seconds of the whole machine (all CPUs) from /proc/stat."""
    parts = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    idle = parts[3] + parts[4]  # idle + iowait
    return (sum(parts) - idle) / CLK_TCK


def children_cpu_s() -> float:
    """CPU seconds of reaped children (the load generator runs)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cpu_of(pids: list[int]) -> dict[int, float]:
    return {p: proc_cpu_s(p) for p in pids}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two snapshots (processes that appeared count from zero)."""
    return sum(cpu - before.get(p, 0.0) for p, cpu in after.items())


def wait_quiet(
    watch: Callable[[], list[int]],
    limit_s: float,
    threshold_cores: float = 0.1,
    window_s: float = 0.5,
) -> tuple[float, float]:
    """Wait until the watched processes (ours: servers, their PostgreSQL, the stub) use under
    ``threshold_cores`` CPU for two windows in a row: engram's chat actors keep answering the
    last run's updates after it ends. Other load on the machine is not waited for. Returns
    (seconds waited, CPU seconds the watched processes used meanwhile)."""
    t0 = time.monotonic()
    quiet = 0
    first = prev = cpu_of(watch())
    while time.monotonic() - t0 < limit_s:
        time.sleep(window_s)
        cur = cpu_of(watch())
        cores = cpu_delta(prev, cur) / window_s
        prev = cur
        quiet = quiet + 1 if cores < threshold_cores else 0
        if quiet >= 2:
            break
    else:
        print(f"  (our processes still busy after {limit_s:.0f} s; measuring anyway)", flush=True)
    return time.monotonic() - t0, cpu_delta(first, prev)


def http_get(port: int, path: str, timeout: float = 2.0) -> int:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


class Child:
    """A subprocess in its own session (Ctrl-C reaches only the bench, which stops it)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        logdir: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.stdout_path = logdir / f"{name}.out"
        self.stderr_path = logdir / f"{name}.err"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, sig: int = signal.SIGINT, grace: float = 20.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.proc.wait(5)


def wait_ready(child: Child, port: int, path: str, limit_s: float) -> None:
    """Poll ``GET path`` until any HTTP answer (``/readyz``: until 200)."""
    deadline = time.monotonic() + limit_s
    last = "no answer"
    while time.monotonic() < deadline:
        if not child.alive():
            raise BenchError(
                f"{child.name} exited with {child.proc.returncode} before it was ready:\n"
                + child.tail()
            )
        try:
            status = http_get(port, path)
        except OSError as exc:
            last = f"{type(exc).__name__}"
        else:
            if path != "/readyz" or status == 200:
                return
            last = f"HTTP {status}"
        time.sleep(0.2)
    raise BenchError(f"{child.name} not ready after {limit_s:.0f} s ({last}):\n" + child.tail())


def stop_stray_postmaster(pgdata: Path) -> None:
    """If the embedded server outlived engram (killed), stop it by its postmaster pid."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if str(pgdata).encode() not in cmdline:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)  # fast shutdown
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# --- measurement ----------------------------------------------------------------------------


class IdSource:
    """update_id ranges never reused (also across runs against one --url database)."""

    def __init__(self) -> None:
        self.next = time.time_ns() // 1000

    def take(self, n: int) -> int:
        base = max(self.next, time.time_ns() // 1000)
        self.next = base + n
        return base


def run_load(
    args: argparse.Namespace,
    port: int,
    ids: IdSource,
    *,
    kind: str = "message",
    cpu_pids: dict[str, Callable[[], list[int]]] | None = None,
) -> dict[str, Any]:
    """One loadgen run (separate process); adds CPU seconds of the given process groups."""
    argv = [
        sys.executable,
        str(LOADGEN),
        "--port",
        str(port),
        "--path",
        WEBHOOK_PATH,
        "--secret",
        SECRET,
        "--kind",
        kind,
        "--requests",
        str(args.requests),
        "--warmup",
        str(args.warmup),
        "--concurrency",
        str(args.concurrency),
        "--chat-ids",
        ",".join(map(str, CHAT_IDS)),
        "--id-base",
        str(ids.take(args.requests + args.warmup)),
        "--deadline",
        str(args.deadline),
    ]
    groups = cpu_pids or {}
    # processes may appear during the run (the pool opens PostgreSQL backends on demand)
    before = {name: cpu_of(pids()) for name, pids in groups.items()}
    busy0, kids0, t0 = system_busy_s(), children_cpu_s(), time.monotonic()
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=2 * args.deadline + 30, check=False
    )
    busy1, kids1, wall = system_busy_s(), children_cpu_s(), time.monotonic() - t0
    after = {name: cpu_of(pids()) for name, pids in groups.items()}
    try:
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise BenchError(
            f"load generator failed ({done.returncode}): {done.stderr[-800:]}"
        ) from None
    if "error" in result:
        raise BenchError(f"load generator: {result['error']}")
    # the warm-up is excluded from the loadgen's own timing but not from process CPU, so
    # CPU is per request sent (warm-up included)
    sent = args.requests + args.warmup
    used = {name: cpu_delta(before[name], after[name]) for name in groups}
    result["cpu_ms_per_req"] = {name: cpu * 1e3 / sent for name, cpu in used.items()}
    # CPU of everything else on the machine meanwhile (other users' jobs distort the figures)
    result["other_cores"] = max(0.0, (busy1 - busy0) - sum(used.values()) - (kids1 - kids0)) / wall
    result["cpu_ms_per_req"]["loadgen"] = result["cpu_s"] * 1e3 / args.requests
    return result


def describe(label: str, r: dict[str, Any]) -> str:
    other = {k: v for k, v in r["statuses"].items() if k != "200"}
    errs = f"non-200={other or 0} conn_errors={r['conn_errors']} timeouts={r['timeouts']}"
    cpu = " ".join(f"{k}={v:.2f}" for k, v in r["cpu_ms_per_req"].items())
    return (
        f"  {label:<8} {r['rps']:8.1f} acks/s  p50 {r['p50_ms']:6.2f} ms  p90 {r['p90_ms']:6.2f} ms"
        f"  p99 {r['p99_ms']:6.2f} ms  max {r['max_ms']:7.2f} ms  ok={r['ok']}/{r['sent']} {errs}"
        f"\n           CPU ms/request: {cpu}; other processes on the machine: "
        f"{r['other_cores']:.2f} cores"
    )


def log_events(path: Path) -> Counter[str]:
    """engram's JSON log lines counted by event name (other lines as ``<text>``)."""
    counts: Counter[str] = Counter()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return counts
    for line in lines:
        try:
            event = json.loads(line).get("event", "<json>")
        except (ValueError, AttributeError):
            event = "<text>"
        counts[str(event)] += 1
    return counts


def postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def profile_owner(filename: str, function: str) -> str:
    """Who a profiled function belongs to: an installed package, an engram module, the
    standard library or a builtin."""
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    if filename.startswith(str(REPO) + os.sep):
        return "engram " + filename[len(str(REPO)) + 1 :]
    if filename == "~":
        return "builtin " + function.split(" of ")[0].strip("<>")[:40]
    return "stdlib " + Path(filename).name


def print_profile(path: Path, top: int = 25) -> None:
    import pstats

    if not path.exists():
        print(f"(no profile written to {path})")
        return
    stats = pstats.Stats(str(path))
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    owners: Counter[str] = Counter()
    for (filename, _, function), (_, _, tottime, _, _) in raw.items():
        owners[profile_owner(filename, function)] += tottime
    total = sum(owners.values()) or 1.0
    print(f"\n--- engram cProfile ({path}): own time by package/module, top {top} ---")
    for owner, seconds in owners.most_common(top):
        print(f"  {seconds:8.3f} s {100 * seconds / total:5.1f}%  {owner}")
    for key in ("tottime", "cumulative"):
        print(f"\n--- engram cProfile, top {top} functions by {key} ---")
        pstats.Stats(str(path)).strip_dirs().sort_stats(key).print_stats(top)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C (also when SIGINT was inherited as ignored), so ``finally``
    blocks clean up either way."""

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def bench(args: argparse.Namespace, tmp: Path, children: list[Child]) -> None:
    logdir = tmp / "logs"
    logdir.mkdir()
    home = tmp / "home"
    ids = IdSource()
    stub_port, ours_port, aiogram_port = free_port(), free_port(), free_port()
    while len({stub_port, ours_port, aiogram_port}) < 3:
        ours_port, aiogram_port = free_port(), free_port()
    me = str(Path(__file__).resolve())

    stub = Child("stub", [sys.executable, me, "--role", "stub", "--port", str(stub_port)], logdir)
    children.append(stub)
    wait_ready(stub, stub_port, "/", 15)

    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": args.url,
            "ENGRAM_HOME": str(home),
            "ENGRAM_HOST": HOST,
            "ENGRAM_PORT": str(ours_port),
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_SECRET_TOKEN": SECRET,
            "TELEGRAM_ALLOWED_CHAT_IDS": ",".join(map(str, CHAT_IDS)),
            "TELEGRAM_API_BASE_URL": f"http://{HOST}:{stub_port}",
            "LOG_LEVEL": "WARNING",
            "LOG_FORMAT": "json",
            "OPENAI_API_KEY": "",
            "ANTHROPIC_API_KEY": "bench-key-for-the-local-stub",
            "ANTHROPIC_BASE_URL": f"http://{HOST}:{stub_port}",
            "EMBEDDING_PROVIDER": "local",
            "SHUTDOWN_DEADLINE": "3",
            "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
        }
    )
    # --webhook: without a webhook URL ``engram serve`` long-polls (the default since polling
    # came) and answers 404 on /api/telegram
    serve_argv = [sys.executable, "-m", "actors.cli", "serve", "--webhook"]
    if args.profile:
        serve_argv = [sys.executable, "-c", PROFILE_WRAPPER, str(args.profile.resolve())]
    t0 = time.monotonic()
    ours = Child("engram", serve_argv, logdir, env=env, cwd=tmp)  # cwd: no stray .env
    children.append(ours)
    aio: Child | None = None
    if args.peer:
        aio = Child(
            "aiogram",
            [
                sys.executable,
                me,
                "--role",
                "aiogram",
                "--port",
                str(aiogram_port),
                "--stub-port",
                str(stub_port),
            ],
            logdir,
        )
        children.append(aio)
        wait_ready(aio, aiogram_port, "/", 60)
    else:
        print("aiogram is not importable (pip install -e '.[bench]'): the aiogram peer is skipped")
    wait_ready(ours, ours_port, "/readyz", args.start_timeout)
    db = args.url.split("@")[-1] if args.url else f"embedded PostgreSQL in {home}"
    print(f"engram serve ready in {time.monotonic() - t0:.1f} s (database: {db})")
    print(
        f"load: {args.requests} updates (+{args.warmup} warm-up) per run, {args.concurrency} "
        f"keep-alive connections, {len(CHAT_IDS)} chats, {args.rounds} round(s), loopback; "
        f"{os.cpu_count()} CPUs shared by servers, PostgreSQL, stub and load generator "
        f"(load average now {os.getloadavg()[0]:.2f})"
    )
    if args.profile:
        print(
            "NOTE: engram is profiled (cProfile) during its measured runs: its figures include "
            "the profiler's overhead"
        )

    pm = postmaster_pid(home / "postgres") if not args.url else None
    ours_groups: dict[str, Callable[[], list[int]]] = {
        "engram": lambda: [ours.pid],
        "stub": lambda: [stub.pid],
    }
    if pm is not None:
        ours_groups["postgres"] = partial(process_tree, pm)
    aio_groups: dict[str, Callable[[], list[int]]] = {
        "aiogram": lambda: [aio.pid] if aio is not None else [],
        "stub": lambda: [stub.pid],
    }
    servers = [ours] if aio is None else [ours, aio]

    def watch() -> list[int]:
        pids = [child.pid for child in (*servers, stub)]
        return pids + (process_tree(pm) if pm is not None else [])

    def check_alive() -> None:
        for child in (*servers, stub):
            if not child.alive():
                raise BenchError(f"{child.name} died during the run:\n{child.tail()}")

    sent = args.requests + args.warmup
    wait_quiet(watch, args.quiet_timeout)
    results: dict[str, list[dict[str, Any]]] = {"ours": [], "aiogram": []}
    for r in range(args.rounds):
        order: tuple[str, ...] = ("ours", "aiogram") if r % 2 == 0 else ("aiogram", "ours")
        if aio is None:
            order = ("ours",)
        print(f"round {r + 1}:", flush=True)
        for name in order:
            if name == "ours":
                if args.profile:
                    os.kill(ours.pid, signal.SIGUSR1)
                res = run_load(args, ours_port, ids, cpu_pids=ours_groups)
                if args.profile:
                    os.kill(ours.pid, signal.SIGUSR2)
            else:
                res = run_load(args, aiogram_port, ids, cpu_pids=aio_groups)
            results[name].append(res)
            print(describe(name, res), flush=True)
            check_alive()
            if res["ok"] == 0:
                raise BenchError(f"{name} acknowledged none of the updates: {res['statuses']}")
            waited, cpu = wait_quiet(watch, args.quiet_timeout)
            if name == "ours":
                print(
                    f"           after the run: {cpu:.1f} s CPU over {waited:.1f} s "
                    f"({cpu * 1e3 / sent:.2f} ms/update; engram answering the stored updates, "
                    "its PostgreSQL, the stub; not in the figures above)",
                    flush=True,
                )

    if args.breakdown:
        print(
            "breakdown, engram without a database write: healthz = GET /healthz; unstored = "
            "POST of an update kind engram acknowledges without storing",
            flush=True,
        )
        for kind, label in (("healthz", "healthz"), ("unknown", "unstored")):
            res = run_load(args, ours_port, ids, kind=kind, cpu_pids=ours_groups)
            print(describe(label, res), flush=True)
            check_alive()
            wait_quiet(watch, args.quiet_timeout)
        floor_port = free_port()
        floor = Child(
            "floor", [sys.executable, me, "--role", "floor", "--port", str(floor_port)], logdir
        )
        children.append(floor)
        wait_ready(floor, floor_port, "/", 60)
        floor_runs = []
        for _ in range(args.rounds):
            res = run_load(args, floor_port, ids, cpu_pids={"floor": lambda: [floor.pid]})
            floor_runs.append(res)
            print(describe("floor", res), flush=True)
        floor.stop()
        floor_rps = statistics.median(float(x["rps"]) for x in floor_runs)
        print(
            f"hypercorn floor (a bare ASGI app answering 200, nothing else): {floor_rps:.1f} "
            "acks/s, the ceiling of any app served by hypercorn here",
            flush=True,
        )
    for child in servers:
        child.stop()
    stub.stop(signal.SIGTERM, 5)
    with contextlib.suppress(OSError, ValueError):
        calls = json.loads(stub.stdout_path.read_text().strip().splitlines()[-1])
        print(f"stub Bot API calls (mostly engram's replies): {calls}")
    if ours.proc.returncode not in (0, None):
        print(f"note: engram exited with {ours.proc.returncode}: {ours.tail(5)}")
    events = log_events(ours.stderr_path)
    if events:
        shown = ", ".join(f"{name} x{n}" for name, n in events.most_common(8))
        print(f"engram log lines (LOG_LEVEL=WARNING) by event: {shown}")
    if args.profile:
        print_profile(args.profile.resolve())

    def med(name: str, key: str) -> float:
        return float(statistics.median(float(x[key]) for x in results[name]))

    ours_rps = med("ours", "rps")
    p50, p99 = med("ours", "p50_ms"), med("ours", "p99_ms")
    failed = {name: sum(x["sent"] - x["ok"] for x in runs) for name, runs in results.items()}
    print()
    print("medians over rounds (engram stores each update in PostgreSQL before its 200;")
    print("aiogram stores nothing and answers before its handler runs):")
    print(
        f"  engram : {ours_rps:.1f} acks/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
        f"non-acknowledged {failed['ours']}"
    )
    aio_figure = ratio_figure = "skipped"
    if results["aiogram"]:
        aio_rps = med("aiogram", "rps")
        ratio = ours_rps / aio_rps if aio_rps > 0 else float("nan")
        aio_figure, ratio_figure = f"{aio_rps:.1f}", f"{ratio:.2f}"
        print(
            f"  aiogram: {aio_rps:.1f} acks/s, p50 {med('aiogram', 'p50_ms'):.2f} ms, "
            f"p99 {med('aiogram', 'p99_ms'):.2f} ms, non-acknowledged {failed['aiogram']}"
        )
        print(
            f"  ratio ours/aiogram throughput: {ratio:.2f} (goal >= 1: "
            f"{'met' if ratio >= 1 else 'MISSED'}); p99 goal <= {GOAL_P99_MS:.0f} ms: "
            f"{'met' if p99 <= GOAL_P99_MS else 'MISSED'}"
        )
    print(
        f"ingress ours_rps={ours_rps:.1f} aiogram_rps={aio_figure} ratio={ratio_figure} "
        f"p50_ms={p50:.2f} p99_ms={p99:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="", help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--requests", type=int, default=5000, help="measured requests per run")
    parser.add_argument("--warmup", type=int, default=500, help="unmeasured requests first")
    parser.add_argument("--concurrency", type=int, default=32, help="keep-alive connections")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds per load phase")
    parser.add_argument("--start-timeout", type=float, default=180.0)
    parser.add_argument(
        "--quiet-timeout",
        type=float,
        default=90.0,
        help="longest wait (s) for our processes to go idle between runs",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also load engram's /healthz and an unstored update kind",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="run engram under cProfile, write stats here and print the top",
    )
    parser.add_argument(
        "--keep-logs", type=Path, default=None, help="copy the servers' stdout/stderr here"
    )
    parser.add_argument("--role", choices=("stub", "aiogram", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stub-port", type=int, help=argparse.SUPPRESS)
    add_smoke_flag(parser)
    args = parser.parse_args()
    shrink(
        parser,
        args,
        requests=200,
        warmup=20,
        concurrency=4,
        rounds=1,
        deadline=30.0,
        quiet_timeout=10.0,
    )
    # the peer needs the ``bench`` extra; a smoke run goes on without it
    args.peer = not args.smoke or importlib.util.find_spec("aiogram") is not None

    if args.role == "stub":
        role_stub(args.port)
        return
    if args.role == "aiogram":
        role_aiogram(args.port, args.stub_port)
        return
    if args.role == "floor":
        role_floor(args.port)
        return
    if args.requests < 1 or args.concurrency < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--requests, --concurrency and --rounds must be >= 1, --warmup >= 0")

    children: list[Child] = []
    tmp = Path(tempfile.mkdtemp(prefix="engram-ingress-"))
    code = 0
    try:
        with interruptible():
            bench(args, tmp, children)
    except KeyboardInterrupt:
        print("ingress: interrupted, cleaning up", file=sys.stderr)
        code = 130
    except (BenchError, OSError, subprocess.SubprocessError) as exc:
        print(f"ingress: {exc}", file=sys.stderr)
        code = 1
    finally:
        # bounded (each child gets a grace period, then SIGKILL); a second Ctrl-C must not
        # leave servers or the embedded PostgreSQL behind
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for child in reversed(children):
            child.stop(signal.SIGTERM if child.name == "stub" else signal.SIGINT)
        stop_stray_postmaster(tmp / "home" / "postgres")
        if args.keep_logs is not None and (tmp / "logs").exists():
            shutil.copytree(tmp / "logs", args.keep_logs, dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
