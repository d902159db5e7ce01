"""Reading a Bot API download with a size cap (:func:`read_capped`), for the client."""

from __future__ import annotations

import httpx

from actors.telegram.errors import FileTooLarge


async def read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    """The body, or ``FileTooLarge`` as soon as it passes ``max_bytes``.

    Past the limit the response is closed *inside* the loop, so httpx's chain of async
    generators ends with an error instead of being abandoned half-way (which trio reports
    as a ResourceWarning, encode/httpx#3686).
    """
    data = bytearray()
    exceeded = False
    try:
        async for piece in response.aiter_bytes():
            if not exceeded:
                data += piece
                if len(data) > max_bytes:
                    exceeded = True
                    await response.aclose()
    except (httpx.HTTPError, httpx.StreamError):
        if not exceeded:
            raise
    if exceeded:
        raise FileTooLarge(None, max_bytes)
    return bytes(data)
