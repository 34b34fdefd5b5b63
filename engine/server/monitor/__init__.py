"""Request monitoring: Prometheus metrics and the request inspector's log.

:class:`RequestMonitor` records each request once, whatever its dialect: the HTTP
middleware (:mod:`.middleware`) and the pipeline's generation tracker fill one record,
which ends up in the bounded in-memory log (:mod:`.log`), in the metrics (:mod:`.metrics`,
served at ``/metrics``) and as one line in the log file. :mod:`.routes` serves both;
:mod:`.curl` turns a logged request back into a command.
"""

from engine.server.monitor.curl import API_KEY_VARIABLE, curl_command
from engine.server.monitor.log import RequestLog
from engine.server.monitor.monitor import GenerationTracker, RequestMonitor, note_model
from engine.server.monitor.record import Outcome, RequestEntry

__all__ = [
    "API_KEY_VARIABLE",
    "GenerationTracker",
    "Outcome",
    "RequestEntry",
    "RequestLog",
    "RequestMonitor",
    "curl_command",
    "note_model",
]
