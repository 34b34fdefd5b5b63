"""``ModelSettingsDialog``: one installed model's own settings (*Settings…* in the manager).

LM Studio's per-model load and sampling settings: context length, keep-loaded time, device,
KV-cache precision, and the sampling an API request (or a chat) gets when it leaves a value
out. Each row shows the saved value (empty: the default) and the default beside it. Saving
goes through :meth:`engine.store.ModelStore.set_prefs`, the code ``POST
/api/sidelight/models/{id}/settings`` and ``sidelight settings`` use: the engine checks every
value (ranges, devices) and its refusal is shown here, naming the field, with nothing
written. A change to a load setting of a loaded model reloads it (the dialog says so before
and after); sampling changes apply from the next request.

Threading: GUI thread only; reading and saving are two small file operations.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from desktop.controller import Controller
from desktop.views.form_label import FormLabel
from engine.model_prefs import ModelPrefs, PrefsError, parse_value
from engine.settings import KV_CACHE_PRECISIONS
from engine.store.errors import StoreError
from engine.store.prefs_defaults import PrefDefaults, pref_defaults

logger = logging.getLogger(__name__)

# The text fields, in the dialog's order: key, label, hint shown in the empty field.
TEXT_FIELDS: Final = (
    ("context_length", "Context length (tokens)", "the model's own"),
    ("keep_alive_seconds", "Keep loaded when idle (seconds)", "-1 keeps it loaded"),
    ("temperature", "Temperature", "0 to 2"),
    ("top_p", "Top-p", "0 to 1"),
    ("top_k", "Top-k", "0 switches it off"),
    ("min_p", "Min-p", "0 to 1"),
    ("repetition_penalty", "Repeat penalty", "1 is none"),
    ("seed", "Seed", "a whole number"),
)
# What a hint leaves out, said when the pointer rests on the field.
TOOLTIPS: Final = {
    "temperature": "0 always picks the likeliest word; higher is more varied",
    "seed": "The same seed gives the same reply each time",
}
# Pixels a line edit spends beside its text: frame, margins and a letter of air.
HINT_ROOM: Final = 24
_LABELS: Final = {key: label for key, label, _hint in TEXT_FIELDS} | {
    "device": "Device",
    "kv_cache_precision": "KV-cache precision",
}


def default_text(key: str, defaults: PrefDefaults) -> str:
    """How the default of ``key`` reads beside its field."""
    value = getattr(defaults, key)
    special: dict[tuple[str, bool], str] = {
        ("keep_alive_seconds", True): "kept loaded",
        ("context_length", True): "the model's own",
        ("temperature", True): "0 (always the likeliest)",
        ("top_k", True): "off",
        ("seed", True): "random",
    }
    unset = {
        "keep_alive_seconds": isinstance(value, float) and value < 0,
        "context_length": value is None,
        "temperature": value == 0,
    }.get(key, value is None)
    if (key, unset) in special:
        return special[key, unset]
    if key == "keep_alive_seconds":
        return f"{value:g} s"
    if key == "context_length":
        return f"{value:,}"
    if key == "kv_cache_precision":
        return f"{value} (on the CPU)"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _value_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class ModelSettingsDialog(QDialog):
    """The settings of the stored model ``model_id``. ``saved(id, prefs)`` after a save;
    the dialog closes then, or stays open with the engine's refusal."""

    saved = Signal(str, object)  # model id, ModelPrefs

    def __init__(self, controller: Controller, model_id: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.controller = controller
        self.model_id = model_id
        self.setWindowTitle(f"Settings of {model_id}")
        store = controller.store
        stored = store.get(model_id)
        self.defaults = pref_defaults(stored, controller.settings)
        self.load_problem: str | None = None
        try:
            self.current = store.prefs(model_id)
        except PrefsError as exc:  # a hand-edited file: shown, and saving replaces it
            self.current = ModelPrefs()
            self.load_problem = f"Its settings file is damaged and is ignored: {exc}"
        self.error = QLabel(self.load_problem or "")
        self.error.setWordWrap(True)
        self.error.setProperty("role", "error")  # coloured by desktop.theme
        self.error.setMinimumHeight(self.fontMetrics().lineSpacing() * 2)  # no jumping
        self.fields: dict[str, QLineEdit] = {}
        self.default_labels: dict[str, QLabel] = {}
        form = QGridLayout()
        form.setColumnStretch(1, 1)
        for key, label, hint in TEXT_FIELDS[:2]:
            self._add_text(form, key, label, hint)
        self.device = QComboBox()
        self.device.addItem(f"Default ({self.defaults.device})", None)
        for name in self._device_names():
            self.device.addItem(name, name)
        self._add_choice(form, "device", self.device, self.current.device)
        self.kv_precision = QComboBox()
        self.kv_precision.addItem(f"Default ({self.defaults.kv_cache_precision})", None)
        for precision in KV_CACHE_PRECISIONS:
            self.kv_precision.addItem(precision, precision)
        self.kv_precision.setToolTip(
            "How the CPU stores the context's keys and values: u8 takes half the memory of "
            "f16, so twice the context fits."
        )
        self._add_choice(form, "kv_cache_precision", self.kv_precision, None)
        self._select(self.kv_precision, self.current.kv_cache_precision)
        sampling = QLabel("<b>Sampling defaults</b> (for requests that leave a value out)")
        form.addWidget(sampling, form.rowCount(), 0, 1, 3)
        for key, label, hint in TEXT_FIELDS[2:]:
            self._add_text(form, key, label, hint)

        self.load_note = QLabel(self._load_note())
        self.load_note.setWordWrap(True)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults
        )
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.reject)
        restore = self.buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults)
        restore.clicked.connect(self.clear_fields)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.load_note)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)

    # ---- building ------------------------------------------------------------------------

    def _add_text(self, form: QGridLayout, key: str, label: str, hint: str) -> None:
        edit = QLineEdit(_value_text(getattr(self.current, key)))
        edit.setPlaceholderText(hint)
        # Wide enough for its hint (the widest one sets them all, so the column is even).
        hints = [h for _key, _label, h in TEXT_FIELDS]
        metrics = edit.fontMetrics()
        edit.setMinimumWidth(max(metrics.horizontalAdvance(h) for h in hints) + HINT_ROOM)
        edit.setToolTip(TOOLTIPS.get(key, ""))
        edit.setObjectName(key)
        edit.textEdited.connect(lambda _text: self._clear_error())
        self.fields[key] = edit
        self._row(form, key, label, edit)

    def _add_choice(self, form: QGridLayout, key: str, box: QComboBox, value: str | None) -> None:
        box.setObjectName(key)
        box.currentIndexChanged.connect(lambda _index: self._clear_error())
        self._select(box, value)
        self._row(form, key, _LABELS[key], box)

    def _row(self, form: QGridLayout, key: str, label: str, widget: QWidget) -> None:
        default = QLabel(f"default: {default_text(key, self.defaults)}")
        default.setEnabled(False)  # the palette's muted text, in both themes
        self.default_labels[key] = default
        row = form.rowCount()
        form.addWidget(FormLabel(label, widget), row, 0)
        form.addWidget(widget, row, 1)
        form.addWidget(default, row, 2)

    def _select(self, box: QComboBox, value: str | None) -> None:
        index = box.findData(value)
        if index < 0 and value is not None:  # saved for a device this machine lacks
            box.addItem(f"{value} (not on this machine)", value)
            index = box.count() - 1
        box.setCurrentIndex(max(index, 0))

    def _device_names(self) -> list[str]:
        """The devices this machine has (only the CPU while they are still being found)."""
        found = self.controller.devices
        if found is None:
            return ["CPU"]
        return [device.name for device in found]

    def _loaded(self) -> bool:
        return self.model_id == self.controller.active_model_id or any(
            m.id == self.model_id for m in self.controller.loaded_models()
        )

    def _load_note(self) -> str:
        if self._loaded():
            return (
                f"{self.model_id} is loaded: saving a new context length, device or KV-cache "
                "precision reloads it now. Sampling defaults apply from the next request."
            )
        return (
            "Context length, device and KV-cache precision apply when the model loads; "
            "sampling defaults from the next request."
        )

    # ---- values --------------------------------------------------------------------------

    def changes(self) -> dict[str, Any]:
        """Every field as the engine takes it (``None``: the default)."""
        values: dict[str, Any] = {
            key: parse_value(edit.text()) for key, edit in self.fields.items()
        }
        values["device"] = self.device.currentData()
        values["kv_cache_precision"] = self.kv_precision.currentData()
        return values

    def clear_fields(self) -> None:
        """*Restore Defaults*: every field empty (saved only on *Save*)."""
        for edit in self.fields.values():
            edit.clear()
        self.device.setCurrentIndex(0)
        self.kv_precision.setCurrentIndex(0)
        self._clear_error()

    def save(self) -> None:
        """Save through the engine; its refusal stays in the dialog, naming the field."""
        before = self.current
        try:
            prefs = self.controller.store.set_prefs(self.model_id, self.changes())
        except PrefsError as exc:
            self._show_error(exc)
            return
        except (StoreError, OSError) as exc:
            self.error.setText(f"Not saved: {exc}")
            return
        self.current = prefs
        reload = prefs.load_settings() != before.load_settings() and self._loaded()
        logger.info("saved the settings of %s: %s", self.model_id, prefs.to_dict())
        if reload:
            self.controller.reload_model(self.model_id)
        self.saved.emit(self.model_id, prefs)
        self.accept()

    def _show_error(self, exc: PrefsError) -> None:
        field = exc.field or ""
        label = _LABELS.get(field, field)
        words = str(exc).removeprefix(f"{field}: ") if field else str(exc)
        self.error.setText(f"Not saved. {label}: {words}" if label else f"Not saved: {words}")
        widget = self.fields.get(exc.field or "")
        if widget is not None:
            widget.setFocus()
            widget.selectAll()

    def _clear_error(self) -> None:
        if self.error.text() and self.error.text() != self.load_problem:
            self.error.setText("")
