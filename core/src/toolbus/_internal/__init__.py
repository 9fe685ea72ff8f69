"""Plumbing shared by toolbus's own adapters, bridges and commands; not public API.

Reading a broker's URL and options, the delivery buffer readers take messages
from, rate-limited warnings, and the choice of event loop. These change with the
adapters that use them; code outside the toolbus distributions should not
import them.
"""
