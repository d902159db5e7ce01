"""Photo downloads through our Bot API client against the strict fake Bot API: the largest
size under the cap, the type read from the bytes, and a reply-ready error for each failure."""

from __future__ import annotations

import pytest
from fakes.bot_api import Failure as BotFailure
from fakes.bot_api import FakeBotApi

from actors.telegram.client import BotApiClient
from actors.telegram.errors import PhotoError
from actors.telegram.media import PhotoSize
from actors.telegram.photos import (
    DOWNLOAD_FAILED,
    NOT_AN_IMAGE,
    choose_size,
    download_photo,
    download_photos,
    image_type,
)

JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
MB = 1024 * 1024


def stored(fake: FakeBotApi, data: bytes, width: int, *, size: int | None = -1) -> PhotoSize:
    f = fake.add_file(data, file_path=f"photos/file_{width}.jpg")
    return PhotoSize(f.file_id, f.file_unique_id, width, width, len(data) if size == -1 else size)


def test_choose_size_takes_the_largest_under_the_cap() -> None:
    small = PhotoSize("s", "us", 90, 90, 1_000)
    mid = PhotoSize("m", "um", 800, 800, 90_000)
    big = PhotoSize("b", "ub", 2560, 2560, 3 * MB)
    assert choose_size([small, mid, big], 10 * MB) == big
    assert choose_size([small, mid, big], MB) == mid
    assert choose_size([big], MB) is None
    unknown = PhotoSize("u", "uu", 1280, 1280, None)
    assert choose_size([small, unknown], 10) == unknown


def test_image_type_from_bytes() -> None:
    assert image_type(JPEG) == "image/jpeg"
    assert image_type(PNG) == "image/png"
    assert image_type(b"GIF89a....") == "image/gif"
    assert image_type(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert image_type(b"%PDF-1.7") is None


async def test_downloads_the_largest_size_under_the_cap(
    fake: FakeBotApi, bot: BotApiClient
) -> None:
    small = stored(fake, PNG, 90)
    big = stored(fake, JPEG, 1280)
    image = await download_photo(bot, [small, big], 10 * MB)
    assert (image.media_type, image.data) == ("image/jpeg", JPEG)
    assert fake.downloads == ["photos/file_1280.jpg"]
    capped = await download_photo(bot, [small, big], len(JPEG) - 1)
    assert (capped.media_type, capped.data) == ("image/png", PNG)


async def test_an_album_keeps_its_order(fake: FakeBotApi, bot: BotApiClient) -> None:
    images = await download_photos(bot, [[stored(fake, PNG, 1)], [stored(fake, JPEG, 2)]])
    assert [i.data for i in images] == [PNG, JPEG]


async def test_too_large_is_refused_before_any_download(
    fake: FakeBotApi, bot: BotApiClient
) -> None:
    with pytest.raises(PhotoError, match="too large") as info:
        await download_photo(bot, [stored(fake, JPEG, 2560, size=30 * MB)], 10 * MB)
    assert "10 MB" in str(info.value)
    assert fake.downloads == [] and fake.calls_to("getFile") == []


async def test_a_size_that_lies_is_stopped_by_the_capped_download(
    fake: FakeBotApi, bot: BotApiClient
) -> None:
    with pytest.raises(PhotoError, match="too large"):
        await download_photo(bot, [stored(fake, JPEG, 1280, size=None)], 100)


async def test_a_size_found_over_the_cap_gives_way_to_the_next_smaller(
    fake: FakeBotApi, bot: BotApiClient
) -> None:
    """The largest size's ``file_size`` was left out of the update and it is over the cap
    (the model's limit): the next smaller size is sent, not "too large"."""
    small = stored(fake, PNG, 90)
    big = stored(fake, JPEG, 1280, size=None)
    image = await download_photo(bot, [small, big], len(JPEG) - 1)
    assert (image.media_type, image.data) == ("image/png", PNG)
    assert fake.downloads == ["photos/file_90.jpg"]  # the big one never came down whole
    assert len(fake.calls_to("getFile")) == 2


async def test_not_an_image_and_failed_downloads_are_explained(
    fake: FakeBotApi, bot: BotApiClient
) -> None:
    with pytest.raises(PhotoError) as info:
        await download_photo(bot, [stored(fake, b"%PDF-1.7 not a photo", 10)])
    assert str(info.value) == NOT_AN_IMAGE
    fake.fail_next("getFile", BotFailure.server_error())
    with pytest.raises(PhotoError) as info:
        await download_photo(bot, [stored(fake, JPEG, 10)])
    assert str(info.value) == DOWNLOAD_FAILED and info.value.detail.startswith("getFile")
