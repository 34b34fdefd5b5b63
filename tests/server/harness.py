"""Start a real ``sidelight serve`` process on a free port and wait until it is ready."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from engine.models import ModelTask
from engine.settings import load_settings
from engine.store.facts import folder_size
from engine.store.manifest import Manifest, Source, write_manifest
from tests.waiting import wait_until

TINY_EMBED = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-embed"
TINY_RERANK = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-rerank"
TINY_WHISPER = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-whisper"
TINY_SPEECHT5 = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-speecht5"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """``python -m engine.cli serve`` as a child process, its output kept in a file.

    ``model`` None serves the default (the built-in demo model).

    Tokens stream one per delta (``SIDELIGHT_STREAM_INTERVAL_MS=0``) unless ``env`` says
    otherwise: the tiny model is so fast that the default interval would merge whole replies,
    and the stream-shape tests are about single tokens. Merging has its own tests. Prompt
    lookup (several tokens a step) is off for the same reason; test_speculation_e2e turns
    it on. ``shipped_defaults`` drops these test settings (and the self-tune's): the server
    runs as installed (test_shipped_defaults_e2e).
    """

    def __init__(
        self,
        home: Path,
        model: Path | None,
        *extra: str,
        port: int | None = None,
        env: dict[str, str] | None = None,
        shipped_defaults: bool = False,
    ) -> None:
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "serve-output.log"
        home.mkdir(parents=True, exist_ok=True)
        for_tests = {
            "SIDELIGHT_STREAM_INTERVAL_MS": "0",
            # Speculation yields several tokens per step: stream-shape tests want one.
            "SIDELIGHT_PROMPT_LOOKUP": "0",
            # Each test's home is fresh, so every server would self-tune for seconds first;
            # test_cli_serve turns it on where the self-tune is what is tested.
            "SIDELIGHT_CPU_SELF_TUNE": "false",
        }
        env = {
            **os.environ,
            **({} if shipped_defaults else for_tests),
            **(env or {}),
            "SIDELIGHT_HOME": str(home),
            "PYTHONUNBUFFERED": "1",
        }
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engine.cli",
                "serve",
                *(("--model", str(model)) if model is not None else ()),
                "--port",
                str(self.port),
                *extra,
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_answering(self, timeout: float = 180.0) -> httpx.Response:
        """The first /health answer, whatever it says (the model may still be loading)."""

        def answer() -> httpx.Response | None:
            self._check_running()
            try:
                return httpx.get(f"{self.base_url}/health", timeout=2)
            except httpx.HTTPError:
                return None

        return wait_until(answer, self._late("server answering"), timeout, interval=0.1)

    def wait_ready(self, timeout: float = 180.0) -> dict[str, object]:
        """/health's body once it is 200 (the default model loaded)."""

        def ready() -> dict[str, object] | None:
            self._check_running()
            try:
                response = httpx.get(f"{self.base_url}/health", timeout=2)
            except httpx.HTTPError:
                return None
            if response.status_code != 200:
                return None
            body: dict[str, object] = response.json()
            return body

        return wait_until(ready, self._late("server ready"), timeout, interval=0.2)

    def _check_running(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"server exited early:\n{self.output()}")

    def _late(self, what: str) -> Callable[[], str]:
        """A failure message for a wait, with the server's output when it is written."""
        return lambda: f"{what}:\n{self.output()}"

    def health(self) -> httpx.Response:
        return httpx.get(f"{self.base_url}/health", timeout=5)

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        self._log.close()
        return self.process.returncode


@contextmanager
def running_server(
    home: Path,
    model: Path | None,
    *extra: str,
    env: dict[str, str] | None = None,
    shipped_defaults: bool = False,
) -> Iterator[ServerProcess]:
    """A ready server for a test module; on exit it must stop cleanly (exit code 0)."""
    proc = ServerProcess(home, model, *extra, env=env, shipped_defaults=shipped_defaults)
    try:
        proc.wait_ready()
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, proc.output()


def import_gguf(home: Path, gguf: Path, model_id: str) -> None:
    """``sidelight import`` a GGUF into the store under ``home`` (a real CLI run)."""
    env = {**os.environ, "SIDELIGHT_HOME": str(home)}
    subprocess.run(
        [sys.executable, "-m", "engine.cli", "import", str(gguf), "--id", model_id],
        check=True,
        env=env,
        capture_output=True,
    )


def store_ir_copy(
    models: Path, model_id: str, source: Path, *, task: ModelTask, reasoning: bool
) -> None:
    """Put a copy of an IR folder into the store, as a finished download would."""
    folder = models / model_id
    shutil.copytree(source, folder)
    config = json.loads((source / "config.json").read_text())
    manifest = Manifest(
        id=model_id,
        name=model_id,
        format="ir",
        entry=".",
        source=Source(kind="convert", path=str(source)),
        size_bytes=folder_size(folder),
        weights="fp32",
        context_length=config.get("max_position_embeddings"),
        architecture=config.get("model_type"),
        task=task,
        capabilities={
            "chat_template": task == "chat",
            "tools": task == "chat",
            "reasoning": reasoning,
        },
    )
    write_manifest(folder, manifest)


def store_embedding_model(home: Path, model_id: str = "tiny-embed") -> str:
    """Put the tiny embedding model into the store under ``home``, as a finished download would."""
    models = load_settings({"SIDELIGHT_HOME": str(home)}).paths.models_dir
    models.mkdir(parents=True, exist_ok=True)
    store_ir_copy(models, model_id, TINY_EMBED, task="embeddings", reasoning=False)
    return model_id


def store_rerank_model(home: Path, model_id: str = "tiny-rerank") -> str:
    """Put the tiny cross-encoder reranker into the store under ``home``, as a download would."""
    models = load_settings({"SIDELIGHT_HOME": str(home)}).paths.models_dir
    models.mkdir(parents=True, exist_ok=True)
    store_ir_copy(models, model_id, TINY_RERANK, task="rerank", reasoning=False)
    return model_id


def store_speech_model(home: Path, model_id: str = "tiny-whisper") -> str:
    """Put the tiny Whisper into the store under ``home``, as a finished download would."""
    models = load_settings({"SIDELIGHT_HOME": str(home)}).paths.models_dir
    models.mkdir(parents=True, exist_ok=True)
    store_ir_copy(models, model_id, TINY_WHISPER, task="transcription", reasoning=False)
    return model_id


def store_text_speech_model(home: Path, model_id: str = "tiny-speecht5") -> str:
    """Put the tiny SpeechT5 into the store under ``home``, as a finished download would."""
    models = load_settings({"SIDELIGHT_HOME": str(home)}).paths.models_dir
    models.mkdir(parents=True, exist_ok=True)
    store_ir_copy(models, model_id, TINY_SPEECHT5, task="speech", reasoning=False)
    return model_id
