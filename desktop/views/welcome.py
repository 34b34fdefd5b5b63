"""The first-run welcome: the server is up with the demo model; here is a model that fits.

Threading: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

from desktop.views.screen import fit_to_screen
from engine.store.catalog import CatalogEntry


class WelcomeDialog(QDialog):
    """Accepted means "show me that model in the model manager"."""

    def __init__(
        self,
        api_url: str | None,
        recommended: CatalogEntry | None,
        *,
        in_tray: bool = True,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Welcome to Sidelight")
        self.recommended = recommended
        where = f"at <b>{api_url}</b>" if api_url else "on this computer"
        text = (
            f"<p>Sidelight is running {where} with its built-in <b>demo model</b>, a tiny "
            "model that only knows a few canned replies: enough to check that an IDE plugin "
            "connects.</p>"
        )
        if recommended is not None:
            text += (
                f"<p>For real answers, download a model. A good fit for this computer: "
                f"<b>{recommended.name}</b> ({recommended.download_gb:.2f} GB download, about "
                f"{recommended.memory_gb:g} GB of memory while loaded).</p>"
            )
        if in_tray:
            text += (
                "<p>Sidelight lives in the system tray; its menu switches models and devices.</p>"
            )
        else:
            text += "<p>The chat window's <b>More</b> menu opens the models and the settings.</p>"
        label = QLabel(text)
        label.setWordWrap(True)
        buttons = QDialogButtonBox()
        if recommended is not None:
            buttons.addButton("Show me that model", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton("Keep the demo for now", QDialogButtonBox.ButtonRole.RejectRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(label)
        layout.addWidget(buttons)
        fit_to_screen(self, QSize(460, 220))
