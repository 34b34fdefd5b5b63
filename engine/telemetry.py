"""Keep OpenVINO's usage telemetry off in every Sidelight process.

``import openvino`` starts the ``openvino_telemetry`` package, which treats a missing consent
file as consent: it writes a client id and a usage count to ``~/intel/`` and sends an
"import" event to Google Analytics (nncf and optimum-intel do the same in the conversion
child). Sidelight stores and sends nothing without the user's consent, so it makes that
package unimportable (``None`` in ``sys.modules``) before OpenVINO is imported; OpenVINO
and nncf then fall back to their own no-op stubs. Nothing is written to disk, and a consent
the user gave OpenVINO's own tools is left as it is.

Importing :mod:`engine` calls :func:`disable_openvino_telemetry` (``engine/__init__.py``),
which covers the app, the spawned engine worker and the PyInstaller bundle. The conversion
child runs by path without Sidelight, so it does the same itself.
"""

from __future__ import annotations

import sys

TELEMETRY_MODULE = "openvino_telemetry"


def disable_openvino_telemetry() -> None:
    """Make ``openvino_telemetry`` unimportable in this process (before OpenVINO loads).

    Too late once OpenVINO was imported: the telemetry module is then already loaded and
    this leaves it alone.
    """
    sys.modules.setdefault(TELEMETRY_MODULE, None)  # type: ignore[arg-type]
