"""Convert a transformers model (hub repo or local folder) to OpenVINO IR in a child process.

optimum-intel does the work (``optimum-cli export openvino``: int4 weights by default
(asymmetric, group 128, all layers for CPU/GPU; ``--sym --group-size -1 --ratio 1.0`` for the
NPU; see ``convert_child.recipe_args``), int8 or fp16 on request, tokenizer and
detokenizer converted by openvino-tokenizers). It runs in a child process because exporting
loads the whole model through torch: a crash or an out-of-memory kill ends only the child.

The child is ``convert_child.py`` run by the interpreter in the ``convert_python`` setting
(default: this one). That interpreter needs ``sidelight[convert]``; the app's own environment
does not, which keeps torch out of the tray app. The child's temporary files go to a folder
inside the job's staging folder, so cancelling (which kills the child's process group) and
deleting the staging folder leaves nothing behind.

:func:`check_tools` asks that interpreter whether it has the tools, and
:func:`source_problem` whether a source can be converted, so an app can say so before a job.

Threading: :func:`convert` blocks; cancel it with the ``cancel`` event from any thread.
Progress callbacks arrive on the calling thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from engine.models import GENERATIVE_TASKS, ModelError, spec_from_path, task_from_config
from engine.store.convert_child import recipe_args
from engine.store.errors import Cancelled, StoreError, disk_errors
from engine.store.facts import folder_size, ir_facts
from engine.store.hub import hub_error, list_repo
from engine.store.ids import id_from_name, normalize_id
from engine.store.manifest import Manifest, Source, now_iso
from engine.store.progress import Progress, ProgressCallback
from engine.store.store import ModelStore, StoredModel

logger = logging.getLogger(__name__)

WEIGHTS = ("int4", "int8", "fp16")
CHILD_SCRIPT = Path(__file__).with_name("convert_child.py")
EXIT_MISSING_TOOLS = 3  # convert_child.EXIT_MISSING_TOOLS
PREFIX = "@@sidelight "  # convert_child.PREFIX
INSTALL_HINT = (
    "converting models needs the conversion tools: pip install 'sidelight[convert]' "
    "(or point SIDELIGHT_CONVERT_PYTHON at a Python that has them)"
)
# Exporting holds the checkpoint, a traced copy and the compressed result: about 2.5x the
# checkpoint's bytes, plus the Python/torch runtime.
_MEMORY_FACTOR = 2.5
_MEMORY_BASE = 1024**3
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_KEEP_LOG_LINES = 400


class ConvertToolsMissing(StoreError):
    """The conversion interpreter lacks torch/optimum-intel; the message says what to install.

    ``missing`` names the modules when they are known (empty: the interpreter itself is
    missing or broken).
    """

    def __init__(self, message: str, missing: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class ConvertRequest:
    """What to convert and how."""

    source: str  # a hub repo id ("org/name") or a local folder with config.json
    weights: str = "int4"
    npu: bool = False
    model_id: str | None = None
    revision: str = "main"
    force: bool = False  # convert even if the memory estimate says it will not fit

    @property
    def local_path(self) -> Path | None:
        path = Path(self.source).expanduser()
        return path.resolve() if path.exists() else None

    @property
    def target_id(self) -> str:
        if self.model_id:
            return normalize_id(self.model_id)
        base = id_from_name(str(self.local_path or self.source))
        suffix = f"-{self.weights}" + ("-npu" if self.npu else "")
        return base if base.endswith(suffix) else normalize_id(f"{base}{suffix}"[:128])


@dataclass(frozen=True)
class MemoryEstimate:
    """How much memory a conversion needs, against what the machine has."""

    needed: int
    total: int
    available: int

    @property
    def fits(self) -> bool:
        return self.needed <= self.total

    @property
    def comfortable(self) -> bool:
        return self.needed <= self.available


def estimate_memory(
    request: ConvertRequest, *, endpoint: str | None = None, token: str | None = None
) -> MemoryEstimate:
    """Estimate the memory a conversion needs from the checkpoint's size.

    Raises:
        HubError: a hub source cannot be listed.
    """
    import psutil

    local = request.local_path
    if local is not None:
        weights = sum(
            p.stat().st_size
            for p in local.rglob("*")
            if p.is_file() and p.suffix in _WEIGHT_SUFFIXES
        )
    else:
        listing = list_repo(request.source, request.revision, endpoint=endpoint, token=token)
        weights = sum(f.size for f in listing.files if f.path.endswith(_WEIGHT_SUFFIXES))
    memory = psutil.virtual_memory()
    return MemoryEstimate(
        needed=int(weights * _MEMORY_FACTOR) + _MEMORY_BASE,
        total=int(memory.total),
        available=int(memory.available),
    )


def convert(
    store: ModelStore,
    request: ConvertRequest,
    *,
    python: Path | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    estimate: MemoryEstimate | None = None,
) -> StoredModel:
    """Convert ``request.source`` and add the result to the store.

    Raises:
        ConvertToolsMissing: the interpreter lacks the conversion extra.
        StoreError: bad request, id taken, not enough memory, or the child failed (its error
            is in the message).
        HubError: a hub source cannot be reached or is refused.
        Cancelled: ``cancel`` was set; the child was killed and nothing is left behind.
    """
    if request.weights not in WEIGHTS:
        raise StoreError(f"weights must be one of {', '.join(WEIGHTS)}, not {request.weights!r}")
    problem = source_problem(request.source)
    if problem is not None:
        raise StoreError(problem)
    local = request.local_path
    model_id = request.target_id
    if store.contains(model_id):
        raise StoreError(f"a model '{model_id}' is already in the store (choose another with --id)")
    interpreter = _interpreter(python)
    estimate = estimate or estimate_memory(request, endpoint=endpoint, token=token)
    _check_memory(request, estimate, progress)
    with disk_errors(f"converting {request.source}", store.root), store.lock(model_id):
        store.discard_partial(model_id)
        staging = store.partial_folder(model_id)
        staging.mkdir(parents=True)
        try:
            _run_child(
                interpreter, request, staging, endpoint, token, progress, cancel, source=local
            )
            manifest = _manifest(model_id, staging, request)
            stored = store.commit(staging, manifest)
        except BaseException:
            store.discard_partial(model_id)
            raise
    if progress is not None:
        progress(Progress(phase="done", message=f"added {model_id}"))
    return stored


def source_problem(source: str) -> str | None:
    """Why ``source`` cannot be converted, or ``None`` when it looks convertible.

    A source is a hub repo id (``org/name``; whether it exists is the hub's to say) or a
    local folder holding a transformers checkpoint's ``config.json``.
    """
    if not source.strip():
        return "name a hub repo (org/name) or a local model folder to convert"
    local = ConvertRequest(source=source).local_path
    if local is None and not re.fullmatch(r"[\w.-]+/[\w.-]+", source):
        return f"{source!r} is neither a folder nor a hub repo id (org/name)"
    if local is not None and not (local / "config.json").is_file():
        return f"{local} is not a transformers model folder (no config.json)"
    return None


def check_tools(python: Path | None = None, *, timeout: float = 60.0) -> None:
    """Make sure the conversion interpreter has the tools, without converting anything.

    The child looks the modules up without importing them, which takes a moment rather than
    the seconds torch needs, so an app can offer conversion only where it can work.

    Threading: blocks while the interpreter starts; call it off the GUI thread.

    Raises:
        ConvertToolsMissing: the interpreter is missing, cannot run, or lacks a tool (the
            message names the tools and what to install).
    """
    interpreter = _interpreter(python)
    try:
        done = subprocess.run(
            [str(interpreter), str(CHILD_SCRIPT), "--check"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConvertToolsMissing(
            f"the conversion Python {interpreter} cannot be run ({exc}); {INSTALL_HINT}"
        ) from exc
    if done.returncode == 0:
        return
    missing: list[str] = []
    for line in done.stdout.splitlines():
        if line.startswith(PREFIX):
            with contextlib.suppress(json.JSONDecodeError, AttributeError):
                missing = [str(m) for m in json.loads(line[len(PREFIX) :]).get("missing", [])]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise ConvertToolsMissing(
            f"{INSTALL_HINT} ({', '.join(missing)} {verb} missing)", tuple(missing)
        )
    raise ConvertToolsMissing(
        f"the conversion Python {interpreter} failed its check (exit code {done.returncode}); "
        f"{INSTALL_HINT}"
    )


def _interpreter(python: Path | None) -> Path:
    if python is not None:
        if not python.exists():
            raise ConvertToolsMissing(
                f"the conversion Python {python} does not exist; {INSTALL_HINT}"
            )
        return python
    if getattr(sys, "frozen", False):
        raise ConvertToolsMissing(f"this build cannot convert by itself; {INSTALL_HINT}")
    return Path(sys.executable)


def _check_memory(
    request: ConvertRequest, estimate: MemoryEstimate, progress: ProgressCallback | None
) -> None:
    gib = 1024**3
    needed = f"about {estimate.needed / gib:.1f} GB of memory"
    if not estimate.fits and not request.force:
        raise StoreError(
            f"converting {request.source} needs {needed}; this machine has "
            f"{estimate.total / gib:.1f} GB. Pick a pre-converted model (sidelight list "
            "--catalog) or a smaller one, or pass --force to try anyway"
        )
    if not estimate.comfortable:
        message = (
            f"converting needs {needed} and only {estimate.available / gib:.1f} GB is free: "
            "close other programs, or expect heavy swapping"
        )
        logger.warning("%s", message)
        if progress is not None:
            progress(Progress(phase="warning", message=message))


def _run_child(
    python: Path,
    request: ConvertRequest,
    staging: Path,
    endpoint: str | None,
    token: str | None,
    progress: ProgressCallback | None,
    cancel: threading.Event | None,
    *,
    source: Path | None,
) -> None:
    tmp = staging / ".tmp"
    tmp.mkdir()
    payload = {
        "source": str(source) if source else request.source,
        "task": _task(request, endpoint, token),
        "revision": request.revision,
        "weights": request.weights,
        "npu": request.npu,
        "output": str(staging),
    }
    env = {**os.environ, "TMPDIR": str(tmp), "TEMP": str(tmp), "TMP": str(tmp)}
    env.update({"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"})
    if endpoint:
        env["HF_ENDPOINT"] = endpoint
    if token:
        env["HF_TOKEN"] = token
    logger.info("converting %s with %s", request.source, python)
    child = subprocess.Popen(
        [str(python), str(CHILD_SCRIPT), json.dumps(payload)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=os.name != "nt",
    )
    assert child.stdout is not None
    messages: queue.Queue[dict[str, Any]] = queue.Queue()
    lines: list[str] = []
    reader = threading.Thread(
        target=_read_output, args=(child.stdout, messages, lines), daemon=True
    )
    reader.start()
    started = time.monotonic()
    phase, missing = "starting", None
    try:
        while child.poll() is None or not messages.empty():
            if cancel is not None and cancel.is_set():
                raise Cancelled("conversion cancelled")
            with contextlib.suppress(queue.Empty):
                message = messages.get(timeout=0.5)
                phase = str(message.get("phase", phase))
                missing = message.get("missing", missing)
            if progress is not None:
                progress(
                    Progress(
                        phase=phase,
                        done=folder_size(staging),
                        item=request.source,
                        message=f"{time.monotonic() - started:.0f} s",
                    )
                )
    finally:
        if child.poll() is None:
            _kill(child)
        reader.join(10)
        child.stdout.close()
    code = child.returncode
    if code == EXIT_MISSING_TOOLS or missing:
        raise ConvertToolsMissing(f"{INSTALL_HINT} ({missing or 'a module'} is missing)")
    if code != 0:
        raise StoreError(f"converting {request.source} failed: {_child_error(code, lines)}")
    _cleanup(staging)


def _task(request: ConvertRequest, endpoint: str | None, token: str | None) -> str:
    """optimum's export task, from the checkpoint's ``config.json`` architectures.

    optimum cannot infer it for a local folder, and for a hub repo it would need metadata
    that mirrors may lack; the config says it either way.
    """
    local = request.local_path
    if local is not None:
        config_path = local / "config.json"
    else:
        from huggingface_hub import hf_hub_download

        try:
            config_path = Path(
                hf_hub_download(
                    request.source,
                    "config.json",
                    revision=request.revision,
                    endpoint=endpoint,
                    token=token,
                )
            )
        except Exception as exc:
            raise hub_error(exc, request.source, request.revision) from exc
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreError(f"cannot read {request.source}'s config.json: {exc}") from exc
    architectures = [str(a) for a in config.get("architectures") or []]
    if task_from_config(config) == "vision":
        return "image-text-to-text"  # a vision-language model: language + vision encoders
    if task_from_config(config) == "transcription":  # Whisper: encoder, stateful decoder
        return "automatic-speech-recognition-with-past"
    if task_from_config(config) == "speech":  # SpeechT5: the child adds its HiFi-GAN vocoder
        return "text-to-audio"
    if any(
        a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration"))
        for a in architectures
    ):
        return "text-generation-with-past"
    if task_from_config(config) == "rerank":
        return "text-classification"  # a cross-encoder: its one logit scores each pair
    if architectures:
        return "feature-extraction"
    raise StoreError(f"{request.source}'s config.json names no architecture; cannot convert it")


def _read_output(
    stream: IO[bytes], messages: queue.Queue[dict[str, Any]], lines: list[str]
) -> None:
    for raw in stream:
        line = raw.decode("utf-8", errors="replace").rstrip()
        if line.startswith(PREFIX):
            with contextlib.suppress(json.JSONDecodeError):
                messages.put(json.loads(line[len(PREFIX) :]))
            continue
        logger.debug("converter: %s", line)
        lines.append(line)
        if len(lines) > _KEEP_LOG_LINES:
            del lines[: len(lines) - _KEEP_LOG_LINES]


def _kill(child: subprocess.Popen[bytes]) -> None:
    """Kill the child and everything it started (optimum may start helpers)."""
    try:
        if os.name == "nt":
            child.kill()
        else:
            os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait(30)


def _child_error(code: int, lines: list[str]) -> str:
    if code < 0:
        return (
            f"the converter was killed by signal {-code} "
            "(out of memory? try a smaller model or close other programs)"
        )
    for line in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", line):
            return line
    tail = [line for line in lines if line.strip()][-3:]
    return " / ".join(tail) or f"exit code {code}"


def _cleanup(staging: Path) -> None:
    shutil.rmtree(staging / ".tmp", ignore_errors=True)


def _manifest(model_id: str, staging: Path, request: ConvertRequest) -> Manifest:
    facts = ir_facts(staging)
    context, arch = None, None
    if facts.task in GENERATIVE_TASKS or facts.task in ("transcription", "speech"):
        try:
            spec = spec_from_path(staging, model_id=model_id)
        except ModelError as exc:
            raise StoreError(f"the conversion finished but is not servable: {exc}") from exc
        context, arch = spec.context_length, spec.architecture
    devices = facts.devices
    if request.npu and "NPU" not in devices:
        devices = ("NPU", *devices)
    local = request.local_path
    return Manifest(
        id=model_id,
        name=Path(request.source).name if local else request.source.rsplit("/", 1)[-1],
        format="ir",
        entry=".",
        source=Source(
            kind="convert",
            repo=None if local else request.source,
            revision=None if local else request.revision,
            path=str(local) if local else None,
        ),
        size_bytes=folder_size(staging),
        weights=facts.weights or request.weights,
        context_length=context,
        architecture=arch,
        task=facts.task,
        devices=devices,
        capabilities=facts.capabilities,
        added_at=now_iso(),
        details={
            **facts.details,
            "recipe": {
                "weights": request.weights,
                "npu": request.npu,
                "args": recipe_args(request.weights, request.npu),
            },
        },
    )
