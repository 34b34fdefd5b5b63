"""Conversations of the chat window, one JSON file each, kept on disk between runs.

Qt-free. Files are small and written atomically (temporary file, then rename), so the chat
window saves on the GUI thread after each reply without a noticeable pause.

A message is a plain JSON object (:class:`ChatMessage`). Beside its text it carries state the
window shows but never sends to the model: who answered, whether the reply was stopped,
whether the model refused the message, whether the person dropped it from the context. A
reply's thinking and tool calls are kept apart from its text: the model gets them back the
way the pipeline takes them (``reasoning_content``, ``tool_calls``), never inside the text.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

logger = logging.getLogger(__name__)

_TITLE_LENGTH = 48

Role = Literal["user", "assistant", "error"]
_ROLES: tuple[Role, ...] = ("user", "assistant", "error")


class ToolCallRecord(TypedDict):
    """A tool call the model made: ``arguments`` is the JSON text it wrote."""

    id: str
    name: str
    arguments: str


class ReplyFigures(TypedDict):
    """How a reply was generated, from the pipeline's Done timings and usage."""

    tokens: int
    tokens_per_second: float | None
    ttft_seconds: float | None


class Attachment(TypedDict):
    """A text file (or pasted code) sent with a user message: shown as a chip, its ``text``
    sent to the model inside the message."""

    name: str
    size: int  # bytes
    tokens: int  # as the model's tokenizer counts the text
    text: str


class ImageRecord(TypedDict):
    """An image sent with a user message: kept as a file beside the history (see
    :mod:`desktop.chat_images`), never inlined in the conversation's JSON."""

    name: str  # what the person attached: the file's name, or "pasted image"
    file: str  # the stored file, relative to the chats folder: images/<chat id>/<sha256>.png
    width: int
    height: int
    size: int  # bytes of the stored file


IMAGES_FOLDER = "images"  # under the chats folder: one folder of image files per chat


@dataclass
class ChatSettings:
    """Generation settings of one chat (``None``: the model's default / its full context)."""

    temperature: float | None = None
    max_tokens: int | None = None
    context_limit: int | None = None  # tokens the prompt and reply may use together

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatSettings:
        max_tokens, limit = data.get("max_tokens"), data.get("context_limit")
        return cls(
            temperature=_float_or_none(data.get("temperature")),
            max_tokens=None if max_tokens is None else int(max_tokens),
            context_limit=None if limit is None else int(limit),
        )


class ChatMessage(TypedDict):
    """One entry of a conversation. ``error`` entries are shown only, never sent."""

    role: Role
    content: str
    model: NotRequired[str]  # assistant: the model that wrote the reply
    stopped: NotRequired[bool]  # assistant: the person stopped the reply
    interrupted: NotRequired[bool]  # assistant: the engine failed part way; kept as it came
    cut_at: NotRequired[int]  # assistant: cut by max tokens (finish "length") at this many
    failed: NotRequired[bool]  # user: the model refused it, so it is not part of the chat
    dropped: NotRequired[bool]  # dropped from the context: shown, no longer sent
    thinking: NotRequired[str]  # assistant: a reasoning model's thinking before the answer
    thinking_seconds: NotRequired[float]  # assistant: how long it thought
    calls: NotRequired[list[ToolCallRecord]]  # assistant: the tools it called
    figures: NotRequired[ReplyFigures]  # assistant: tokens, tokens/s, time to first token
    attachments: NotRequired[list[Attachment]]  # user: files sent with the message
    images: NotRequired[list[ImageRecord]]  # user: images sent with the message
    # assistant: every version of the reply (Regenerate keeps the earlier ones), each a
    # message of its own without these two keys; ``version`` is the one shown, whose fields
    # are the message's own (what is sent on). Absent: the reply has one version.
    versions: NotRequired[list[ChatMessage]]
    version: NotRequired[int]


# A message's place in the chat, not one version's: it stays when the version shown changes.
_PLACE_KEYS = ("dropped",)
_VERSION_KEYS = ("versions", "version")


def reply_versions(message: ChatMessage) -> list[ChatMessage]:
    """Every version of a reply, the one shown as it is now (one for a reply never
    regenerated); each without the place and version keys."""
    shown = _one_version(message)
    versions = [copy.deepcopy(v) for v in message.get("versions", [])]
    if not versions:
        return [shown]
    versions[min(max(message.get("version", 0), 0), len(versions) - 1)] = shown
    return versions


