"""DATABASE_URL: its validation, and the one redaction rule for showing it.

Pure string rules, no database driver: the settings use :func:`database_url` to refuse a URL
the driver could not use (a non-numeric port, a bad query) before anything is touched, and
everything that shows a database URL — ``engram config``, the ``db.open`` log line, the
"cannot reach the database" error — shows :func:`redact_url` of it. :func:`url_passwords`
gives the secret pieces of a URL, which the log scrubber and the CLI's error line remove
wherever they turn up.

The secrets of a URL are the password of its user information (``user:PASSWORD@host``) and
the value of every query parameter whose name ends in ``password`` in any case
(``?password=``, ``?PASSWORD=``, ``?sslpassword=``). A problem with a URL is described without
quoting any of it: a password with an unencoded ``/``, ``?``, ``#`` or ``@`` is cut there, and
its pieces would otherwise land in the message as a "host" or a "port".
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote

REDACTED = "***"
SCHEMES = ("postgresql", "postgres")
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
ENCODE_HINT = "percent-encode / ? # @ : in the user name and password as %2F %3F %23 %40 %3A"

_URL_RE = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<rest>.*)", re.S
)
_SECRET_PARAM_RE = re.compile(r"(?i)(^|[?&;])([^=&;#]*password=)([^&;#]*)")
_PORT_RE = re.compile(r"[0-9]{1,5}")
_IPV6_RE = re.compile(r"\[[0-9A-Fa-f:.%a-zA-Z]+\](?::(?P<port>[^:]*))?")


def _split(url: str) -> tuple[str, str, str, str] | None:
    """(scheme, user information or '', host list, the rest: path, query, fragment)."""
    m = _URL_RE.fullmatch(url)
    if m is None:
        return None
    userinfo, at, hosts = m["authority"].rpartition("@")
    if not at:
        userinfo, hosts = "", m["authority"]
    return m["scheme"], userinfo, hosts, m["rest"]


def _port_problem(port: str, where: str) -> str | None:
    port = unquote(port)
    if not _PORT_RE.fullmatch(port) or not 1 <= int(port) <= 65535:
        return f"{where} must be a number from 1 to 65535 (part of a password? {ENCODE_HINT})"
    return None


def url_problem(url: str) -> str | None:
    """Why the driver could not use ``url`` (None when it can); never quotes the URL."""
    parts = _split(url)
    if parts is None or parts[0].lower() not in SCHEMES:
        return "must start with postgresql:// or postgres://"
    _, userinfo, hosts, rest = parts
    if "@" in userinfo:
        return f"has more than one @ before the host: {ENCODE_HINT}"
    path, _, query = rest.partition("#")[0].partition("?")
    if "@" in path:
        return f"has an @ after the host: {ENCODE_HINT}"
    for spec in hosts.split(",") if hosts else ():
        if spec.startswith("["):
            m = _IPV6_RE.fullmatch(spec)
            if m is None:
                return "has an IPv6 host that is not [address] or [address]:port"
            port = m["port"]
        else:
            port = spec.partition(":")[2] if ":" in spec else None
        if port is not None and (problem := _port_problem(port, "the port")):
            return problem
    try:
        params = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError:
        return "has a query (after ?) that is not name=value pairs joined by &"
    for name, value in params:
        if name == "port":
            for port in value.split(","):
                if problem := _port_problem(port, "the port= parameter"):
                    return problem
        if name == "sslmode" and value not in SSL_MODES:
            return f"sslmode must be one of {', '.join(SSL_MODES)}"
    return None


def database_url(raw: str) -> str:
    """The DATABASE_URL parser: empty (the embedded server) or a URL the driver can use."""
    value = raw.strip()
    if value and (problem := url_problem(value)) is not None:
        raise ValueError(problem)
    return value


def redact_url(url: str) -> str:
    """``url`` with its user information's password and every ``*password=`` query value
    replaced by ``***``; one the driver could not use (:func:`url_problem`) as its scheme
    only."""
    parts = _split(url)
    if parts is None or url_problem(url) is not None:
        # a cut password's pieces may sit anywhere in it: nothing after the scheme is shown
        return f"{parts[0] if parts else 'postgresql'}://{REDACTED}"
    scheme, userinfo, hosts, rest = parts
    user, colon, _ = userinfo.partition(":")
    auth = f"{user}:{REDACTED}@" if colon else f"{userinfo}@" if userinfo else ""
    path, q, query = rest.partition("?")
    if q:
        query = _SECRET_PARAM_RE.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", query)
    return f"{scheme}://{auth}{hosts}{path}{q}{query}"


def url_passwords(url: str) -> list[str]:
    """The secret pieces of ``url``, as written and percent-decoded (for log scrubbing)."""
    parts = _split(url)
    if parts is None:
        return []
    _, userinfo, _, rest = parts
    found = []
    if ":" in userinfo:
        found.append(userinfo.partition(":")[2])
    query = rest.partition("?")[2]
    found += [m[3] for m in _SECRET_PARAM_RE.finditer(query)]
    return sorted({v for raw in found for v in (raw, unquote(raw)) if v})
