"""The generation settings of one chat: temperature, max tokens, context limit and system
prompt (with presets). Saved with the chat (:class:`desktop.history.ChatSettings`) and applied
to each of its requests.

Threading: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from desktop.history import ChatSettings
from desktop.views.form_label import FormLabel

PRESETS: dict[str, str] = {
    "No system prompt": "",
    "Helpful assistant": "You are a helpful assistant. Answer clearly and accurately.",
    "Concise": "Answer in as few words as the question allows. No preamble.",
    "Code reviewer": (
        "You review code. Point out bugs, unclear names and missing tests, most important "
        "first, and show the corrected code."
    ),
    "Translator": "Translate what the user writes into English; keep the meaning and tone.",
}
_CUSTOM = "Custom"


class ChatSettingsDialog(QDialog):
    """Edit one chat's settings; :meth:`settings` and :meth:`system_prompt` read the result."""

    def __init__(
        self, settings: ChatSettings, system_prompt: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Chat settings — Sidelight")
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(-0.1, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(1)
        self.temperature.setSpecialValueText("Model default")
        self.temperature.setValue(-0.1 if settings.temperature is None else settings.temperature)
        self.temperature.setToolTip("0 always picks the likeliest word; higher is more varied")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(0, 131072)
        self.max_tokens.setSingleStep(256)
        self.max_tokens.setSpecialValueText("No limit")
        self.max_tokens.setValue(settings.max_tokens or 0)
        self.max_tokens.setToolTip("The longest reply, in tokens")
        self.context_limit = QSpinBox()
        self.context_limit.setRange(0, 1048576)
        self.context_limit.setSingleStep(512)
        self.context_limit.setSpecialValueText("The model's full context")
        self.context_limit.setValue(settings.context_limit or 0)
        self.context_limit.setToolTip(
            "Tokens the conversation and the reply may use together; past it, you choose to "
            "drop the oldest turns or start a new chat"
        )
        self.preset = QComboBox()
        self.preset.addItems([*PRESETS, _CUSTOM])
        self.prompt = QPlainTextEdit(system_prompt)
        self.prompt.setPlaceholderText("System prompt (optional)")
        self.prompt.setTabChangesFocus(True)
        self.prompt.setMinimumHeight(90)
        self._sync_preset()
        self.preset.activated.connect(self._on_preset)
        self.prompt.textChanged.connect(self._sync_preset)

        form = QFormLayout()
        # The fields take the width the dialog has (Fusion keeps spin boxes at their hint).
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        for text, field in (
            ("&Temperature", self.temperature),
            ("&Max tokens", self.max_tokens),
            ("&Context limit", self.context_limit),
            ("&Preset", self.preset),
            ("&System prompt", self.prompt),
        ):
            form.addRow(FormLabel(text, field), field)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(buttons)

    def settings(self) -> ChatSettings:
        temperature = self.temperature.value()
        return ChatSettings(
            temperature=None if temperature < 0 else round(temperature, 1),
            max_tokens=self.max_tokens.value() or None,
            context_limit=self.context_limit.value() or None,
        )

    def system_prompt(self) -> str:
        return self.prompt.toPlainText().strip()

    def _on_preset(self, index: int) -> None:
        name = self.preset.itemText(index)
        if name in PRESETS:
            self.prompt.setPlainText(PRESETS[name])

    def _sync_preset(self) -> None:
        text = self.prompt.toPlainText().strip()
        name = next((n for n, p in PRESETS.items() if p == text), _CUSTOM)
        self.preset.blockSignals(True)
        self.preset.setCurrentText(name)
        self.preset.blockSignals(False)
