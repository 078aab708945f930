"""tessera.gemm: C = A·B with the wmma_gemm kernels, on torch CUDA tensors or on numpy arrays through the simulator."""
from typing import NamedTuple

from . import _arrays, _launch
from ._errors import InputError, KernelNotFoundError

OUT_DTYPES = {"f16": ("f16", "f32"), "bf16": ("bf16", "f32")}   # input dtype -> supported output dtypes
ALIGNMENT = _launch.ALIGNMENT                                   # bytes, for every base pointer
_SPELLED = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


class Plan(NamedTuple):
    """A validated GEMM: sizes, leading dimensions (elements), and which kernel variant."""
    M: int
    N: int
    K: int
    lda: int
    ldb: int
    ldc: int
    transpose_b: bool
    dtype: str
    out_dtype: str


def _row_major_ld(shape, strides):
    """The leading dimension of a row-major 2-D layout (unit stride along a row, rows not
    overlapping), or None. Strides of size-1 dimensions, and of empty arrays, do not matter."""
    rows, cols = shape
    if rows * cols == 0:
        return max(cols, 1)
    if strides is None or (cols > 1 and strides[1] != 1):
        return None
    if rows == 1:
        return cols
    return strides[0] if strides[0] >= cols else None


def _layout_error(name, info, what):
    return InputError(f"tessera.gemm: {name} has shape {info.shape} and strides {info.strides} (elements); "
                      f"supported: {what}. Make it contiguous first (.contiguous() / numpy.ascontiguousarray)")


def plan(a, b, out, out_dtype):
    """Checks a, b and out (ArrayInfo; out may be None) without touching any device; returns the Plan."""
    for name, info in (("a", a), ("b", b)):
        if len(info.shape) != 2:
            raise InputError(f"tessera.gemm: {name} must be 2-D, got shape {info.shape}")
        if info.dtype not in OUT_DTYPES:
            raise InputError(f"tessera.gemm: {name} has dtype {_SPELLED.get(info.dtype, info.dtype)}; "
                             "supported: float16, bfloat16")
    if a.dtype != b.dtype:
        raise InputError(f"tessera.gemm: a and b must have the same dtype, got {_SPELLED[a.dtype]} and "
                         f"{_SPELLED[b.dtype]}")
    (M, K), (Kb, N) = a.shape, b.shape
    if K != Kb:
        raise InputError(f"tessera.gemm: a is (M, K) = {a.shape} and b is (K, N) = {b.shape}: K differs")

    wanted = _arrays.dtype_name(out_dtype)
    if out_dtype is not None and wanted is None:
        raise InputError(f"tessera.gemm: out_dtype {out_dtype!r} is not a dtype")
    if out is not None:
        if out.dtype != (wanted or out.dtype):
            raise InputError(f"tessera.gemm: out has dtype {_SPELLED.get(out.dtype, out.dtype)} but out_dtype "
                             f"is {_SPELLED[wanted]}")
        wanted = out.dtype
    wanted = wanted or a.dtype
    if wanted not in OUT_DTYPES[a.dtype]:
        raise InputError(f"tessera.gemm: output dtype {_SPELLED.get(wanted, wanted)} is not supported for "
                         f"{_SPELLED[a.dtype]} inputs (supported: "
                         f"{', '.join(_SPELLED[d] for d in OUT_DTYPES[a.dtype])})")

    lda = _row_major_ld(a.shape, a.strides)
    if lda is None:
        raise _layout_error("a", a, "unit stride on the last dimension and a row stride >= K")
    ldb, transpose_b = _row_major_ld(b.shape, b.strides), False
    if ldb is None:   # b = bt.T with bt an (N, K) row-major tensor: the transpose_b kernel reads bt directly
        ldb = _row_major_ld((N, K), None if b.strides is None else b.strides[::-1])
        transpose_b = True
    if ldb is None:
        raise _layout_error("b", b, "unit stride on the last dimension (row stride >= N), or the transpose "
                            "of such an (N, K) tensor (unit stride on the first dimension)")
    ldc = max(N, 1)
    if out is not None:
        if out.shape != (M, N):
            raise InputError(f"tessera.gemm: out has shape {out.shape}, expected (M, N) = {(M, N)}")
        ldc = _row_major_ld(out.shape, out.strides)
        if ldc is None:
            raise _layout_error("out", out, "unit stride on the last dimension and a row stride >= N")
    return Plan(M, N, K, lda, ldb, ldc, transpose_b, a.dtype, wanted)


