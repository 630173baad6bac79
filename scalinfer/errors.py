"""Typed errors. Every message names what is wrong and where, in one line a user can act on.

The CLI turns any `ScalinferError` into `error: <message>` on stderr and exit code 2, with no traceback.
"""

__all__ = ["ScalinferError", "RunTableError", "FitFileError", "ModelError", "TrainError", "OutputError"]


class ScalinferError(Exception):
    """Base class of every error scalinfer raises on purpose."""


class RunTableError(ScalinferError, ValueError):
    """A run table (file or DataFrame) is malformed: missing column, bad value, unknown format..."""


class FitFileError(ScalinferError, OSError):
    """A posterior file cannot be read (not netCDF, written by another tool, incompatible version...)."""


class ModelError(ScalinferError, ValueError):
    """A model cannot be fit to or predict from what it was given (unknown model, missing inputs...)."""


class TrainError(ScalinferError, RuntimeError):
    """The trainer was configured wrongly or a run cannot continue."""


class OutputError(ScalinferError, ValueError):
    """A path a command would write cannot or must not be written: an input of the command, an existing file
    without ``--force``, a folder or a device, a missing folder tree, a folder without write permission
    (`scalinfer._io.check_output`)."""
