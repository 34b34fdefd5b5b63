"""Messages between the server process and the engine worker process.

Both sides pickle these over one ``multiprocessing`` pipe: commands go down, lists of events
come back (one list per engine step, so a step with four active streams costs one send).
Everything here is plain data so a crash on either side never leaves shared state behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from engine.models import ModelSpec
from engine.parsing.tool_parsers.grammar import Node as GrammarNode

FinishReason = Literal["stop", "length", "cancelled", "error"]
"""How an accepted request ended (the wire value is the string)."""

Speculation = Literal["off", "prompt_lookup", "draft"]
"""How a pipeline guesses tokens ahead: not at all, from n-grams of the prompt, or with a
small draft model of the same vocabulary. Either way greedy output is what plain decoding
gives: the target model checks every guessed token."""

RejectCode = Literal[
    "context_length_exceeded",  # the prompt alone fills the model's context
    "invalid_request",  # a field the engine cannot use (the ``param`` names it)
    "fim_unsupported",  # a ``suffix`` for a model without fill-in-the-middle tokens
    "no_model",  # no chat model is loaded
    "engine_restarting",  # the worker died or stopped answering; retry shortly
    "model_damaged",  # the model's files failed their check (the message names the file)
    "internal",  # anything else: a bug or a library failure
]
"""Why a request was refused; the server maps each code to an HTTP status."""

# ---- what a request asks for -------------------------------------------------------------


@dataclass(frozen=True)
class SamplingParams:
    """Sampling controls; ``None`` means the model's own generation_config default."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False


@dataclass(frozen=True)
class OutputConstraint:
    """Constrained decoding (GenAI structured output): the reply must match a JSON schema.

    With ``begin``/``end`` set, the reply is ``begin + <JSON> + end`` (a tool call in the
    model's own syntax, e.g. ``<tool_call>\n`` ... ``\n</tool_call>``).

    With ``trigger`` set the constraint is *lazy* (``tool_choice: "auto"``, as llama.cpp's
    lazy grammars and XGrammar's triggered tags do): the reply is free text until the model
    writes ``trigger`` (a prefix of ``begin``), and from there each call must be
    ``begin + <JSON> + end``; ``single`` ends the reply after the first call
    (``parallel_tool_calls: false``). A lazy grammar that cannot be compiled is dropped, not
    refused: the client asked for no constraint, so its request runs unconstrained.

    With ``structure`` set the grammar is that tree of structural tags
    (:mod:`engine.parsing.tool_parsers.grammar`), built by the family's parser module.
    """

    json_schema: str
    begin: str = ""
    end: str = ""
    param: str = "response_format"  # the request field a bad schema came from
    trigger: str = ""
    single: bool = False
    # A call grammar in a family's own syntax (harmony, Kimi K2, GLM...): when set it is the
    # whole constraint (``begin``/``end`` unused; ``json_schema`` lists the tools' parameter
    # schemas, for the worker's checks; ``trigger`` set when the tree is a lazy one).
    structure: GrammarNode | None = None
    # The structure to use instead when the prompt ends inside an opened ``<think>`` block
    # (known only once templated, in the worker: see :meth:`for_prompt`).
    after_open: GrammarNode | None = None

    def for_prompt(self, opens_reasoning: bool) -> OutputConstraint:
        """The constraint for a prompt that does (or does not) end inside ``<think>``."""
        if not opens_reasoning or self.after_open is None:
            return self
        return replace(self, structure=self.after_open, after_open=None)

    @property
    def lazy(self) -> bool:
        """Free text until ``trigger``: an optional constraint (see the class docstring)."""
        return bool(self.trigger)


@dataclass(frozen=True)
class ImageInput:
    """One image of a request, decoded and checked by the server (engine.server.images):
    8-bit RGB, row-major, ``width * height * 3`` bytes. Plain bytes so it pickles cheaply;
    the worker makes the ``ov.Tensor`` (NHWC, uint8) GenAI takes."""

    width: int
    height: int
    rgb: bytes


