"""Errors a user can fix. The CLI prints them as one line and exits non-zero."""

import importlib


class MhatrainError(Exception):
    """Base class: bad input that the user can correct (config, data, files, options)."""


class ConfigError(MhatrainError):
    """A config file or `--set` override is invalid."""


class DataError(MhatrainError):
    """A data source is missing, malformed or inconsistent."""


class CheckpointError(MhatrainError):
    """A checkpoint or run directory cannot be used."""


def require_optional(module: str, name: str, extra: str, requirement: str, why: str):
    """Import an optional dependency, or fail with one line saying how to install it (its extra)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MhatrainError(
            f"{why} needs {name}, which is not installed: pip install 'mhatrain[{extra}]' (or pip install '{requirement}')"
        ) from None
