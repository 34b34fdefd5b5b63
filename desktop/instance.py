"""One Sidelight per user and home folder: a second launch brings the first one forward.

The first instance listens on a local socket (a named pipe on Windows) whose name is derived
from the user and the config folder; a later launch connects, says ``show`` and exits.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

logger = logging.getLogger(__name__)

_SHOW = b"show\n"


def instance_name(config_dir: Path) -> str:
    """The socket name for this user and this Sidelight home."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "user"
    digest = hashlib.sha256(f"{user}\0{config_dir.resolve()}".encode()).hexdigest()[:16]
    return f"sidelight-{digest}"


class SingleInstance(QObject):
    """The guard. ``activated`` fires (GUI thread) when another launch asks to be shown.

    Threading: GUI thread only. :meth:`notify_running` blocks for at most ``timeout_ms``;
    it runs once at start-up, before any window exists.
    """

    activated = Signal()

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self._server: QLocalServer | None = None
        self._clients: list[QLocalSocket] = []

    def notify_running(self, timeout_ms: int = 1000) -> bool:
        """If another instance is listening, ask it to show itself and return True."""
        socket = QLocalSocket()
        socket.connectToServer(self.name)
        if not socket.waitForConnected(timeout_ms):
            return False
        socket.write(_SHOW)
        socket.flush()
        socket.waitForBytesWritten(timeout_ms)
        socket.disconnectFromServer()
        return True

    def listen(self) -> bool:
        """Become the instance others find; False (logged) if the name cannot be taken."""
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not server.listen(self.name):
            # A crashed instance leaves its Unix socket file behind; nobody answered on it.
            QLocalServer.removeServer(self.name)
            if not server.listen(self.name):
                logger.warning("single-instance guard unavailable: %s", server.errorString())
                return False
        server.newConnection.connect(self._on_connection)
        self._server = server
        return True

    def close(self) -> None:
        for socket in self._clients:
            socket.abort()
        self._clients.clear()
        if self._server is not None:
            self._server.close()
            self._server = None

    def _on_connection(self) -> None:
        server = self._server
        while server is not None and server.hasPendingConnections():
            socket = server.nextPendingConnection()
            self._clients.append(socket)
            socket.readyRead.connect(self._read_clients)
            socket.disconnected.connect(self._read_clients)
        self._read_clients()

    def _read_clients(self) -> None:
        for socket in list(self._clients):
            while socket.canReadLine():
                if bytes(socket.readLine().data()) == _SHOW:
                    logger.info("another launch asked for the chat window")
                    self.activated.emit()
            if socket.state() == QLocalSocket.LocalSocketState.UnconnectedState:
                self._clients.remove(socket)
                socket.deleteLater()
