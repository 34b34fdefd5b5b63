"""Converting a transformers checkpoint to OpenVINO IR with optimum-intel in a child process.

The source is a tiny random Qwen2 checkpoint built by ``make_tiny_checkpoint.py``; the
conversions are real (torch, optimum-intel, nncf, openvino-tokenizers) and run in the
interpreter of ``.venv-convert``, which ``packaging/dev.py test`` creates with
``sidelight[convert]``. The out-of-memory test kills the real child with SIGKILL, as the
kernel's OOM killer would; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from engine.store import ModelStore
from engine.store.convert import (
    CHILD_SCRIPT,
    ConvertRequest,
    ConvertToolsMissing,
    MemoryEstimate,
    check_tools,
    convert,
    estimate_memory,
    source_problem,
)
from engine.store.convert_child import optimum_argv
from engine.store.errors import Cancelled, StoreError
from engine.store.progress import Progress
from engine.worker.rerank import RerankJob, RerankRunner
from tests.store.conftest import ROOT, assert_completes, serving, sidelight

NPU_RECIPE = ["--sym", "--group-size", "-1", "--ratio", "1.0"]  # int4 and int8 alike
MAKE_CHECKPOINT = Path(__file__).with_name("make_tiny_checkpoint.py")
CONVERT_PYTHON = (
    ROOT / ".venv-convert" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
)


@pytest.fixture(scope="session")
def convert_python() -> Path:
    if not CONVERT_PYTHON.exists():
        pytest.fail(
            f"{CONVERT_PYTHON} is missing: run `python3 packaging/dev.py test` once, which "
            "creates .venv-convert with sidelight[convert] for these tests"
        )
    return CONVERT_PYTHON


def _checkpoint(folder: Path, python: Path, *flags: str) -> Path:
    subprocess.run(
        [str(python), str(MAKE_CHECKPOINT), str(folder), *flags],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return folder


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, convert_python: Path) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-qwen2", convert_python)


@pytest.fixture(scope="session")
def broken_checkpoint(tmp_path_factory: pytest.TempPathFactory, convert_python: Path) -> Path:
    folder = tmp_path_factory.mktemp("ckpt") / "broken-qwen2"
    return _checkpoint(folder, convert_python, "--broken")


def _leftovers(store: ModelStore) -> list[Path]:
    """Files under the models folder other than locks (a failed job must leave none)."""
    return [
        p
        for p in store.root.rglob("*")
        if p.is_file() and ".locks" not in p.relative_to(store.root).parts
    ]


def _element_types(ir: Path) -> set[str]:
    text = (ir / "openvino_model.xml").read_text(encoding="utf-8")
    return set(__import__("re").findall(r'element_type="([a-z0-9]+)"', text))


def test_cli_converts_to_int4_and_the_result_serves(
    tiny_checkpoint: Path, convert_python: Path, sidelight_home: Path, tmp_path: Path
) -> None:
    user_home = tmp_path / "user-home"  # OpenVINO, nncf and optimum-intel keep telemetry here
    user_home.mkdir()
    done = sidelight(
        sidelight_home,
        "convert",
        str(tiny_checkpoint),
        timeout=300,
        SIDELIGHT_CONVERT_PYTHON=str(convert_python),
        HOME=str(user_home),
        CI="",  # openvino_telemetry is quiet in CI; this test sees a user's machine
    )
    assert done.returncode == 0, done.stderr
    assert not (user_home / "intel").exists(), "the conversion wrote OpenVINO telemetry"
    assert "added tiny-qwen2-int4 (int4" in done.stdout
    assert "converting" in done.stderr  # progress lines (stderr is not a terminal here)

    store = ModelStore(sidelight_home / "models")
    model = store.get("tiny-qwen2-int4")
    assert model.manifest.weights == "int4" and model.manifest.source.kind == "convert"
    assert {"u4", "i4"} & _element_types(model.folder)
    for name in ("openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        assert (model.folder / name).is_file()
    assert not [p for p in model.folder.iterdir() if p.name.startswith(".")]

    with serving(sidelight_home, "tiny-qwen2-int4") as url:
        assert_completes(url, "tiny-qwen2-int4", 4)


def test_npu_recipe_is_symmetric_channel_wise_int4(
    tiny_checkpoint: Path, convert_python: Path, store: ModelStore
) -> None:
    phases: list[str] = []
    model = convert(
        store,
        ConvertRequest(source=str(tiny_checkpoint), npu=True),
        python=convert_python,
        progress=lambda p: phases.append(p.phase),
    )
    assert model.id == "tiny-qwen2-int4-npu"
    assert model.manifest.devices[0] == "NPU"
    assert model.manifest.details["recipe"] == {"weights": "int4", "npu": True, "args": NPU_RECIPE}
    types = _element_types(model.folder)
    assert "i4" in types and "u4" not in types  # symmetric int4 has no zero points
    assert phases[0] == "checking" and "converting" in phases and phases[-1] == "done"


def test_a_cross_encoder_converts_to_a_reranker(
    tmp_path: Path, convert_python: Path, store: ModelStore
) -> None:
    """A one-label sequence classifier is exported for text classification, stored with the
    task ``rerank``, and GenAI's TextRerankPipeline scores with the result."""
    source = _checkpoint(tmp_path / "tiny-cross-encoder", convert_python, "--reranker")
    model = convert(
        store, ConvertRequest(source=str(source), weights="int8"), python=convert_python
    )
    assert model.manifest.task == "rerank"
    spec = model.spec()
    assert spec.task == "rerank"
    job = RerankJob(0, spec, "CPU", "pip", ("pytest tips", "rain forecast"))
    runner = RerankRunner()
    while not job.done:
        runner.run_chunk(job)
    assert len(job.scores) == 2 and all(0.0 < s < 1.0 for s in job.scores)


