"""Front doors: one composition of a caller's session for every way in.

The HTTP gateway, ``toolbus mcp serve``, the agent service and ``toolbus
ask``, and ``open_tools`` in Python all open their callers' sessions through a
:class:`~toolbus.application.doors.door.FrontDoor`, built once per process from
the operator's local files (docs/access-control.md):

* :mod:`~toolbus.application.doors.settings`: the ``[doors]`` table;
* :mod:`~toolbus.application.doors.policy`: permissions from local files (and
  signed live ones, when the operator opts in);
* :mod:`~toolbus.application.doors.keeping`: sessions kept between requests
  (per-user room, concurrent requests merged, records written as they go);
* :mod:`~toolbus.application.doors.holding`: what is kept, as plain data,
  behind a small holder interface;
* :mod:`~toolbus.application.doors.limits`: per-user places;
* :mod:`~toolbus.application.doors.steps`: the steps every call passes, in
  order (the call policy, approvals).
"""
