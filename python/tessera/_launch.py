"""Where a call runs, shared by the ops: torch CUDA tensors on their GPU (torch's current stream), numpy arrays on
the simulator (spans of host memory copied in and out)."""
from . import _device
from ._errors import InputError

ALIGNMENT = 16   # bytes, for the base pointer of every torch tensor a kernel reads or writes with vector accesses


def runtime_device(who, arrays, device, outputs=(), aligned=None):
    """Checks where the arrays live and returns the runtime Device. `arrays` is [(name, ArrayInfo)]; `outputs`
    names those written (numpy: must be writeable); `aligned` names the torch tensors whose base pointer must be
    ALIGNMENT-byte aligned (default: all). Every failure is an InputError starting with `who`."""
    kinds = {info.kind for _, info in arrays}
    if len(kinds) > 1:
        raise InputError(f"{who}: torch tensors and numpy arrays mixed (" +
                         ", ".join(f"{name}: {info.kind}" for name, info in arrays) + ")")
    if kinds == {"numpy"}:
        if device is None or (isinstance(device, str) and not device.startswith("sim")):
            raise InputError(f"{who}: numpy arrays run on the simulator: pass device='sim:<target>' "
                             "(for example 'sim:gfx942'); torch CUDA tensors run on the GPU")
        for name, info in arrays:
            if name in outputs and not info.obj.flags.writeable:
                raise InputError(f"{who}: {name} is a read-only numpy array")
        dev = _device.device(device)
        if dev.backend != "sim":
            raise InputError(f"{who}: numpy arrays run on the simulator, not on {dev!r}")
        return dev

    places = {str(info.obj.device) for _, info in arrays}
    if len(places) > 1:
        raise InputError(f"{who}: tensors on different devices (" +
                         ", ".join(f"{name}: {info.obj.device}" for name, info in arrays) + ")")
    place = arrays[0][1].obj.device
    if place.type != "cuda":
        raise InputError(f"{who}: tensors are on {place}; torch tensors must be on a CUDA (or ROCm) "
                         "device (numpy arrays run on device='sim:<target>')")
    for name, info in arrays:
        if (aligned is None or name in aligned) and info.ptr % ALIGNMENT:
            raise InputError(f"{who}: {name}.data_ptr() = {info.ptr:#x} is not {ALIGNMENT}-byte aligned "
                             "(a view at an offset, such as x[:, 1:], causes this: pass a copy)")
    import torch
    backend = "hip" if getattr(torch.version, "hip", None) else "cuda"
    index = place.index if place.index is not None else torch.cuda.current_device()
    if device is not None:
        wanted = (device.spec, device.ordinal) if isinstance(device, _device.Device) else _device.parse_device(device)
        if wanted != (backend, index):
            raise InputError(f"{who}: device={device!r} but the tensors are on {place}")
    return _device.device(f"{backend}:{index}")


def current_stream(info):
    """torch's current stream of the tensor's device, as the int the runtime takes."""
    return stream_of(info.obj.device)


def stream_of(device):
    """torch's current stream of a CUDA/ROCm torch.device, as an int: through torch's raw getter where it has one
    (torch.cuda.current_stream builds a Stream object, several microseconds a call)."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None and device.index is not None:
        return raw(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def element_span(shape, strides):
    """(lowest, highest) element offset an array of this shape and these strides (elements) touches, relative to
    its first element; None for an empty array."""
    if any(n == 0 for n in shape):
        return None
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    return low, high


class SimMemory:
    """Simulator copies of host arrays for one launch: `put` copies the span an array covers (so strides, gaps
    and negative strides stay as they are) and returns the pointer to its first element; `get` copies a span
    back; every allocation is freed on exit."""

    def __init__(self, dev):
        self.dev = dev
        self._ptrs = []
        self._spans = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for ptr in self._ptrs:
            self.dev.free(ptr)
        self._ptrs.clear()

    def alloc(self, nbytes):
        self._ptrs.append(self.dev.malloc(max(int(nbytes), 16)))   # never a zero-byte (null) allocation
        return self._ptrs[-1]

    def put(self, info, copy=True):
        """Pointer (in simulator memory) to info's first element; an empty array gets a small unused buffer."""
        span = element_span(info.shape, info.strides)
        if span is None:
            return self.alloc(16)
        low, high = span
        nbytes = (high - low + 1) * info.itemsize
        base = self.alloc(nbytes)
        if copy:
            self.dev.memcpy_htod(base, info.ptr + low * info.itemsize, nbytes)
        self._spans[id(info.obj)] = (base, info.ptr + low * info.itemsize, nbytes)
        return base - low * info.itemsize

    def put_together(self, infos):
        """Pointers for arrays that share host memory (views of one buffer, such as a K/V cache's two halves): one
        copy of the bytes they span together, so that getting one back never restores another's old values."""
        spans = [(info, element_span(info.shape, info.strides)) for info in infos]
        spans = [(info, span) for info, span in spans if span is not None]
        if not spans:
            return [self.alloc(16) for _ in infos]
        low = min(info.ptr + lo * info.itemsize for info, (lo, _) in spans)
        high = max(info.ptr + (hi + 1) * info.itemsize for info, (_, hi) in spans)
        base = self.alloc(high - low)
        self.dev.memcpy_htod(base, low, high - low)
        for info in infos:
            self._spans[id(info.obj)] = (base, low, high - low)
        return [base + (info.ptr - low) for info in infos]

    def get(self, info):
        """Copies the span of `info` (put before) back into host memory."""
        device, host, nbytes = self._spans[id(info.obj)]
        self.dev.memcpy_dtoh(host, device, nbytes)