def test_optimum_arguments_for_each_recipe() -> None:
    base = {"source": "org/m", "output": "/out"}
    assert optimum_argv({**base, "weights": "int8"})[-3:] == ["--weight-format", "int8", "/out"]
    assert "fp16" in optimum_argv({**base, "weights": "fp16", "npu": True})
    assert "--sym" not in optimum_argv({**base, "weights": "fp16", "npu": True})
    npu = optimum_argv({**base, "weights": "int4", "npu": True})
    assert npu[-7:] == ["int4", "--sym", "--group-size", "-1", "--ratio", "1.0", "/out"]
    # CPU/GPU: the bench matrix's pick (asymmetric group 128, head and embeddings int4 too).
    cpu = optimum_argv({**base, "weights": "int4"})
    assert cpu[-7:] == ["int4", "--group-size", "128", "--ratio", "1.0", "--all-layers", "/out"]
    assert "--sym" not in cpu
    assert optimum_argv({**base, "weights": "int8", "npu": True})[-6:-1] == NPU_RECIPE


def test_cancel_kills_the_child_and_leaves_nothing_behind(
    tiny_checkpoint: Path, convert_python: Path, store: ModelStore
) -> None:
    cancel = threading.Event()
    started: list[float] = []

    def on_progress(p: Progress) -> None:
        if p.phase == "converting":
            started.append(time.monotonic())
            if time.monotonic() - started[0] > 1.0:
                cancel.set()

    with pytest.raises(Cancelled):
        convert(
            store,
            ConvertRequest(source=str(tiny_checkpoint)),
            python=convert_python,
            progress=on_progress,
            cancel=cancel,
        )
    assert _leftovers(store) == []
    assert store.list() == []
    assert not _converter_processes()


def test_a_killed_converter_is_reported_and_the_app_goes_on(
    tiny_checkpoint: Path, convert_python: Path, store: ModelStore
) -> None:
    """SIGKILL the child mid-export, as the OOM killer would."""
    killed: list[int] = []

    def on_progress(p: Progress) -> None:
        if p.phase == "converting" and not killed:
            for proc in _converter_processes():
                proc.kill()
                killed.append(proc.pid)

    with pytest.raises(StoreError, match=r"killed by signal 9 \(out of memory\?"):
        convert(
            store,
            ConvertRequest(source=str(tiny_checkpoint)),
            python=convert_python,
            progress=on_progress,
        )
    assert killed and _leftovers(store) == []
    # The calling process is unharmed and the store still works.
    assert store.list() == []


