"""Exceptions raised for bad user input; the CLI prints them on one line and exits 2."""


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range.

    The message is one line that names the key and what is allowed.
    """
