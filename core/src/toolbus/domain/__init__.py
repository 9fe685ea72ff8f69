"""The pure domain: configuration, registry, filtering, access, wire format, naming.

Nothing in this package performs I/O, touches an event loop or reads a clock it
was not handed; ``tests/test_architecture.py`` keeps it that way.
"""
