"""Placeholder: the owning change fills in this command group."""


def register(subparsers) -> None:
    return None
