"""One view of the arrays tessera accepts: torch tensors (GPU memory) and numpy arrays (host memory, run on the simulator)."""
import sys
from typing import NamedTuple

from ._errors import InputError

# Canonical element type names are the manifest's: f16, bf16, f32, f8E4M3FN (OCP e4m3), f8E4M3FNUZ.
_ALIASES = {"f16": "f16", "float16": "f16", "half": "f16", "bf16": "bf16", "bfloat16": "bf16",
            "f32": "f32", "float32": "f32", "float": "f32", "float8_e4m3fn": "f8E4M3FN",
            "float8_e4m3fnuz": "f8E4M3FNUZ"}
TORCH_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f8E4M3FN": "float8_e4m3fn",
               "f8E4M3FNUZ": "float8_e4m3fnuz"}


class ArrayInfo(NamedTuple):
    kind: str          # "torch" or "numpy"
    obj: object
    shape: tuple
    strides: tuple     # in elements; None if not a whole number of elements
    dtype: str         # canonical name, or the array's own dtype spelling when unsupported
    ptr: int           # device pointer (torch) or host address (numpy)
    itemsize: int


torch_ops = None   # the _torch_ops module once tessera registered its torch operators (torch importable)


def compiling():
    """True while torch.compile traces a call: the entry points then call their torch operators (_torch_ops), which
    torch.compile can put in a graph, instead of launching."""
    return torch_ops is not None and torch_ops.is_compiling()


def _torch():
    return sys.modules.get("torch")


def _numpy():
    return sys.modules.get("numpy")


def dtype_name(dtype):
    """'f16' / 'bf16' / 'f32' for a torch dtype, numpy dtype or type, ml_dtypes.bfloat16 or a string;
    another dtype's own name ('float64', 'int8') when unsupported; None if `dtype` is no dtype at all."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        return _ALIASES.get(dtype.lower(), dtype)
    torch = _torch()
    if torch is not None and isinstance(dtype, torch.dtype):
        name = str(dtype).replace("torch.", "")
        return _ALIASES.get(name, name)
    np = _numpy()
    if np is not None:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            return None
        return _ALIASES.get(name, name)
    return None


def describe(x, name):
    """ArrayInfo for a torch tensor or a numpy array; InputError for anything else (`name` starts its message)."""
    torch, np = _torch(), _numpy()
    if torch is not None and isinstance(x, torch.Tensor):
        dtype = str(x.dtype).replace("torch.", "")
        return ArrayInfo("torch", x, tuple(x.shape), tuple(x.stride()), _ALIASES.get(dtype, dtype),
                         x.data_ptr(), x.element_size())
    if np is not None and isinstance(x, np.ndarray):
        size = x.dtype.itemsize
        strides = tuple(s // size for s in x.strides) if all(s % size == 0 for s in x.strides) else None
        dtype = x.dtype.name if x.dtype.isnative else x.dtype.str   # byte-swapped arrays are unsupported
        return ArrayInfo("numpy", x, x.shape, strides, _ALIASES.get(dtype, dtype),
                         x.__array_interface__["data"][0], size)
    raise InputError(f"{name} is a {type(x).__module__}.{type(x).__qualname__}; "
                     "expected a torch tensor or a numpy array")


def empty(like, shape, dtype):
    """A new uninitialised array of `dtype` (canonical name) on the same device/library as `like`."""
    if like.kind == "torch":
        torch = _torch()
        return torch.empty(shape, dtype=getattr(torch, TORCH_NAMES[dtype]), device=like.obj.device)
    return _numpy().empty(shape, dtype=numpy_dtype(dtype))


def zeros(like, shape, dtype):
    """A new zero-filled array of `dtype` on the same device/library as `like` (torch: a memset on the current stream)."""
    if like.kind == "torch":
        torch = _torch()
        return torch.zeros(shape, dtype=getattr(torch, TORCH_NAMES[dtype]), device=like.obj.device)
    return _numpy().zeros(shape, dtype=numpy_dtype(dtype))


def numpy_dtype(dtype):
    """The numpy dtype for a canonical name; bf16 and fp8 need the ml_dtypes package."""
    np = _numpy()
    if dtype in ("f16", "f32"):
        return np.dtype(TORCH_NAMES[dtype])
    try:
        import ml_dtypes
    except ImportError:
        raise InputError(f"{TORCH_NAMES[dtype]} numpy arrays need the ml_dtypes package (pip install "
                         "ml_dtypes)") from None
    return np.dtype(getattr(ml_dtypes, TORCH_NAMES[dtype]))


def refuse_grad(who, named):
    """InputError when autograd would record this call: grad mode is on and a torch input requires grad. The op has no
    backward yet, so its output would be silently detached from the graph (a training step with zero gradients)."""
    torch = _torch()
    if torch is None or not torch.is_grad_enabled():
        return
    names = [name for name, x in named if isinstance(x, torch.Tensor) and x.requires_grad]
    if names:
        raise InputError(f"{who}: {', '.join(names)} {'requires' if len(names) == 1 else 'require'} grad, but {who} has "
                         "no backward in this version of Tessera, so its output would be detached from the autograd "
                         "graph and gradients through it silently lost; call it under torch.no_grad() (inference) or "
                         "pass .detach()ed tensors")


def library(x):
    """The module whose functions take x: torch for a torch tensor, else numpy."""
    torch = _torch()
    return torch if torch is not None and isinstance(x, torch.Tensor) else _numpy()


def arange(n, like):
    """0, 1, ..., n - 1 as int32, on like's device (torch) or as a numpy array."""
    xp = library(like)
    if xp is _torch():
        return xp.arange(n, dtype=xp.int32, device=like.device)
    return xp.arange(n, dtype=xp.int32)


def as_float32(x):
    """x (torch tensor or numpy array) converted to float32."""
    return x.float() if library(x) is _torch() else x.astype("float32")


def as_int32(x):
    """x (torch tensor or numpy array) converted to int32."""
    return x.int() if library(x) is _torch() else x.astype("int32")


def concat_last(parts):
    """The arrays `parts` (all torch or all numpy) joined along their last dimension."""
    xp = library(parts[0])
    return xp.cat(parts, -1) if xp is _torch() else xp.concatenate(parts, -1)


def pad_last(x, size):
    """x (torch tensor or numpy array) zero-padded on its last dimension to `size` (a new array; torch: recorded by
    autograd, its gradient the unpadded part)."""
    if library(x) is _torch():
        return _torch().nn.functional.pad(x, (0, size - x.shape[-1]))
    return _numpy().pad(x, [(0, 0)] * (x.ndim - 1) + [(0, size - x.shape[-1])])


def assign(dst, src):
    """dst[...] = src for a torch tensor or numpy array dst (torch: on the current stream); returns dst."""
    if library(dst) is _torch():
        return dst.copy_(src)
    dst[...] = src
    return dst


def fill(info, value):
    """Sets every element of the array to `value` (used for K = 0)."""
    if info.kind == "torch":
        info.obj.fill_(value)
    else:
        info.obj.fill(value)
