"""The fake Bot API's ``sendDocument`` (mixed into :class:`fakes.bot_api.FakeBotApi`), as strict
as Telegram about an upload:

* the request is ``multipart/form-data`` (:func:`parse_multipart`): text fields and file parts;
  a file part must carry a ``filename``; a field named twice is refused;
* ``document``: an uploaded file part (or ``attach://<part>``, or a file_id / URL string as
  text); ``caption`` 0-1024 characters after entity parsing; the upload at most
  :attr:`DocumentMethods.max_upload_bytes` (Telegram: 50 MB for bots), else 413
  "Request Entity Too Large"; an empty file: 400 "file must be non-empty";
* the answer is the Message with its ``document`` (file_id, file_unique_id, file_name,
  mime_type, file_size); what was sent is kept in ``documents`` for tests.
"""

from __future__ import annotations

import abc
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

import attrs

MAX_UPLOAD_BYTES = 50 * 1024 * 1024
MAX_CAPTION = 1024

DOCUMENT_SPECS: dict[str, dict[str, str]] = {
    "sendDocument": {
        "chat_id": "chat!",
        "document": "file!",
        "caption": "str",
        "parse_mode": "str",
        "caption_entities": "list",
        "thumbnail": "file",
        "disable_content_type_detection": "bool",
        "disable_notification": "bool",
        "protect_content": "bool",
        "reply_parameters": "obj",
        "reply_markup": "obj",
        "message_thread_id": "int",
        "business_connection_id": "str",
        "message_effect_id": "str",
        "allow_paid_broadcast": "bool",
    }
}


class DocumentFailure(Exception):
    """An ``{"ok": false}`` answer from the document methods (mapped by the fake)."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status, self.description = status, description


@attrs.frozen
class Upload:
    """A file part of a multipart request."""

    name: str
    filename: str
    content_type: str
    data: bytes


@attrs.frozen
class SentDocument:
    chat_id: int | str
    message_id: int
    file_name: str
    mime_type: str
    data: bytes
    caption: str | None


def parse_multipart(content_type: bytes, body: bytes) -> tuple[dict[str, str], dict[str, Upload]]:
    """The text fields and file parts of a ``multipart/form-data`` body (DocumentFailure 400
    when it is not one)."""
    header = b"Content-Type: " + content_type + b"\r\n\r\n"
    parsed = BytesParser(policy=HTTP).parsebytes(header + body)
    if not parsed.is_multipart() or parsed.get_content_subtype() != "form-data":
        raise DocumentFailure(400, "Bad Request: can't parse multipart/form-data request")
    fields: dict[str, str] = {}
    files: dict[str, Upload] = {}
    parts: list[Message] = list(parsed.iter_parts())  # type: ignore[attr-defined]
    if not parts or parsed.defects:
        raise DocumentFailure(400, "Bad Request: can't parse multipart/form-data request")
    for part in parts:
        if part.get_content_disposition() != "form-data":
            raise DocumentFailure(400, "Bad Request: a part without form-data disposition")
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str) or not name or name in fields or name in files:
            raise DocumentFailure(400, "Bad Request: a part without a name, or one named twice")
        data = part.get_payload(decode=True)
        payload = data if isinstance(data, bytes) else b""
        filename = part.get_filename()
        if filename is None:
            fields[name] = payload.decode("utf-8")
        else:
            files[name] = Upload(name, filename, part.get_content_type(), payload)
    return fields, files


class DocumentMethods(abc.ABC):
    """``sendDocument`` for the fake (a mixin of FakeBotApi, which provides ``chat``,
    ``new_message`` and ``message_json``)."""

    def __init__(self) -> None:
        self.documents: list[SentDocument] = []
        #: the largest upload accepted (Telegram's 50 MB; lowered by tests)
        self.max_upload_bytes = MAX_UPLOAD_BYTES
        self._uploads: dict[str, Upload] = {}

    @abc.abstractmethod
    def chat(self, value: int | str) -> int | str: ...

    @abc.abstractmethod
    def new_message(self, chat_id: int | str) -> int: ...

    @abc.abstractmethod
    def message_json(
        self, chat_id: int | str, message_id: int, **fields: Any
    ) -> dict[str, Any]: ...

    def take_uploads(self, files: dict[str, Upload]) -> None:
        """The file parts of the request being handled (``attach://`` and direct parts)."""
        self._uploads = files

    def sent_documents(self, chat_id: int | str) -> list[SentDocument]:
        return [d for d in self.documents if d.chat_id == chat_id]

    def _upload(self, value: object) -> Upload:
        if isinstance(value, Upload):
            return value
        if isinstance(value, str) and value.startswith("attach://"):
            found = self._uploads.get(value[len("attach://") :])
            if found is None:
                raise DocumentFailure(400, "Bad Request: wrong file identifier/HTTP URL specified")
            return found
        # a file_id or URL: the fake knows none
        raise DocumentFailure(400, "Bad Request: wrong file identifier/HTTP URL specified")

    async def _send_document(self, p: dict[str, Any]) -> object:
        chat = self.chat(p["chat_id"])
        upload = self._upload(p["document"])
        if len(upload.data) > self.max_upload_bytes:
            raise DocumentFailure(413, "Request Entity Too Large")
        if not upload.data:
            raise DocumentFailure(400, "Bad Request: file must be non-empty")
        caption = p.get("caption")
        if caption is not None and len(caption) > MAX_CAPTION:
            raise DocumentFailure(400, "Bad Request: message caption is too long")
        message_id = self.new_message(chat)
        self.documents.append(
            SentDocument(
                chat, message_id, upload.filename, upload.content_type, upload.data, caption
            )
        )
        n = len(self.documents)
        document = {
            "file_id": f"DOC{n}",
            "file_unique_id": f"UDOC{n}",
            "file_name": upload.filename,
            "mime_type": upload.content_type,
            "file_size": len(upload.data),
        }
        return self.message_json(chat, message_id, document=document, caption=caption)
