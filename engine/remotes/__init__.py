"""Remote OpenAI-compatible servers as model sources: the registry (``registry``) and the
``sidelight remote`` command (``cli``). Serving their models is ``engine.server.remote``."""

from engine.remotes.registry import (
    REMOTES_FILE,
    Remote,
    RemoteError,
    add_remote,
    check_name,
    check_url,
    load_remotes,
    remotes_path,
    remove_remote,
    save_remotes,
    split_model,
)

__all__ = [
    "REMOTES_FILE",
    "Remote",
    "RemoteError",
    "add_remote",
    "check_name",
    "check_url",
    "load_remotes",
    "remotes_path",
    "remove_remote",
    "save_remotes",
    "split_model",
]
