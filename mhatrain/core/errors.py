"""Errors a user can fix. The CLI prints them as one line and exits non-zero."""


class MhatrainError(Exception):
    """Base class: bad input that the user can correct (config, data, files, options)."""


class ConfigError(MhatrainError):
    """A config file or `--set` override is invalid."""


class DataError(MhatrainError):
    """A data source is missing, malformed or inconsistent."""


class CheckpointError(MhatrainError):
    """A checkpoint or run directory cannot be used."""
