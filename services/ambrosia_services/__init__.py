"""Immortal services built on ambrosia-py, and the protocol endpoints they speak."""