def _runtime_device(arrays, device):
    """Checks where the arrays live (one library; for torch one GPU, 16-byte aligned) and returns the runtime Device."""
    return _launch.runtime_device("tessera.gemm", arrays, device, outputs=("out",))


def _find(bundle, attrs):
    kernel = bundle.find("wmma_gemm", **attrs)
    if kernel is None:
        raise KernelNotFoundError(
            f"bundle {bundle.directory} ({bundle.target}) has no wmma_gemm kernel with " +
            " ".join(f"{k}={v}" for k, v in attrs.items()) + f" (kernels: {', '.join(bundle.kernels)})")
    return kernel


def _kernel(dev, p):
    """The bundle's wmma_gemm kernel for p's variant, found once per bundle and variant (a missing one raises each
    call)."""
    bundle = dev.bundle()
    attrs = dict(dtype=p.dtype, out_type=p.out_dtype, transpose_a=False, transpose_b=p.transpose_b)
    return bundle.remember(("wmma_gemm", *attrs.values()), lambda: _find(bundle, attrs))


def _launch_sim(dev, kernel, p, a, b, c):
    """Copies the spans of host memory a, b, c cover into simulator memory, launches, copies c back.
    Copying whole spans keeps the leading dimensions (and c's bytes between rows) as they are."""
    b_rows, b_cols = (p.N, p.K) if p.transpose_b else (p.K, p.N)
    spans = [(a, ((p.M - 1) * p.lda + p.K) * a.itemsize), (b, ((b_rows - 1) * p.ldb + b_cols) * b.itemsize),
             (c, ((p.M - 1) * p.ldc + p.N) * c.itemsize)]
    ptrs = []
    try:
        for info, nbytes in spans:
            ptrs.append(dev.malloc(nbytes))
            dev.memcpy_htod(ptrs[-1], info.ptr, nbytes)
        kernel.launch(None, a=ptrs[0], b=ptrs[1], c=ptrs[2], M=p.M, N=p.N, K=p.K, lda=p.lda, ldb=p.ldb, ldc=p.ldc)
        dev.synchronize()
        dev.memcpy_dtoh(c.ptr, ptrs[2], spans[2][1])
    finally:
        for ptr in ptrs:
            dev.free(ptr)


def gemm(a, b, out_dtype=None, *, out=None, device=None):
    """C = a @ b for a (M, K) and b (K, N), both float16 or both bfloat16; returns C (M, N).

    out_dtype: None (the input dtype), the input dtype or float32 (torch/numpy dtype or a name).
    out: an (M, N) array to write instead of allocating one (its dtype fixes the output dtype).
    b may be the transpose of a row-major (N, K) tensor (b = bt.T): the transpose_b kernel reads it
    in place. Rows may have any stride >= their length; the last dimension must have unit stride.
    torch CUDA tensors run on the tensors' GPU, on torch's current stream (asynchronously);
    numpy arrays run on device='sim:<target>' and return after the copy back.
    Every check happens before the device is touched: errors are tessera.InputError.
    """
    _arrays.refuse_grad("tessera.gemm", (("a", a), ("b", b)))
    ia, ib = _arrays.describe(a, "tessera.gemm: a"), _arrays.describe(b, "tessera.gemm: b")
    io = None if out is None else _arrays.describe(out, "tessera.gemm: out")
    p = plan(ia, ib, io, out_dtype)
    dev = _runtime_device([("a", ia), ("b", ib)] + ([("out", io)] if io else []), device)
    kernel = _kernel(dev, p)
    if io is None:
        out = _arrays.empty(ia, (p.M, p.N), p.out_dtype)
        io = _arrays.describe(out, "out")
    if p.M == 0 or p.N == 0:
        return out
    if p.K == 0:
        _arrays.fill(io, 0)
        return out
    if ia.kind == "numpy":
        _launch_sim(dev, kernel, p, ia, ib, io)
    else:
        kernel.launch(_launch.current_stream(ia), a=ia.ptr, b=ib.ptr, c=io.ptr, M=p.M, N=p.N, K=p.K, lda=p.lda,
                      ldb=p.ldb, ldc=p.ldc)
    return out
