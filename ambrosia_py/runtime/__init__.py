"""The runtime: the deterministic engine and the asyncio runner that owns the sockets."""

from .engine import Engine
from .runner import ImmortalRunner, connect_with_retry

__all__ = ["Engine", "ImmortalRunner", "connect_with_retry"]
