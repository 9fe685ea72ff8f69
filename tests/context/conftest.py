"""Fixtures of the tool-call context tests: ``spans`` is shared, in tests/conftest.py."""
