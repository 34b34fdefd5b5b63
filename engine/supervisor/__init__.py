"""The engine's supervision (issue 11): the engine client in small modules, and the scheduler.

``states``: typed engine states, the status snapshot and request errors. ``client``:
:class:`~engine.supervisor.client.EngineClient`, one worker process holding one model,
composed of parts that share one state object and its one lock (``core.ClientState``):
``routing.Router``, ``handle.WorkerHandle``, ``watchdog.Watchdog``, ``keepalive.KeepAlive``,
each given the state and the parts it calls (see :mod:`engine.supervisor.core`).
``streams``: one request's events. ``scheduler`` and ``budget``: one client per loaded model
within a memory budget.
"""
