"""What the model manager says: human sizes, job progress, and store errors in GUI words.

The store's messages are written for the command line: lower-case, no final period, and
their remedies name commands and options (``sidelight rm``, ``--id``, "run the same command
again"). The CLI keeps them as they are; :func:`gui_message` rewrites those remedies into
what a person does in the app and makes a sentence of the rest.

Qt-free, so it can be tested without widgets.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.store.errors import OTHER_MODELS_FOLDER
from engine.store.progress import Progress

_UNITS = ("KB", "MB", "GB", "TB")

# Each CLI remedy the store can name, and what the same person does in the app. Keep in step
# with engine/store (tests/desktop/test_store_text.py raises each of these errors for real).
_SETTINGS_FILE = "{settings_file}"
_GUI_WORDS: tuple[tuple[str, str], ...] = (
    (
        r"then run the same command again; finished bytes are kept and the download resumes",
        "then try again; what was already downloaded is kept",
    ),
    (re.escape(OTHER_MODELS_FOLDER), "choose another model folder in Settings"),
    (
        r"set SIDELIGHT_HF_TOKEN \(or HF_TOKEN\) to a token from your hub account settings",
        f'add a token from your hub account settings as "hf_token" to {_SETTINGS_FILE}',
    ),
    (r"check SIDELIGHT_HF_TOKEN / HF_TOKEN", f'check "hf_token" in {_SETTINGS_FILE}'),
    (
        r" \(remove it with: sidelight rm ([^)\s]+)\)",
        r" (delete its folder \1 in the model folder)",
    ),
    (
        r" is already in the store \(choose another with --id\)",
        " is already installed; delete it first to add it again",
    ),
    (
        r"Pick a pre-converted model \(sidelight list --catalog\) or a smaller one, or pass "
        r"--force to try anyway",
        "Pick a pre-converted model from the list above, or a smaller one",
    ),
    (r"add it with: sidelight import FILE\.gguf", "add it with Import GGUF…"),
    (
        r"convert it instead with: sidelight convert \S+",
        "convert it instead with Convert a Hugging Face model…",
    ),
    (r" \(see: sidelight list\)", ""),
    (
        r"point SIDELIGHT_CONVERT_PYTHON at a Python that has them",
        f'set "convert_python" in {_SETTINGS_FILE} to a Python that has them',
    ),
    (r"downloaded again on the next pull", "downloaded again next time"),
)


def human_size(size: float) -> str:
    """``512 bytes``, ``347 KB``, ``1.4 MB``, ``12 GB``: decimal units, as file managers show.

    One decimal below 100 of a unit, where it tells sizes apart; none above, or when it is 0.
    """
    if size < 1000:
        return f"{size:.0f} bytes"
    value, unit = float(size), "bytes"
    for unit in _UNITS:
        value /= 1000
        if value < 999.95 or unit == _UNITS[-1]:
            break
    text = f"{value:.1f}" if value < 99.95 else f"{value:.0f}"
    return f"{text.removesuffix('.0')} {unit}"


def human_duration(seconds: float) -> str:
    """``45 s``, ``3 min``, ``1 h 5 min``: how long is left, roughly."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def progress_figures(progress: Progress) -> str:
    """The figures of a transfer for the catalog's status column, or ``""`` for other phases.

    ``35% · 1.2 MB of 3.4 MB · 150 KB/s · 15 s left``.
    """
    if progress.phase != "downloading" or not progress.total:
        return ""
    parts = [
        f"{int(100 * (progress.fraction or 0))}%",
        f"{human_size(progress.done)} of {human_size(progress.total)}",
    ]
    if progress.speed > 0:
        parts.append(f"{human_size(progress.speed)}/s")
    eta = progress.eta_seconds
    if eta is not None:
        parts.append(f"{human_duration(eta)} left")
    return " · ".join(parts)


_PHASE_LINES = {
    "verifying": "Checking the downloaded files…",
    "starting": "Starting the converter…",
    "checking": "Starting the converter…",
    "done": "Finishing…",
}


def describe_progress(progress: Progress, kind: str = "download") -> str:
    """One line for the dialog: ``Downloading model.bin: 35% · 1.2 MB of 3.4 MB · …``.

    Args:
        kind: the job (``download``, ``import``, ``convert``); an import reports its copy as
            ``downloading``, so the verb comes from here.
    """
    item, phase = progress.item or "", progress.phase
    if phase in _PHASE_LINES:
        return _PHASE_LINES[phase]
    if phase == "downloading":
        verb = "Copying" if kind == "import" else "Downloading"
        figures = progress_figures(progress)
        return f"{verb} {item}: {figures}" if figures else f"{verb} {item}…"
    if phase == "listing":
        return f"Asking the hub for the files of {item}…"
    if phase == "converting":
        parts = [f"Converting {item}"]
        if progress.done:
            parts.append(f"{human_size(progress.done)} written")
        if progress.message:
            parts.append(progress.message)
        return " · ".join(parts) + "…"
    if phase == "warning":
        return sentence(progress.message)
    return sentence(f"{phase} {item} {progress.message}".strip())


def gui_message(message: str, settings_file: Path | None = None) -> str:
    """A store error as the app says it: GUI remedies instead of commands, as a sentence.

    Args:
        settings_file: named where the remedy is a setting the app has no field for.
    """
    where = f"the settings file {settings_file}" if settings_file else "the settings file"
    text = message
    for cli, gui in _GUI_WORDS:
        text = re.sub(cli, gui.replace(_SETTINGS_FILE, where.replace("\\", "\\\\")), text)
    return sentence(text)


def tools_missing(missing: tuple[str, ...], settings_file: Path | None = None) -> str:
    """Why *Convert* is off, when the conversion interpreter lacks ``missing`` modules."""
    where = f"the settings file {settings_file}" if settings_file else "the settings file"
    verb = "is" if len(missing) == 1 else "are"
    return (
        f"Conversion is not available here: {', '.join(missing)} {verb} not installed. "
        "Install them with pip install 'sidelight[convert]', or set \"convert_python\" in "
        f"{where} to a Python that has them."
    )


def sentence(text: str) -> str:
    """Capitalise a leading plain word and end with a period.

    A leading name (``model.gguf``, ``org/name``, ``'id'``) keeps its spelling.
    """
    text = text.strip()
    if not text:
        return text
    if re.match(r"[a-z]+(?=[\s,:;]|$)", text):
        text = text[0].upper() + text[1:]
    return text if text.endswith((".", "…", "!", "?")) else f"{text}."
