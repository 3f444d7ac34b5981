"""The installed gpupair version, for logs and `gpupair --version`; the standard library only."""

from __future__ import annotations


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("gpupair")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"
