"""The ``ambrosia`` command: the coordinator's commands (``ambrosia_ic``) and the ones that
need the binding as well (``run``: register, start a local coordinator, run the immortal;
``log dump`` with method names and arguments).

This package sits on top of both: the binding never imports the coordinator, and the
coordinator never imports the binding's runtime or programming model.
"""
