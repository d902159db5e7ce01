"""One ``getUpdates`` answer, parsed (:class:`UpdateBatch`): the updates with their raw JSON,
the unreadable entries, and the offset that confirms them all."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from actors.telegram.errors import MalformedUpdate, UnexpectedResponse
from actors.telegram.types import Update, parse_update


@attrs.frozen
class UpdateBatch:
    """One getUpdates answer: parsed updates with their raw JSON, unreadable ones, and the
    offset that confirms them all."""

    updates: tuple[Update, ...]
    malformed: tuple[MalformedUpdate, ...]
    #: 1 + the highest update_id seen (also of malformed entries); None when nothing came
    next_offset: int | None
    #: the raw JSON object of each entry of ``updates`` (same order), for durable storage
    payloads: tuple[Mapping[str, object], ...] = ()


def parse_update_batch(result: object) -> UpdateBatch:
    """A getUpdates ``result`` (a JSON list) as an :class:`UpdateBatch`."""
    if not isinstance(result, list):
        raise UnexpectedResponse("getUpdates: result is not a list")
    updates: list[Update] = []
    payloads: list[Mapping[str, object]] = []
    malformed: list[MalformedUpdate] = []
    highest: int | None = None
    for item in result:
        try:
            update = parse_update(item)
        except MalformedUpdate as exc:
            malformed.append(exc)
            seen = exc.update_id
        else:
            updates.append(update)
            payloads.append(item)
            seen = update.update_id
        if seen is not None and (highest is None or seen > highest):
            highest = seen
    next_offset = None if highest is None else highest + 1
    return UpdateBatch(tuple(updates), tuple(malformed), next_offset, tuple(payloads))
