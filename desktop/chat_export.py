"""A conversation as a file to keep or share (the chat list's *Export*), and chat search.

Two formats: Markdown, for reading (each turn under a heading with who wrote it, thinking as
a quote, attachments as fenced files, the version shown of a regenerated reply), and JSON,
the conversation exactly as the history keeps it (:mod:`desktop.history`), so nothing is
lost. :func:`matches` is the chat list's search: a chat matches when every word of the query
is in its title or the text of one of its messages.

Qt-free; writing is one small file, atomically.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from desktop.history import ChatMessage, Conversation

ExportFormat = Literal["markdown", "json"]
SUFFIXES: dict[ExportFormat, str] = {"markdown": ".md", "json": ".json"}


def matches(conversation: Conversation, query: str) -> bool:
    """Whether every word of ``query`` (any case) is in the chat's title or its messages."""
    words = query.casefold().split()
    if not words:
        return True
    texts = [conversation.title, *(_searchable(m) for m in conversation.messages)]
    haystack = "\n".join(texts).casefold()
    return all(word in haystack for word in words)


def _searchable(message: ChatMessage) -> str:
    parts = [message["content"]]
    parts += [v["content"] for v in message.get("versions", [])]
    parts += [a["name"] for a in message.get("attachments", [])]
    return "\n".join(parts)


def to_markdown(conversation: Conversation) -> str:
    """The chat for reading: a heading per turn, in the order shown."""
    lines = [f"# {conversation.title}", ""]
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(conversation.updated or time.time()))
    lines += [f"*Sidelight chat, {stamp}*", ""]
    if conversation.system_prompt.strip():
        lines += ["**System prompt:**", "", _quote(conversation.system_prompt.strip()), ""]
    for message in conversation.messages:
        lines += _turn(message, conversation.model or "Assistant")
    return "\n".join(lines).rstrip() + "\n"


def _turn(message: ChatMessage, fallback_model: str) -> list[str]:
    role = message["role"]
    if role == "error":
        return [_quote(f"Error: {message['content']}"), ""]
    who = "You" if role == "user" else message.get("model", fallback_model)
    notes = []
    versions = message.get("versions", [])
    if len(versions) > 1:
        notes.append(f"version {message.get('version', 0) + 1} of {len(versions)}")
    if message.get("dropped"):
        notes.append("no longer sent to the model")
    if message.get("failed"):
        notes.append("not sent")
    heading = f"## {who}" + (f" ({', '.join(notes)})" if notes else "")
    lines = [heading, ""]
    thinking = message.get("thinking", "").strip()
    if thinking:
        lines += [_quote(f"Thought: {thinking}"), ""]
    if message["content"]:
        lines += [message["content"], ""]
    for call in message.get("calls", []):
        lines += [f"Called `{call['name']}` with `{call['arguments']}`", ""]
    for attached in message.get("attachments", []):
        fence = "````" if "```" in attached["text"] else "```"
        lines += [f"Attached file {attached['name']}:", "", fence, attached["text"], fence, ""]
    for image in message.get("images", []):
        lines += [f"*Image: {image['name']} ({image['width']} x {image['height']} px)*", ""]
    if message.get("stopped"):
        lines += ["*(stopped)*", ""]
    elif message.get("cut_at"):
        lines += [f"*(cut at {message['cut_at']} tokens)*", ""]
    return lines


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


def to_json(conversation: Conversation) -> str:
    """The chat as the history keeps it (every version, setting and figure)."""
    return json.dumps(asdict(conversation), ensure_ascii=False, indent=1) + "\n"


def export(conversation: Conversation, path: Path, kind: ExportFormat) -> Path:
    """Write ``conversation`` to ``path`` (its suffix added when it has none); the path.

    Raises:
        OSError: the file cannot be written (the folder is read-only, the disk full).
    """
    if not path.suffix:
        path = path.with_suffix(SUFFIXES[kind])
    text = to_markdown(conversation) if kind == "markdown" else to_json(conversation)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".export-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def file_name(conversation: Conversation, kind: ExportFormat) -> str:
    """A file name for the export: the title, without characters file systems refuse."""
    safe = "".join(c if c.isalnum() or c in " -_." else " " for c in conversation.title)
    return (" ".join(safe.split())[:60].strip(" .") or "chat") + SUFFIXES[kind]
