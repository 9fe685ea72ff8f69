"""toolbus state on Redis or Valkey: sessions, replay guards and checkpoints any replica can use.

::

    from toolbus.plugins import connect_state

    store = await connect_state("redis://127.0.0.1:6379/0")

See ``docs/state-stores.md`` for the URL, the options and the guarantees.
Modules: ``store`` (the :class:`~toolbus.ports.StateStore`), ``options`` (URL and
options) and ``plugin`` (the ``toolbus.state_stores`` entry point).
"""

from toolbus_redis.options import RedisOptions, parse_options
from toolbus_redis.store import RedisStateStore, connect

__all__ = ["RedisOptions", "RedisStateStore", "connect", "parse_options"]
