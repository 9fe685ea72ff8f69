"""toolbus state on Redis or Valkey: sessions, replay guards and checkpoints any replica can use.

::

    from toolbus.plugins import connect_state

    store = await connect_state("redis://127.0.0.1:6379/0")

See ``docs/state-stores.md`` for the URL, the options and the guarantees.
Modules: ``state`` (the :class:`~toolbus.ports.StateStore`), ``state_options`` (URL and
options) and ``plugin`` (the ``toolbus.state_stores`` entry point).
"""

from toolbus_redis.state import RedisStateStore, connect
from toolbus_redis.state_options import RedisOptions, parse_options

__all__ = ["RedisOptions", "RedisStateStore", "connect", "parse_options"]
