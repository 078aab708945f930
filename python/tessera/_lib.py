"""ctypes bindings of libtessera_runtime (include/tessera/Runtime/tessera_runtime.h); failing calls raise TesseraError subclasses."""
import ctypes
import threading
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t, c_uint32, c_void_p

from . import _paths
from ._errors import error_for_status

_H = c_void_p            # every opaque handle
_OUT_H = POINTER(c_void_p)
_OUT_S = POINTER(c_char_p)
_OUT_I = POINTER(c_int)

# name: (restype, argtypes), in the header's order.
_SIGNATURES = {
    "tessera_last_error": (c_char_p, []),
    "tessera_status_name": (c_char_p, [c_int]),
    "tessera_device_open": (c_int, [c_char_p, c_int, _OUT_H]),
    "tessera_device_close": (c_int, [_H]),
    "tessera_device_arch": (c_int, [_H, _OUT_S]),
    "tessera_device_backend": (c_int, [_H, _OUT_S]),
    "tessera_malloc": (c_int, [_H, c_size_t, _OUT_H]),
    "tessera_free": (c_int, [_H, c_void_p]),
    "tessera_memcpy_htod": (c_int, [_H, c_void_p, c_void_p, c_size_t]),
    "tessera_memcpy_dtoh": (c_int, [_H, c_void_p, c_void_p, c_size_t]),
    "tessera_memset": (c_int, [_H, c_void_p, c_int, c_size_t]),
    "tessera_synchronize": (c_int, [_H]),
    "tessera_bundle_load": (c_int, [_H, c_char_p, _OUT_H]),
    "tessera_bundle_unload": (c_int, [_H]),
    "tessera_bundle_target": (c_int, [_H, _OUT_S]),
    "tessera_bundle_kernel_count": (c_int, [_H, _OUT_I]),
    "tessera_bundle_kernel_name": (c_int, [_H, c_int, _OUT_S]),
    "tessera_bundle_kernel_json": (c_int, [_H, c_int, _OUT_S]),
    "tessera_kernel_get": (c_int, [_H, c_char_p, _OUT_H]),
    "tessera_kernel_name": (c_int, [_H, _OUT_S]),
    "tessera_kernel_arg_count": (c_int, [_H, _OUT_I]),
    "tessera_kernel_arg_name": (c_int, [_H, c_int, _OUT_S]),
    "tessera_kernel_arg_type": (c_int, [_H, c_int, _OUT_S]),
    "tessera_kernel_arg_dtype": (c_int, [_H, c_int, _OUT_S]),
    "tessera_kernel_arg_role": (c_int, [_H, c_int, _OUT_S]),
    "tessera_kernel_json": (c_int, [_H, _OUT_S]),
    "tessera_args_create": (c_int, [_H, _OUT_H]),
    "tessera_args_destroy": (c_int, [_H]),
    "tessera_args_reset": (c_int, [_H]),
    "tessera_args_set_ptr": (c_int, [_H, c_char_p, c_void_p]),
    "tessera_args_set_i64": (c_int, [_H, c_char_p, c_int64]),
    "tessera_args_set_i32": (c_int, [_H, c_char_p, c_int32]),
    "tessera_args_set_f32": (c_int, [_H, c_char_p, c_float]),
    "tessera_args_set_all": (c_int, [_H, c_void_p, c_size_t]),   # const uint64_t *values (a byref to 8-byte slots)
    "tessera_launch": (c_int, [_H, _H, c_void_p]),
    "tessera_launch_grid": (c_int, [_H, _H, POINTER(c_uint32 * 3)]),
    "tessera_bundle_kernel_set_count": (c_int, [_H, _OUT_I]),
    "tessera_bundle_kernel_set_name": (c_int, [_H, c_int, _OUT_S]),
    "tessera_bundle_kernel_set_json": (c_int, [_H, c_int, _OUT_S]),
    "tessera_kernel_set_get": (c_int, [_H, c_char_p, _OUT_H]),
    "tessera_kernel_set_json": (c_int, [_H, _OUT_S]),
    "tessera_set_args_create": (c_int, [_H, _OUT_H]),
    "tessera_launch_set": (c_int, [_H, _H, c_void_p]),
    "tessera_kernel_set_reserve": (c_int, [_H, _H, c_void_p]),
}

_library = None
_library_path = None
_lock = threading.Lock()


def library():
    """The loaded runtime (ctypes.CDLL), loaded once per process from _paths.runtime_library()."""
    global _library, _library_path
    if _library is not None:   # every runtime call comes here: no lock once loaded
        return _library
    with _lock:
        if _library is None:
            path = _paths.runtime_library()
            lib = ctypes.CDLL(str(path))
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            _library_path, _library = path, lib   # the library last: library() returns it without the lock
    return _library


def library_path():
    """Path of the loaded runtime library (loads it if needed)."""
    library()
    return _library_path


def last_error():
    return library().tessera_last_error().decode(errors="replace")


def status_name(status):
    return library().tessera_status_name(status).decode()


def call(name, *args):
    """Calls a runtime function; a non-zero status raises its TesseraError subclass with the runtime's message."""
    status = getattr(library(), name)(*args)
    if status:
        raise error_for_status(status, last_error())


def call_handle(name, *args):
    """call() with a trailing handle out-parameter; returns the handle (an int)."""
    out = c_void_p()
    call(name, *args, byref(out))
    return out.value


def call_str(name, *args):
    """call() with a trailing string out-parameter; returns str, or None for NULL."""
    out = c_char_p()
    call(name, *args, byref(out))
    return None if out.value is None else out.value.decode()


def call_int(name, *args):
    out = c_int()
    call(name, *args, byref(out))
    return out.value
