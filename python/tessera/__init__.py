"""Tessera Python API: GEMM, attention (forward, backward, autograd) and paged decode on torch CUDA tensors (or numpy arrays on the simulator) through libtessera_runtime."""
from ._device import Bundle, Device, Kernel, KernelSet, device
from ._errors import (ArgumentError, BackendUnavailableError, BundleNotFoundError, CodeObjectCorruptError,
                      CodeObjectMissingError, CompileError, DriverError, InputError, InternalError, InvalidArgumentError,
                      KernelNotFoundError, LibraryNotFoundError, ManifestError, TargetMismatchError, TesseraError)
from ._attention import flash_attn, flash_attn_varlen
from ._attention_bwd import flash_attn_bwd, flash_attn_varlen_bwd
from ._combine import attn_combine
from ._decode import paged_cache_write, paged_decode, paged_decode_plan
from ._gemm import gemm
from ._lib import library_path as runtime_library
from ._paths import available_targets, bundle_dirs, find_bundle
from . import _arrays, testing

try:
    import torch as _torch
except ImportError:
    _torch = None
if _torch is not None and hasattr(_torch.library, "custom_op"):   # torch >= 2.4
    from . import _torch_ops
    _arrays.torch_ops = _torch_ops

__version__ = "0.1.0"

__all__ = [
    "gemm", "flash_attn", "flash_attn_varlen", "flash_attn_bwd", "flash_attn_varlen_bwd", "paged_decode",
    "paged_decode_plan", "paged_cache_write", "attn_combine", "testing", "device", "Device",
    "Bundle", "Kernel", "KernelSet", "runtime_library", "find_bundle", "bundle_dirs",
    "available_targets", "TesseraError", "InputError", "LibraryNotFoundError", "BundleNotFoundError",
    "InvalidArgumentError", "BackendUnavailableError", "DriverError", "TargetMismatchError", "ManifestError",
    "CodeObjectMissingError", "CodeObjectCorruptError", "CompileError", "KernelNotFoundError", "ArgumentError",
    "InternalError",
]