@dataclass(frozen=True)
class GenerationRequest:
    """One generation: either chat ``messages`` (templated in the worker) or a raw ``prompt``.

    ``suffix`` asks for fill-in-the-middle: the worker wraps ``prompt`` and ``suffix`` in the
    model's FIM tokens. ``logprobs`` asks for each token's text and log-probability.
    ``max_tokens`` is an upper bound in every dialect: more than the context leaves after
    the prompt is clipped to what fits, not refused (``engine.worker.prepare.completion_room``).
    ``request_id`` is assigned by :meth:`engine.supervisor.client.EngineClient.submit`.
    ``count_only`` templates and tokenizes the prompt without generating: the worker answers
    :class:`RequestAccepted` (the prompt's size) and :class:`Finished` at once, and the
    prompt need not fit the context (Anthropic's ``count_tokens``).
    ``images`` (vision-language models): every image of the request in order; a message
    names its own by index in ``message["images"]`` (placed before its text).
    """

    request_id: int = 0
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    constraint: OutputConstraint | None = None
    suffix: str | None = None
    logprobs: bool = False
    count_only: bool = False
    # A smaller context for this request (Ollama's num_ctx); the model's own is never exceeded.
    context_limit: int | None = None
    # For the client, not the worker: how long the model stays loaded once idle after this
    # request (seconds; math.inf: forever; None: unchanged). Set when the request is queued.
    keep_alive: float | None = None
    images: tuple[ImageInput, ...] = ()


# ---- commands: server -> worker ----------------------------------------------------------


@dataclass(frozen=True)
class LoadModel:
    spec: ModelSpec
    device: str
    properties: dict[str, Any]
    kv_cache_gb: float
    compile_cache_dir: str | None = None
    backend: str = "auto"  # "auto", "batched" (continuous batching) or "serial" (LLMPipeline)
    stream_interval: float = 0.0  # seconds; deltas closer together than this are merged
    # Speculative decoding (batched backend only): prompt lookup, or a draft model when
    # ``draft_path`` is set (it wins over prompt lookup: one pipeline does one of them).
    prompt_lookup: bool = False
    draft_path: str | None = None
    draft_device: str | None = None  # None: the target's device
    speculative_tokens: int = 4  # tokens guessed per step (GenAI's num_assistant_tokens)
    max_ngram_size: int = 3  # prompt lookup: the longest n-gram matched against the prompt


@dataclass(frozen=True)
class UnloadModel:
    pass


@dataclass(frozen=True)
class Submit:
    request: GenerationRequest


@dataclass(frozen=True)
class Cancel:
    request_id: int


@dataclass(frozen=True)
class Shutdown:
    pass


@dataclass(frozen=True)
class Embed:
    """Embed ``texts`` with the embedding model ``spec`` (loaded on first use, kept after).

    Runs beside the chat model: an IDE indexing code does not evict the model it chats with.
    """

    request_id: int
    spec: ModelSpec
    device: str
    texts: tuple[str, ...]
    truncate: bool = False  # Ollama's truncate: cut a text past the model's limit, counted cut


@dataclass(frozen=True)
class Rerank:
    """Score each of ``documents`` against ``query`` with the reranker ``spec`` (loaded on
    first use and kept, beside the chat model, as embedding models are)."""

    request_id: int
    spec: ModelSpec
    device: str
    query: str
    documents: tuple[str, ...]


SpeechTask = Literal["transcribe", "translate"]
"""What a speech recogniser is asked for: the words as spoken, or in English."""


@dataclass(frozen=True)
class Transcribe:
    """Transcribe one window of speech with the recogniser ``spec`` (loaded on first use and
    kept, as embedding models are). ``samples`` is 16 kHz mono float32 audio, native byte
    order, at most one window long: the server cuts longer audio and sends the windows one
    at a time (progress, cancellation between windows, a bounded pipe message)."""

    request_id: int
    spec: ModelSpec
    device: str
    samples: bytes
    task: SpeechTask = "transcribe"
    language: str | None = None  # ISO-639-1 code; None: the model detects it
    prompt: str | None = None  # Whisper's initial prompt (spelling, context)
    temperature: float = 0.0
    timestamps: bool = False  # segments with their times (verbose_json, srt, vtt)


@dataclass(frozen=True)
class Synthesize:
    """Speak one piece of text with the text-to-speech model ``spec`` (loaded on first use
    and kept, as embedding models are). The server cuts long input into pieces the model can
    speak and sends them one at a time (streaming, cancellation between pieces, a bounded
    pipe message). ``voice`` is a name the server checked."""

    request_id: int
    spec: ModelSpec
    device: str
    text: str
    voice: str


