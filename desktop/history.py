"""Conversations of the chat window, one JSON file each, kept on disk between runs.

Qt-free. Files are small and written atomically (temporary file, then rename), so the chat
window saves on the GUI thread after each reply without a noticeable pause.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_TITLE_LENGTH = 48


@dataclass
class Conversation:
    """One chat: its messages (``user``, ``assistant`` and shown-only ``error`` entries)."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    system_prompt: str = ""
    messages: list[dict[str, str]] = field(default_factory=list)
    model: str | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    @property
    def title(self) -> str:
        for message in self.messages:
            if message["role"] == "user":
                text = " ".join(message["content"].split())
                return text if len(text) <= _TITLE_LENGTH else text[: _TITLE_LENGTH - 1] + "…"
        return "New chat"

    def engine_messages(self) -> list[dict[str, Any]]:
        """What the model sees: the system prompt, then user and assistant turns."""
        turns: list[dict[str, Any]] = []
        if self.system_prompt.strip():
            turns.append({"role": "system", "content": self.system_prompt.strip()})
        turns.extend(
            {"role": m["role"], "content": m["content"]}
            for m in self.messages
            if m["role"] in ("user", "assistant")
        )
        return turns

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Conversation:
        return cls(
            id=str(data["id"]),
            system_prompt=str(data.get("system_prompt", "")),
            messages=[
                {"role": str(m["role"]), "content": str(m["content"])}
                for m in data.get("messages", [])
            ],
            model=data.get("model"),
            created=float(data.get("created", 0)),
            updated=float(data.get("updated", 0)),
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

    def save(self, conversation: Conversation) -> None:
        """Write ``conversation`` (only once it has messages: empty chats are not kept)."""
        if not conversation.messages:
            return
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

    def delete(self, conversation_id: str) -> None:
        (self.folder / f"{conversation_id}.json").unlink(missing_ok=True)
