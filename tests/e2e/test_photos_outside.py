"""Issue 23 item 4 from outside: ``engram serve`` as a subprocess, the fake Bot API serving the
photo files, the fake Anthropic recording the requests. A photo with a caption reaches the model
as a base64 image with the caption and is answered; an album of two photos is one turn with
both images."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from engram_outside import Engram, free_port, post_update, run_echo_anthropic, serve_env
from fakes.bot_api import run_fake_bot_api

from runtime.db import Database

CHAT = 4242031
RED = b"\x89PNG\r\n\x1a\n" + b"red-square-pixels" * 8
BLUE = b"\xff\xd8\xff\xe0" + b"blue-sky-pixels" * 8


def photo_update(update_id: int, sizes: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "chat": {"id": CHAT, "type": "private", "first_name": "T"},
            "from": {"id": CHAT, "is_bot": False, "first_name": "T"},
            "photo": sizes,
            **fields,
        },
    }


def sizes_of(bot_api: Any, data: bytes, name: str) -> list[dict[str, Any]]:
    thumb = bot_api.add_file(b"\xff\xd8\xff tiny", file_path=f"photos/{name}_s.jpg")
    full = bot_api.add_file(data, file_path=f"photos/{name}.jpg")
    return [
        {
            "file_id": f.file_id,
            "file_unique_id": f.file_unique_id,
            "width": w,
            "height": w,
            "file_size": len(d),
        }
        for f, w, d in ((thumb, 90, b"\xff\xd8\xff tiny"), (full, 1280, data))
    ]


def images_in(request: Any) -> list[bytes]:
    first_user = request.body["messages"][-1]
    return [
        base64.b64decode(b["source"]["data"])
        for b in first_user["content"]
        if isinstance(b, dict) and b.get("type") == "image"
    ]


def described(model: Any) -> list[Any]:
    """The photo-description calls (no tools, the describing prompt)."""
    return [
        r
        for r in model.requests
        if images_in(r) and not r.body.get("tools") and "Describe" in str(r.body.get("system", ""))
    ]


@pytest.mark.slow
@pytest.mark.parametrize("keep", ["off", "on"])
async def test_a_photo_and_an_album_reach_the_model(
    database_url: str, db: Database, tmp_path: Path, keep: str
) -> None:
    async with run_fake_bot_api() as bot_api, run_echo_anthropic() as model:
        env = serve_env(
            tmp_path,
            bot_api=bot_api.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=database_url,
            KEEP_PHOTOS=keep,
        )
        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready(limit=120)
            async with httpx.AsyncClient(timeout=10) as client:
                one = photo_update(1, sizes_of(bot_api, RED, "red"), caption="msg 1 my drawing")
                assert await post_update(client, engram.port, one) == 200
                with trio.fail_after(60):
                    while len(bot_api.sent_texts(CHAT)) < 1:
                        assert engram.running, engram.tail()
                        await trio.sleep(0.1)
                album = [
                    photo_update(
                        2, sizes_of(bot_api, RED, "a"), media_group_id="g1", caption="msg 2 holiday"
                    ),
                    photo_update(3, sizes_of(bot_api, BLUE, "b"), media_group_id="g1"),
                ]
                for body in album:
                    assert await post_update(client, engram.port, body) == 200
                with trio.fail_after(60):
                    while len(bot_api.sent_texts(CHAT)) < 2 or len(described(model)) < 2:
                        assert engram.running, engram.tail()
                        await trio.sleep(0.1)
                await trio.sleep(0.5)  # the description's row update commits
        finally:
            await engram.stop()
    texts = bot_api.sent_texts(CHAT)
    assert texts[0].startswith("re 1") and texts[1].startswith("re 2"), texts
    turns = [r for r in model.requests if images_in(r) and r.body.get("tools")]
    assert [images_in(r) for r in turns] == [[RED], [RED, BLUE]]
    # after each reply, the model describes the photos (its own call) for the stored row
    assert [images_in(r) for r in described(model)] == [[RED], [RED, BLUE]]
    rows = await db.fetch(
        "SELECT content FROM chat_messages WHERE chat_id = $1 AND role = 'user' ORDER BY id", CHAT
    )
    assert len(rows) == 2 and all(" — " in r["content"] for r in rows), rows
    assert rows[0]["content"].startswith("[sent a photo] msg 1 my drawing — ")
    assert (
        await db.fetchval("SELECT count(*) FROM api_usage WHERE purpose = 'photo_description'") == 2
    )
    captions = [
        "".join(b.get("text", "") for b in r.body["messages"][-1]["content"]) for r in turns
    ]
    assert "[sent a photo] msg 1 my drawing" in captions[0]
    assert "[sent 2 photos] msg 2 holiday" in captions[1]
    assert bot_api.downloads.count("photos/red_s.jpg") == 0  # the largest size, not the thumb
    kept = await db.fetch(
        "SELECT m.content, p.position, p.data FROM chat_photos p"
        " JOIN chat_messages m ON m.id = p.message_id ORDER BY p.id"
    )
    if keep == "off":
        assert kept == []  # the bytes are not kept
    else:
        assert [bytes(r["data"]) for r in kept] == [RED, RED, BLUE]
        await db.execute("DELETE FROM chat_messages WHERE chat_id = $1", CHAT)
        assert await db.fetchval("SELECT count(*) FROM chat_photos") == 0  # go with their row


@pytest.mark.slow
async def test_a_photo_over_the_models_limit_is_sent_smaller_or_refused_by_size(
    database_url: str, tmp_path: Path
) -> None:
    """Anthropic refuses an image whose base64 is over 5 MB (3.75 MB of bytes), below
    PHOTO_MAX_BYTES' 10 MB: a smaller size of the photo is sent instead, and a photo with no
    size under the limit is answered with its size, not with "can't look at images"."""
    big = b"\x89PNG\r\n\x1a\n" + b"\x00" * (4_500_000 - 8)  # 6 MB as base64
    medium = b"\x89PNG\r\n\x1a\n" + b"medium-size" * 1000
    async with run_fake_bot_api() as bot_api, run_echo_anthropic() as model:
        env = serve_env(
            tmp_path,
            bot_api=bot_api.base_url,
            model=model.base_url,
            port=free_port(),
            chats=[CHAT],
            DATABASE_URL=database_url,
        )
        files = {
            name: bot_api.add_file(d, file_path=f"photos/{name}.png")
            for name, d in (("big", big), ("medium", medium), ("only", big))
        }

        def size(name: str, width: int, data: bytes) -> dict[str, Any]:
            f = files[name]
            return {
                "file_id": f.file_id,
                "file_unique_id": f.file_unique_id,
                "width": width,
                "height": width,
                "file_size": len(data),
            }

        engram = Engram(env, tmp_path / "engram.log")
        await engram.start()
        try:
            await engram.wait_ready(limit=120)
            async with httpx.AsyncClient(timeout=10) as client:
                two_sizes = [size("medium", 800, medium), size("big", 2560, big)]
                one = photo_update(1, two_sizes, caption="msg 1 the view")
                assert await post_update(client, engram.port, one) == 200
                with trio.fail_after(60):
                    while len(bot_api.sent_texts(CHAT)) < 1:
                        assert engram.running, engram.tail()
                        await trio.sleep(0.1)
                only = photo_update(2, [size("only", 2560, big)], caption="msg 2 again")
                assert await post_update(client, engram.port, only) == 200
                with trio.fail_after(60):
                    while len(bot_api.sent_texts(CHAT)) < 2:
                        assert engram.running, engram.tail()
                        await trio.sleep(0.1)
        finally:
            await engram.stop()
    texts = bot_api.sent_texts(CHAT)
    assert texts[0].startswith("re 1"), texts  # answered, looking at the smaller size
    turns = [r for r in model.requests if images_in(r) and r.body.get("tools")]
    assert [images_in(r) for r in turns] == [[medium]]
    assert "too large for me to look at" in texts[1] and "images" not in texts[1], texts
    assert bot_api.downloads.count("photos/big.png") == 0  # never fetched: over the limit
