"""ambrosia-ic: a Python Immortal Coordinator."""
