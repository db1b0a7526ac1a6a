"""The coordinator's sub-commands, one module per group: ``registration``
(register-instance, add-replica), ``ic`` (run a coordinator), ``debug_instance`` (replay
for repro and upgrade tests) and ``log`` (log dump). ``ambrosia_ic.cli`` builds the parser
from them and runs a command.

Each module offers ``add_<name>(subparsers)``, which registers a parser whose ``handler``
default is a function ``(args) -> int``.
"""
