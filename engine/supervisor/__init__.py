"""The engine's supervision (issue 11): the engine client in small modules, and the scheduler.

``states``: typed engine states, the status snapshot and request errors. ``client``:
:class:`~engine.supervisor.client.EngineClient`, one worker process holding one model, built
in layers (``core`` < ``routing`` < ``handle`` < ``watchdog`` < ``keepalive`` < ``client``;
see :mod:`engine.supervisor.core`). ``streams``: one request's events. ``scheduler`` and
``budget``: one client per loaded model within a memory budget.
"""
