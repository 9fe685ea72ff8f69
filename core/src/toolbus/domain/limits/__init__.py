"""How much callers may do: rate limits, budgets and prices (``[[limits]]``, ``[[budgets]]``,
``[costs]`` of ``toolbus.toml``), and the pure arithmetic of counting them
(:mod:`~toolbus.domain.limits.rates`, :mod:`~toolbus.domain.limits.periods`)."""
