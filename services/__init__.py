"""Immortal services and the protocol endpoints they speak."""
