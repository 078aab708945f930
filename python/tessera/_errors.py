"""Tessera exceptions: one class per runtime status code, plus the errors of the Python layer."""


class TesseraError(Exception):
    """Base of every Tessera error. `status` is the runtime's status code (None for Python-side errors)."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


# Runtime statuses (include/tessera/Runtime/tessera_runtime.h); the message is tessera_last_error().
class InvalidArgumentError(TesseraError):
    status = 1


class BackendUnavailableError(TesseraError):
    status = 2


class DriverError(TesseraError):
    status = 3


class TargetMismatchError(TesseraError):
    status = 4


class ManifestError(TesseraError):
    status = 5


class CodeObjectMissingError(TesseraError):
    status = 6


class CodeObjectCorruptError(TesseraError):
    status = 7


class KernelNotFoundError(TesseraError):
    status = 8


class ArgumentError(TesseraError):
    status = 9


class InternalError(TesseraError):
    status = 10


# Raised by the Python layer itself.
class CompileError(TesseraError):
    """tessera-compile failed (or did not run) on a directive compiled on demand; the message carries its log."""


class LibraryNotFoundError(TesseraError):
    """libtessera_runtime.so was not found (see TESSERA_HOME)."""


class BundleNotFoundError(TesseraError):
    """No bundle for the device's target in the bundle search path."""


class InputError(TesseraError, ValueError):
    """Tensors or options rejected before any device work (dtype, shape, stride, alignment, device)."""


STATUS_ERRORS = {cls.status: cls for cls in (
    InvalidArgumentError, BackendUnavailableError, DriverError, TargetMismatchError, ManifestError,
    CodeObjectMissingError, CodeObjectCorruptError, KernelNotFoundError, ArgumentError, InternalError)}


def error_for_status(status, message):
    """The exception for a failing runtime call: its status class carrying the runtime's message."""
    return STATUS_ERRORS.get(status, TesseraError)(message, status)