def test_a_failing_conversion_reports_the_childs_error(
    broken_checkpoint: Path, convert_python: Path, store: ModelStore
) -> None:
    with pytest.raises(
        StoreError, match=r"converting .*broken-qwen2 failed: [\w.]*SafetensorError: "
    ):
        convert(store, ConvertRequest(source=str(broken_checkpoint)), python=convert_python)
    assert _leftovers(store) == []


def test_without_the_convert_extra_the_message_says_what_to_install(
    tiny_checkpoint: Path, store: ModelStore
) -> None:
    # This test runs in the app's own environment, which has no torch or optimum.
    with pytest.raises(ConvertToolsMissing, match=r"pip install 'sidelight\[convert\]'"):
        convert(store, ConvertRequest(source=str(tiny_checkpoint)), python=Path(sys.executable))
    with pytest.raises(ConvertToolsMissing, match=r"does not exist"):
        convert(store, ConvertRequest(source=str(tiny_checkpoint)), python=Path("/no/python"))
    assert _leftovers(store) == []


def test_the_tools_check_names_what_is_missing_without_converting(convert_python: Path) -> None:
    check_tools(convert_python)  # the conversion environment has everything
    # The app's own environment has openvino-tokenizers but no torch or optimum.
    with pytest.raises(ConvertToolsMissing) as missing:
        check_tools(Path(sys.executable))
    message = str(missing.value)
    assert "pip install 'sidelight[convert]'" in message
    assert "torch" in message and "optimum.intel" in message and "are missing" in message
    assert "openvino_tokenizers" not in message
    assert missing.value.missing == ("torch", "transformers", "optimum.intel", "nncf")
    with pytest.raises(ConvertToolsMissing, match=r"does not exist"):
        check_tools(Path("/no/python"))


def test_source_problems_are_known_before_a_job(tiny_checkpoint: Path, tmp_path: Path) -> None:
    assert source_problem(str(tiny_checkpoint)) is None
    assert source_problem("Qwen/Qwen3-0.6B") is None  # the hub says whether it exists
    assert source_problem("  ") == "name a hub repo (org/name) or a local model folder to convert"
    assert source_problem("not a repo") == (
        "'not a repo' is neither a folder nor a hub repo id (org/name)"
    )
    assert source_problem(str(tmp_path)) == (
        f"{tmp_path} is not a transformers model folder (no config.json)"
    )


def test_memory_estimate_warns_and_refuses(tiny_checkpoint: Path, store: ModelStore) -> None:
    estimate = estimate_memory(ConvertRequest(source=str(tiny_checkpoint)))
    weights = (tiny_checkpoint / "model.safetensors").stat().st_size
    assert estimate.needed > weights * 2 and estimate.total >= estimate.available > 0
    too_big = MemoryEstimate(needed=64 * 1024**3, total=16 * 1024**3, available=8 * 1024**3)
    with pytest.raises(StoreError, match=r"needs about 64\.0 GB .* has 16\.0 GB.*--force"):
        convert(store, ConvertRequest(source=str(tiny_checkpoint)), estimate=too_big)
    assert _leftovers(store) == []
    refusals = sidelight(store.root.parent, "convert", "not-a-folder-or-repo")
    assert refusals.returncode == 1 and "neither a folder nor a hub repo" in refusals.stderr


def _converter_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if str(CHILD_SCRIPT) in cmdline:
            found.append(proc)
    return found


def test_a_speecht5_converts_as_text_to_audio_with_its_vocoder(tmp_path: Path) -> None:
    from engine.store.convert import ConvertRequest, _task

    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["SpeechT5ForTextToSpeech"], "model_type": "speecht5"})
    )
    task = _task(ConvertRequest(str(tmp_path)), None, None)
    assert task == "text-to-audio"
    argv = optimum_argv({"source": "m", "output": "/out", "task": task, "weights": "fp16"})
    kwargs = argv[argv.index("--model-kwargs") + 1]
    assert json.loads(kwargs) == {"vocoder": "microsoft/speecht5_hifigan"}
