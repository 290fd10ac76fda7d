"""The one error of the data library: a data set that cannot be read as its processor reads it."""

from __future__ import annotations


class DataError(Exception):
    """One sentence naming the file (or directory) and what is wrong with it."""