@dataclass(frozen=True)
class Ping:
    """Answered with :class:`Pong` between engine steps.

    The client uses it to hand reading over to an event loop and, as a watchdog, to tell a
    busy worker from one that stopped answering.
    """

    token: int


Command = (
    LoadModel
    | UnloadModel
    | Submit
    | Cancel
    | Shutdown
    | Embed
    | Rerank
    | Transcribe
    | Synthesize
    | Ping
)

# ---- events: worker -> server ------------------------------------------------------------


@dataclass(frozen=True)
class WorkerStarted:
    pid: int


@dataclass(frozen=True)
class LoadProgress:
    stage: Literal["reading", "compiling"]
    message: str


@dataclass(frozen=True)
class ModelLoaded:
    """The chat model is ready; also what its tokenizer says it can do."""

    spec: ModelSpec
    device: str
    backend: str
    load_seconds: float
    context_length: int | None
    chat_template: str | None = None
    fim_tokens: tuple[str, str, str] | None = None  # prefix, suffix, middle
    speculation: Speculation = "off"


@dataclass(frozen=True)
class ModelLoadFailed:
    spec: ModelSpec
    device: str
    message: str  # one client-safe sentence (the library's own text is in the engine log)
    damaged: bool = False  # the model's files were refused: the request's fault is the files


@dataclass(frozen=True)
class ModelUnloaded:
    pass


@dataclass(frozen=True)
class RequestAccepted:
    request_id: int
    prompt_tokens: int
    max_tokens: int
    opens_reasoning: bool = False  # the template's prompt ends inside a <think> block
    # Prompt tokens found in the prefix cache when the request joined the pipeline
    # (engine.worker.prefix_ledger says what the number means; 0 without prefix caching).
    cached_tokens: int = 0


@dataclass(frozen=True)
class RequestRejected:
    """The request cannot run; ``code`` maps to an HTTP status in the server."""

    request_id: int
    code: RejectCode
    message: str
    param: str | None = None


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its text (may be part of a character) and log-probability."""

    token: str
    logprob: float


@dataclass(frozen=True)
class TextDelta:
    request_id: int
    text: str
    tokens: int  # tokens generated since the previous delta
    logprobs: tuple[TokenLogprob, ...] = ()  # only when the request asked for them


@dataclass(frozen=True)
class Finished:
    """The last event of an accepted request."""

    request_id: int
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    ttft_seconds: float | None
    decode_seconds: float | None
    text: str = ""  # any text held back until the end (a partial stop string, a flush)
    error: str | None = None
    logprobs: tuple[TokenLogprob, ...] = ()
    stop_sequence: str | None = None  # the request's stop string that ended it, if one did
    # Speculative decoding: the engine steps that produced this request's tokens, and the
    # tokens beyond one per such step (guessed tokens the model accepted). Without
    # speculation every step yields one token: ``accepted_tokens`` is 0.
    decode_steps: int = 0
    accepted_tokens: int = 0
    speculation: Speculation = "off"
    cached_tokens: int = 0  # of ``prompt_tokens``, found in the prefix cache (see RequestAccepted)


@dataclass(frozen=True)
class Embedded:
    """The answer to :class:`Embed`: one vector per text, and the tokens they used."""

    request_id: int
    vectors: list[list[float]]
    prompt_tokens: int


@dataclass(frozen=True)
class Reranked:
    """The answer to :class:`Rerank`: each document's score, in the documents' order."""

    request_id: int
    scores: list[float]
    prompt_tokens: int


@dataclass(frozen=True)
class Transcribed:
    """The answer to :class:`Transcribe`: the window's text, its segments (seconds from the
    window's start, when timestamps were asked for) and the language spoken (a code)."""

    request_id: int
    text: str
    segments: tuple[tuple[float, float, str], ...] = ()
    language: str | None = None


@dataclass(frozen=True)
class Synthesized:
    """The answer to :class:`Synthesize`: mono float32 samples (native byte order) at
    ``sample_rate``."""

    request_id: int
    samples: bytes
    sample_rate: int


@dataclass(frozen=True)
class Pong:
    token: int


Event = (
    WorkerStarted
    | LoadProgress
    | ModelLoaded
    | ModelLoadFailed
    | ModelUnloaded
    | RequestAccepted
    | RequestRejected
    | TextDelta
    | Finished
    | Embedded
    | Reranked
    | Transcribed
    | Synthesized
    | Pong
)
