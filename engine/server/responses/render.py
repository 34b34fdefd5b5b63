"""Pipeline events -> the Responses API's streamed events and its final response object.

One :class:`ResponseRenderer` per request turns the pipeline's reply events into OpenAI's
event sequence: ``response.created``, ``response.in_progress``, then per output item
``response.output_item.added``, its parts and deltas, ``response.output_item.done``, and
last ``response.completed`` (``response.incomplete`` when the token limit cut the answer,
``response.failed`` when the engine failed). Every event carries a ``sequence_number``.
A whole (non-streamed) answer is rendered by feeding the same renderer (:func:`whole`), so
both have one shape.

Output items, in the order the model produced them: the thinking as a ``reasoning`` item
(its text as the summary when the request asked for one, else as ``reasoning_text``
content), the answer as a ``message`` item, and each tool call as a ``function_call`` item.

Not thread-safe: one renderer per request, used on the event loop.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from engine.parsing import ContentDelta, ReasoningText, ToolCallDelta, ToolCallEnd, ToolCallStart
from engine.server.errors import APIError
from engine.server.pipeline import Done, Logprobs, PipelineEvent, Reply
from engine.server.responses import objects

Event = dict[str, Any]
_Kind = Literal["reasoning", "message"]


@dataclass
class _OpenItem:
    """The reasoning or message item whose text is streaming."""

    kind: _Kind
    item_id: str
    output_index: int
    text: str = ""


@dataclass
class _OpenCall:
    item_id: str
    output_index: int
    call_id: str
    name: str
    arguments: str = ""


class ResponseRenderer:
    """Renders one response.

    Args:
        response: the response object as :func:`objects.response_object` builds it; it is
            updated in place and, once :attr:`finished`, is the final response.
        as_summary: the thinking goes out as the reasoning summary (the request asked for
            one) rather than as raw reasoning text.
        namespaces: function name -> namespace, for calls of namespaced tools.
    """

    def __init__(
        self,
        response: dict[str, Any],
        *,
        as_summary: bool = False,
        namespaces: dict[str, str] | None = None,
    ) -> None:
        self.response = response
        self.as_summary = as_summary
        self.namespaces = namespaces or {}
        self.finished = False
        self._sequence = 0
        self._output: list[dict[str, Any]] = []  # finished items, in output order
        self._open: _OpenItem | None = None
        self._calls: dict[int, _OpenCall] = {}  # by the call's index in the reply
        self._logprobs: list[tuple[str, float]] = []
        self._answered = False

    def start(self) -> list[Event]:
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.in_progress", response=self._snapshot()),
        ]

    def feed(self, event: PipelineEvent) -> list[Event]:
        """The events for one pipeline event (none for what the Responses API has no place for)."""
        events: list[Event] = []
        if isinstance(event, ReasoningText):
            events = self._text("reasoning", event.text)
        elif isinstance(event, ContentDelta):
            events = self._text("message", event.text)
        elif isinstance(event, ToolCallStart):
            events = self._call_start(event)
        elif isinstance(event, ToolCallDelta):
            events = self._call_delta(event)
        elif isinstance(event, ToolCallEnd):
            events = self._call_end(event.index, event.call.arguments, "completed")
        elif isinstance(event, Logprobs):
            self._logprobs.extend(event.items)
        elif isinstance(event, Done):
            events = self._done(event)
        return events  # Started: nothing to say

    def fail(self, error: APIError) -> list[Event]:
        """``response.failed``: the engine failed after the stream began."""
        self.finished = True
        self.response.update(
            status="failed",
            output=list(self._output),
            error={"code": _error_code(error), "message": error.message},
        )
        return [self._event("response.failed", response=self._snapshot())]

    # ---- items ---------------------------------------------------------------------------

    def _text(self, kind: _Kind, text: str) -> list[Event]:
        if not text:
            return []
        events: list[Event] = []
        if self._open is None or self._open.kind != kind:
            events += self._close()
            events += self._open_item(kind)
        item = self._open
        assert item is not None
        item.text += text
        where = {"item_id": item.item_id, "output_index": item.output_index}
        if kind == "message":
            events.append(
                self._event(
                    "response.output_text.delta", **where, content_index=0, delta=text, logprobs=[]
                )
            )
        elif self.as_summary:
            events.append(
                self._event(
                    "response.reasoning_summary_text.delta", **where, summary_index=0, delta=text
                )
            )
        else:
            events.append(
                self._event("response.reasoning_text.delta", **where, content_index=0, delta=text)
            )
        return events

    def _open_item(self, kind: _Kind) -> list[Event]:
        index = self._next_index()
        if kind == "message":
            self._answered = True
            item = _OpenItem(kind, objects.new_id("msg"), index)
            announced = objects.message_item(item.item_id, "", "in_progress")
            part = objects.output_text("")
        else:
            item = _OpenItem(kind, objects.new_id("rs"), index)
            announced = objects.reasoning_item(item.item_id, None, as_summary=self.as_summary)
            part = {"type": "summary_text" if self.as_summary else "reasoning_text", "text": ""}
        self._open = item
        where = {"item_id": item.item_id, "output_index": index}
        added = self._event("response.output_item.added", output_index=index, item=announced)
        if kind == "reasoning" and self.as_summary:
            part_added = self._event(
                "response.reasoning_summary_part.added", **where, summary_index=0, part=part
            )
        else:
            part_added = self._event(
                "response.content_part.added", **where, content_index=0, part=part
            )
        return [added, part_added]

    def _close(self, status: Literal["completed", "incomplete"] = "completed") -> list[Event]:
        """Finish the streaming reasoning or message item, if there is one."""
        item, self._open = self._open, None
        if item is None:
            return []
        where = {"item_id": item.item_id, "output_index": item.output_index}
        if item.kind == "message":
            logprobs = objects.token_logprobs(self._logprobs)
            self._logprobs = []
            done = objects.message_item(item.item_id, item.text, status, logprobs)
            events = [
                self._event(
                    "response.output_text.done",
                    **where,
                    content_index=0,
                    text=item.text,
                    logprobs=logprobs,
                ),
                self._event(
                    "response.content_part.done",
                    **where,
                    content_index=0,
                    part=objects.output_text(item.text, logprobs),
                ),
            ]
        elif self.as_summary:
            done = objects.reasoning_item(item.item_id, item.text, as_summary=True)
            part = {"type": "summary_text", "text": item.text}
            events = [
                self._event(
                    "response.reasoning_summary_text.done", **where, summary_index=0, text=item.text
                ),
                self._event(
                    "response.reasoning_summary_part.done", **where, summary_index=0, part=part
                ),
            ]
        else:
            done = objects.reasoning_item(item.item_id, item.text, as_summary=False)
            part = {"type": "reasoning_text", "text": item.text}
            events = [
                self._event(
                    "response.reasoning_text.done", **where, content_index=0, text=item.text
                ),
                self._event("response.content_part.done", **where, content_index=0, part=part),
            ]
        return [*events, self._item_done(item.output_index, done)]

    def _call_start(self, event: ToolCallStart) -> list[Event]:
        events = self._close()
        call = _OpenCall(objects.new_id("fc"), self._next_index(), event.id, event.name)
        self._calls[event.index] = call
        item = self._call_item(call, "in_progress")
        events.append(
            self._event("response.output_item.added", output_index=call.output_index, item=item)
        )
        return events

    def _call_delta(self, event: ToolCallDelta) -> list[Event]:
        call = self._calls.get(event.index)
        if call is None or not event.arguments:
            return []
        call.arguments += event.arguments
        return [
            self._event(
                "response.function_call_arguments.delta",
                item_id=call.item_id,
                output_index=call.output_index,
                delta=event.arguments,
            )
        ]

    def _call_end(
        self, index: int, arguments: str, status: Literal["completed", "incomplete"]
    ) -> list[Event]:
        call = self._calls.pop(index, None)
        if call is None:
            return []
        call.arguments = arguments
        return [
            self._event(
                "response.function_call_arguments.done",
                item_id=call.item_id,
                output_index=call.output_index,
                arguments=arguments,
            ),
            self._item_done(call.output_index, self._call_item(call, status)),
        ]

    def _call_item(
        self, call: _OpenCall, status: Literal["in_progress", "completed", "incomplete"]
    ) -> dict[str, Any]:
        arguments = call.arguments if status != "in_progress" else ""
        namespace = self.namespaces.get(call.name)
        return objects.function_call_item(
            call.item_id, call.call_id, call.name, arguments, status, namespace
        )

    def _done(self, done: Done) -> list[Event]:
        status: Literal["completed", "incomplete"] = (
            "incomplete" if done.finish_reason == "length" else "completed"
        )
        events = self._close(status)
        for index in sorted(self._calls):  # cut off by the token limit mid-call
            events += self._call_end(index, self._calls[index].arguments, "incomplete")
        if not self._answered and not any(i["type"] == "function_call" for i in self._output):
            events += self._open_item("message")  # clients expect an answer, even an empty one
            events += self._close(status)
        self.finished = True
        self.response.update(
            status=status,
            output=list(self._output),
            usage=objects.usage(
                done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.cached_tokens
            ),
        )
        if status == "incomplete":
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            self.response["completed_at"] = objects.now()
        events.append(self._event(f"response.{status}", response=self._snapshot()))
        return events

    # ---- plumbing ------------------------------------------------------------------------

    def _next_index(self) -> int:
        return len(self._output) + (1 if self._open else 0) + len(self._calls)

    def _item_done(self, output_index: int, item: dict[str, Any]) -> Event:
        self._output.append(item)  # items finish in the order they began
        return self._event("response.output_item.done", output_index=output_index, item=item)

    def _snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.response)

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event


def _error_code(error: APIError) -> str:
    """Codex and the SDK read ``context_length_exceeded``; engine failures are server errors."""
    return "server_error" if error.status >= 500 else (error.code or "invalid_request")


def whole(renderer: ResponseRenderer, reply: Reply) -> dict[str, Any]:
    """The response object for a whole (non-streamed) reply."""
    events: list[PipelineEvent] = [ReasoningText(reply.reasoning), ContentDelta(reply.content)]
    for index, call in enumerate(reply.calls):
        events += [
            ToolCallStart(index, call.id, call.name),
            ToolCallDelta(index, call.arguments),
            ToolCallEnd(index, call),
        ]
    events += [Logprobs(tuple(reply.logprobs)), reply.done]
    for event in events:
        renderer.feed(event)
    return renderer.response