def with_new_version(former: ChatMessage, new: ChatMessage) -> ChatMessage:
    """``new`` shown as the latest version of the reply ``former`` (Regenerate)."""
    versions = [*reply_versions(former), _one_version(new)]
    return _shown(versions, len(versions) - 1, former)


def show_version(
    message: ChatMessage, number: int, place: ChatMessage | None = None
) -> ChatMessage:
    """``message`` with its version ``number`` (from 0) shown: that version's fields become
    the message's, so the chat continues from it. ``place`` (default ``message``) gives the
    keys of the message's place in the chat (``dropped``)."""
    return _shown(reply_versions(message), number, place or message)


def _shown(versions: list[ChatMessage], number: int, place: ChatMessage) -> ChatMessage:
    number = min(max(number, 0), len(versions) - 1)
    shown = copy.deepcopy(versions[number])
    for key in _PLACE_KEYS:
        value = place.get(key)
        if value:
            shown[key] = value  # type: ignore[literal-required]
    if len(versions) > 1:
        shown["versions"] = versions
        shown["version"] = number
    return shown


def _one_version(message: ChatMessage) -> ChatMessage:
    version = copy.deepcopy(message)
    for key in (*_PLACE_KEYS, *_VERSION_KEYS):
        version.pop(key, None)  # type: ignore[misc]
    return version


def sent_to_model(message: ChatMessage) -> bool:
    """Whether the model sees ``message`` on the next turn."""
    return (
        message["role"] in ("user", "assistant")
        and not message.get("failed", False)
        and not message.get("dropped", False)
    )


