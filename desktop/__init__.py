"""The Sidelight tray app: a thin PySide6 shell over the Qt-free ``engine`` package.

Widgets are touched on the GUI thread only. Everything slow (engine start, model loads, store
jobs, device discovery, chat replies) runs elsewhere and reports back through
:mod:`desktop.taskman`.
"""
