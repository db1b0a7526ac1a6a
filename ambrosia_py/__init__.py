"""ambrosia-py: immortal services in Python on Microsoft's AMBROSIA protocol."""

__version__ = "0.1.0"
