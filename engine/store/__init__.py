"""The model store: downloaded, converted and imported models under the models folder.

``ModelStore`` is the entry point for the CLI, the server and the tray app; downloads,
conversions and GGUF imports are jobs that finish by handing a complete folder to it.
"""

from engine.store.errors import StoreError
from engine.store.manifest import Manifest
from engine.store.store import ModelStore, StoredModel

__all__ = ["Manifest", "ModelStore", "StoreError", "StoredModel"]
