"""The dashboard's pages (a quart blueprint at ``/dashboard``), rendered on the server.

Every page needs a login (:mod:`actors.dashboard.auth`) and shows only the chats the login may
see: a chat it may not see answers 404, as does a pattern id of another chat. Every form posts
the session's CSRF token; a post without it (or with another) is refused (403). Forget, pin and
unpin call :mod:`memory.patterns.controls`, as the chat's commands do. With no
``DASHBOARD_TOKEN`` the whole blueprint answers 404.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from quart import Blueprint, Response, redirect, render_template, request
from werkzeug.exceptions import HTTPException

from actors.dashboard import auth
from actors.dashboard.context import DashboardDeps
from actors.dashboard.feed import add_feed
from actors.dashboard.views import (
    conversation_view,
    health_view,
    memory_view,
    pattern_view,
    usage_view,
)
from memory.patterns.controls import FORGOTTEN_BY_PERSON, forget_pattern, pin_pattern
from runtime.logs import get_logger

log = get_logger(__name__)

Handler = Callable[..., Awaitable[Any]]


def is_bigint(value: int) -> bool:
    """Whether ``value`` can be a database id (a BIGINT); larger ones name nothing."""
    return -(2**63) <= value < 2**63


def _abort(status: int) -> HTTPException:
    error = HTTPException()
    error.code = status
    return error


def dashboard_blueprint(deps: DashboardDeps) -> Blueprint:
    """The blueprint (register it on the app)."""
    bp = Blueprint("dashboard", __name__, url_prefix="/dashboard", template_folder="templates")
    token = deps.token

    async def login_of() -> auth.Login | None:
        cookie = request.cookies.get(auth.COOKIE)
        if not cookie:
            return None
        sid = auth.unsign_session(token, cookie)
        if sid is None:
            return None
        return await auth.find_session(deps.db, sid, deps.clock())

    @bp.before_request
    async def gate() -> Any:
        if not token:
            return Response("Not Found", 404)
        return None

    @bp.after_request
    async def headers(response: Response) -> Response:
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
            "script-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'"
        )
        return response

    async def page(login: auth.Login, template: str, **values: Any) -> str:
        chats = await deps.visible_chats(login)
        return await render_template(
            template, login=login, chats=chats, csrf=login.csrf, tz=deps.timezone, **values
        )

    async def require(chat_id: int | None = None, *ids: int) -> auth.Login:
        login = await login_of()
        if login is None:
            raise _RedirectToLogin()
        if chat_id is not None and not (login.may_see(chat_id) and is_bigint(chat_id)):
            raise _abort(404)
        if not all(map(is_bigint, ids)):
            raise _abort(404)
        return login

    async def require_form(chat_id: int | None = None) -> tuple[auth.Login, dict[str, str]]:
        login = await login_of()
        if login is None:
            raise _abort(403)
        form = {k: v for k, v in (await request.form).items()}
        if not auth.csrf_matches(login, form.get("csrf")):
            log.warning("dashboard.csrf_refused", path=request.path)
            raise _abort(403)
        if chat_id is not None and not (login.may_see(chat_id) and is_bigint(chat_id)):
            raise _abort(404)
        return login, form

    class _RedirectToLogin(Exception):
        pass

    @bp.errorhandler(_RedirectToLogin)
    async def to_login(_: Exception) -> Any:
        return redirect("/dashboard/login")

    def set_cookie(response: Any, sid: str) -> Any:
        response.set_cookie(
            auth.COOKIE,
            auth.sign_session(token, sid),
            max_age=auth.SESSION_HOURS * 3600,
            path=auth.COOKIE_PATH,
            httponly=True,
            samesite="Strict",
            secure=request.scheme == "https",
        )
        return response

    # --- login and logout ----------------------------------------------------------------------

    @bp.get("/login")
    async def login_page() -> Any:
        return await render_template("login.html", error=None)

    @bp.post("/login")
    async def login_post() -> Any:
        form = await request.form
        if not auth.token_matches(str(form.get("token", "")), token):
            log.warning("dashboard.login_refused", remote=request.remote_addr)
            return await render_template("login.html", error="That token is not right."), 403
        sid = await auth.start_session(deps.db, None, deps.clock())
        log.info("dashboard.login", how="token")
        return set_cookie(redirect("/dashboard/"), sid)

    @bp.get("/login/<secret>")
    async def login_link(secret: str) -> Any:
        ok, chat_id = await auth.use_link(deps.db, secret[:200], deps.clock())
        if not ok:
            message = "This link was used already or has expired. Ask for a new one."
            return await render_template("login.html", error=message), 403
        sid = await auth.start_session(deps.db, chat_id, deps.clock())
        log.info("dashboard.login", how="link", chat_id=chat_id)
        return set_cookie(redirect("/dashboard/"), sid)

    @bp.post("/logout")
    async def logout() -> Any:
        login, _ = await require_form()
        await auth.end_session(deps.db, login.session_id)
        response = redirect("/dashboard/login")
        response.delete_cookie(auth.COOKIE, path=auth.COOKIE_PATH)
        return response

    # --- pages ---------------------------------------------------------------------------------

    @bp.get("/")
    async def home() -> Any:
        login = await require()
        chats = await deps.visible_chats(login)
        if len(chats) == 1:
            return redirect(f"/dashboard/chats/{chats[0].chat_id}/memory")
        return await page(login, "home.html")

    @bp.get("/chats/<int(signed=True):chat_id>/memory")
    async def memory(chat_id: int) -> Any:
        login = await require(chat_id)
        view = await memory_view(deps, chat_id, request.args)
        return await page(login, "memory.html", chat_id=chat_id, v=view)

    @bp.get("/chats/<int(signed=True):chat_id>/patterns/<int:pattern_id>")
    async def pattern(chat_id: int, pattern_id: int) -> Any:
        login = await require(chat_id, pattern_id)
        view = await pattern_view(deps, chat_id, pattern_id)
        if view is None:
            raise _abort(404)
        return await page(login, "pattern.html", chat_id=chat_id, v=view)

    @bp.post("/chats/<int(signed=True):chat_id>/patterns/<int:pattern_id>/<action>")
    async def pattern_action(chat_id: int, pattern_id: int, action: str) -> Any:
        if action not in ("forget", "pin", "unpin") or not is_bigint(pattern_id):
            raise _abort(404)
        await require_form(chat_id)
        if action == "forget":
            done: object = await forget_pattern(
                deps.db, chat_id, pattern_id, reason=FORGOTTEN_BY_PERSON, actor="person"
            )
        else:
            done = await pin_pattern(deps.db, chat_id, pattern_id, action == "pin", actor="person")
        if done is None:
            raise _abort(404)
        log.info("dashboard.pattern_changed", chat_id=chat_id, pattern_id=pattern_id, action=action)
        await deps.changed(chat_id)
        if action == "forget":
            return redirect(f"/dashboard/chats/{chat_id}/memory?done=forgotten")
        return redirect(f"/dashboard/chats/{chat_id}/patterns/{pattern_id}")

    @bp.get("/chats/<int(signed=True):chat_id>/conversation")
    async def conversation(chat_id: int) -> Any:
        login = await require(chat_id)
        view = await conversation_view(deps, chat_id, request.args.get("day"))
        if view is None:
            raise _abort(404)
        return await page(login, "conversation.html", chat_id=chat_id, v=view)

    @bp.get("/usage")
    async def usage() -> Any:
        login = await require()
        chat = request.args.get("chat", type=int)
        if chat is not None and not (login.may_see(chat) and is_bigint(chat)):
            raise _abort(404)
        scope = chat if chat is not None else login.chat_id
        view = await usage_view(deps, scope, request.args.get("days", 30, type=int))
        return await page(login, "usage.html", v=view, chat_id=scope)

    @bp.get("/health")
    async def health() -> Any:
        login = await require()
        view = await health_view(deps, login)
        return await page(login, "health.html", v=view)

    add_feed(bp, deps)
    return bp