@dataclass
class Conversation:
    """One chat: its messages, its system prompt and an optional name the person gave it."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    system_prompt: str = ""
    messages: list[ChatMessage] = field(default_factory=list)
    model: str | None = None  # the model of the last reply (older files: of every reply)
    name: str | None = None
    settings: ChatSettings = field(default_factory=ChatSettings)
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    @property
    def title(self) -> str:
        """The name the person gave, else the first message (shortened), else "New chat"."""
        if self.name:
            return self.name
        for message in self.messages:
            if message["role"] == "user":
                text = " ".join(message["content"].split())
                if not text and message.get("images"):  # an image sent without a word
                    text = f"Image: {message['images'][0]['name']}"
                return text if len(text) <= _TITLE_LENGTH else text[: _TITLE_LENGTH - 1] + "…"
        return "New chat"

    def engine_messages(self) -> list[dict[str, Any]]:
        """What the model sees: the system prompt, then the user and assistant turns that
        were neither refused nor dropped. Markers such as *(stopped)* are never part of it."""
        turns: list[dict[str, Any]] = []
        if self.system_prompt.strip():
            turns.append({"role": "system", "content": self.system_prompt.strip()})
        turns.extend(_engine_turn(m) for m in self.messages if sent_to_model(m))
        return turns

    def take_failed(self) -> str | None:
        """Remove the last refused message and the errors after it; return its text."""
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            if message["role"] == "user" and message.get("failed", False):
                if all(m["role"] == "error" for m in self.messages[index + 1 :]):
                    del self.messages[index:]
                    return message["content"]
                return None
        return None

    def drop_oldest_turn(self) -> bool:
        """Drop the oldest turn still sent (a user message and its replies) from the context.

        The messages stay in the conversation, marked ``dropped``. Returns False when no turn
        is left to drop.
        """
        start = next((i for i, m in enumerate(self.messages) if sent_to_model(m)), None)
        if start is None:
            return False
        end = start + 1
        while end < len(self.messages) and self.messages[end]["role"] != "user":
            end += 1
        for message in self.messages[start:end]:
            message["dropped"] = True
        return True

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Conversation:
        return cls(
            id=str(data["id"]),
            system_prompt=str(data.get("system_prompt", "")),
            messages=[_message(m) for m in data.get("messages", [])],
            model=data.get("model"),
            name=str(data["name"]) if data.get("name") else None,
            settings=ChatSettings.from_dict(data.get("settings") or {}),
            created=float(data.get("created", 0)),
            updated=float(data.get("updated", 0)),
        )


def message_text(message: ChatMessage) -> str:
    """The message as the model reads it: what was typed, then each attachment's text in a
    fence named after its file."""
    parts = [message["content"]] if message["content"] else []
    for attached in message.get("attachments", []):
        parts.append(f"Attached file {attached['name']}:\n```\n{attached['text']}\n```")
    return "\n\n".join(parts)


def _engine_turn(message: ChatMessage) -> dict[str, Any]:
    """One turn as the pipeline takes it. Thinking goes as ``reasoning_content`` and the
    chat template decides: Qwen3's and DeepSeek's leave past thinking out of the prompt."""
    turn: dict[str, Any] = {"role": message["role"], "content": message_text(message)}
    if message.get("thinking"):
        turn["reasoning_content"] = message["thinking"]
    if message.get("calls"):
        turn["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in message["calls"]
        ]
    return turn


def _message(data: dict[str, Any]) -> ChatMessage:
    role = str(data["role"])
    if role not in _ROLES:
        raise ValueError(f"unknown message role {role!r}")
    message = ChatMessage(role=role, content=str(data["content"]))
    if data.get("model"):
        message["model"] = str(data["model"])
    for flag in ("stopped", "interrupted", "failed", "dropped"):
        if data.get(flag):
            message[flag] = True
    if data.get("cut_at"):
        message["cut_at"] = int(data["cut_at"])
    if data.get("thinking"):
        message["thinking"] = str(data["thinking"])
    if data.get("thinking_seconds") is not None:
        message["thinking_seconds"] = float(data["thinking_seconds"])
    if data.get("calls"):
        message["calls"] = [_call(c) for c in data["calls"]]
    figures = data.get("figures")
    if isinstance(figures, dict):
        message["figures"] = ReplyFigures(
            tokens=int(figures.get("tokens", 0)),
            tokens_per_second=_float_or_none(figures.get("tokens_per_second")),
            ttft_seconds=_float_or_none(figures.get("ttft_seconds")),
        )
    if data.get("attachments"):
        message["attachments"] = [
            Attachment(
                name=str(a["name"]),
                size=int(a["size"]),
                tokens=int(a["tokens"]),
                text=str(a["text"]),
            )
            for a in data["attachments"]
        ]
    if data.get("images"):
        message["images"] = [
            ImageRecord(
                name=str(i["name"]),
                file=str(i["file"]),
                width=int(i["width"]),
                height=int(i["height"]),
                size=int(i["size"]),
            )
            for i in data["images"]
        ]
    versions = data.get("versions")
    if role == "assistant" and isinstance(versions, list) and len(versions) > 1:
        message["versions"] = [_one_version(_message(v)) for v in versions]
        number = data.get("version")
        shown = number if isinstance(number, int) and not isinstance(number, bool) else 0
        message["version"] = min(max(shown, 0), len(versions) - 1)
    return message


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _call(data: dict[str, Any]) -> ToolCallRecord:
    return ToolCallRecord(
        id=str(data.get("id", "")), name=str(data["name"]), arguments=str(data.get("arguments", ""))
    )


class ChatHistory:
    """The conversations folder (``<config>/chats``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def list(self) -> list[Conversation]:
        """Every readable conversation, most recently updated first."""
        if not self.folder.is_dir():
            return []
        conversations = []
        for path in self.folder.glob("*.json"):
            try:
                conversations.append(Conversation.from_dict(json.loads(path.read_text("utf-8"))))
            except (OSError, ValueError, KeyError, TypeError):
                logger.warning("skipping unreadable conversation %s", path)
        return sorted(conversations, key=lambda c: c.updated, reverse=True)

    def get(self, conversation_id: str) -> Conversation | None:
        return next((c for c in self.list() if c.id == conversation_id), None)

    def save(self, conversation: Conversation, *, touch: bool = True) -> None:
        """Write ``conversation`` (only once it has messages: empty chats are not kept).

        ``touch=False`` keeps its place in the list (a rename is not new activity).
        """
        if not conversation.messages:
            return
        if touch:
            conversation.updated = time.time()
        self.folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(asdict(conversation), ensure_ascii=False, indent=1)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".chat-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, self.folder / f"{conversation.id}.json")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._prune_images(conversation)

    def delete(self, conversation_id: str) -> None:
        """Forget the chat: its file and its images."""
        (self.folder / f"{conversation_id}.json").unlink(missing_ok=True)
        shutil.rmtree(self.images_folder(conversation_id), ignore_errors=True)

    def images_folder(self, conversation_id: str) -> Path:
        """Where the chat's images are kept (files named by their content's hash)."""
        return self.folder / IMAGES_FOLDER / conversation_id

    def _prune_images(self, conversation: Conversation) -> None:
        """Image files no message of the chat names any more (deleted messages) go."""
        folder = self.images_folder(conversation.id)
        if not folder.is_dir():
            return
        kept = {
            Path(record["file"]).name
            for message in conversation.messages
            for record in message.get("images", [])
        }
        for path in folder.iterdir():
            if path.is_file() and path.name not in kept:
                path.unlink(missing_ok=True)
