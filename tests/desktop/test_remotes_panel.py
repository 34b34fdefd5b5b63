"""Settings → Remote servers (desktop/views/remotes_panel.py): add, refuse, remove; the
file is the one ``sidelight remote`` edits, and the key is never shown."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from desktop.views.remotes_panel import RemotesPanel
from engine.remotes import Remote, load_remotes


def test_adding_refusing_and_removing_a_remote(qtbot: QtBot, tmp_path: Path) -> None:
    path = tmp_path / "config" / "remotes.json"
    panel = RemotesPanel(path)
    qtbot.addWidget(panel)
    assert panel.list.count() == 0 and not panel.remove.isEnabled()
    panel.name.setText("Box")
    panel.url.setText("http://10.0.0.2:11680")
    panel.key.setText("s3cret")
    panel.add.click()
    assert load_remotes(path) == [Remote("box", "http://10.0.0.2:11680", "s3cret")]
    shown = panel.list.item(0).text()
    assert "box" in shown and "key set" in shown and "s3cret" not in shown
    assert panel.name.text() == "" and panel.key.text() == ""
    panel.name.setText("a@b")
    panel.url.setText("http://x")
    panel.add.click()
    assert not panel.error.isHidden() and "@" in panel.error.text()
    assert len(load_remotes(path)) == 1
    panel.list.setCurrentRow(0)
    panel.remove.click()
    assert load_remotes(path) == [] and panel.list.count() == 0
