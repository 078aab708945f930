"""Devices, bundles and kernels over the runtime: one Device per backend string (cached), bundles cached per directory."""
import ctypes
import json
import sys
import threading
from pathlib import Path

from . import _lib, _paths
from ._errors import InputError

# Roles of the arguments the runtime fills at launch (docs/bundle.md): callers never set them.
RUNTIME_FILLED_ROLES = frozenset({"tensor_map", "tile_counter", "workspace"})

# Python values for the manifest's scalar argument types.
_SETTERS = {"ptr": ("tessera_args_set_ptr", ctypes.c_void_p), "i64": ("tessera_args_set_i64", ctypes.c_int64),
            "i32": ("tessera_args_set_i32", ctypes.c_int32), "f32": ("tessera_args_set_f32", ctypes.c_float)}


def _values_struct(args, settable):
    """A ctypes Structure laid out as tessera_args_set_all's values (one 8-byte slot per argument, manifest order).
    Each settable argument is a field of its by-name setter's ctypes type, named after it, so ArgValues(**values)
    converts every value exactly as the setters do (None is NULL, a float is refused for an integer, an f32 is
    rounded); a 4-byte field sits in its slot's low 32 bits, the slots of what the runtime fills (tensor maps, tile
    counters) stay 0 (it ignores them)."""
    fields = []
    for name, kind in args:
        if name not in settable:
            fields.append((f"{name} (runtime)", ctypes.c_uint64))
            continue
        slot = [(name, _SETTERS[kind][1])]
        if ctypes.sizeof(slot[0][1]) == 4:
            slot.append((f"{name} (high bits)", ctypes.c_uint32))
            if sys.byteorder == "big":
                slot.reverse()
        fields += slot
    return type("ArgValues", (ctypes.Structure,), {"_fields_": fields})


class _Launchable:
    """What a Kernel and a KernelSet share: arguments set by name (or all at once), launch, and run on arrays.
    Subclasses set bundle, info, name, directive, attributes and _loaded, and name the runtime's functions that get
    them (_get), create their arguments (_create) and launch them (_launch)."""

    @property
    def _handle(self):
        """The runtime's kernel (set), got (so loaded: every kernel of a set) on first use; a driver failure raises
        here, and the next use retries. Threads racing here get the same one: the runtime loads it once."""
        if self._loaded is None:
            self._loaded = _lib.call_handle(self._get, self.bundle._handle, self.name.encode())
        return self._loaded

    def matches(self, directive, **attributes):
        """True if this is `directive` with these attribute values (an absent attribute counts as False)."""
        return self.directive == directive and all(
            self.attributes.get(key, False) == value for key, value in attributes.items())

    def _init_args(self, args):
        self.args = [(a["name"], a["type"]) for a in args]
        self._types = dict(self.args)
        self.roles = {a["name"]: a.get("role") for a in args}
        self.dtypes = {a["name"]: a.get("dtype") for a in args}
        # What callers set: not what the runtime fills at launch.
        self.settable = frozenset(a["name"] for a in args if a.get("role") not in RUNTIME_FILLED_ROLES)
        self._packing = None   # _values_struct(self.args, self.settable), made on the first launch

    def _fill(self, args, values):
        if values.keys() == self.settable:   # every argument, no other name: one runtime call
            if self._packing is None:
                self._packing = _values_struct(self.args, self.settable)
            packed = self._packing(**values)
            _lib.call("tessera_args_set_all", args, ctypes.byref(packed), len(self.args))
            return
        # By name, so that the runtime's messages name unknown and missing arguments.
        for name, value in values.items():
            setter, ctype = _SETTERS.get(self._types.get(name), _SETTERS["i64"])  # unknown names: the runtime names them
            _lib.call(setter, args, name.encode(), ctype(value))

    def _with_args(self, values, action):
        args = _lib.call_handle(self._create, self._handle)
        try:
            self._fill(args, values)
            return action(args)
        finally:
            _lib.library().tessera_args_destroy(args)

    def launch(self, stream=None, **values):
        """Sets every argument by name and launches on `stream` (a CUstream/hipStream_t as int, or None). Asynchronous."""
        self._with_args(values, lambda args: _lib.call(self._launch, self._handle, args, stream))

    def written(self):
        """The pointer arguments some kernel writes (role output or inout): what run copies back from the simulator."""
        return {name for name, role in self.roles.items() if role in ("output", "inout")}

    def run(self, stream=None, **values):
        """Launches with arrays for the pointer arguments and Python numbers for the others, on the bundle's device:
        torch tensors on its GPU (on torch's current stream of their device unless `stream` is given; asynchronous),
        numpy arrays on a simulator device (the spans they cover copied in, the launch run, the written ones copied
        back). An array's dtype must be its argument's (f16, bf16, f32, i32 ...). InputError before any device work."""
        from . import _arrays, _launch
        who = f"{self.name}.run"
        arrays = {}
        for name, value in values.items():
            if self._types.get(name) != "ptr":
                continue
            info = _arrays.describe(value, f"{who}: {name}")
            wanted = self.dtypes.get(name)
            if wanted and info.dtype != wanted:
                raise InputError(f"{who}: {name} has dtype {info.dtype}; the argument is {wanted}")
            arrays[name] = info
        device = self.bundle.device
        if device.backend == "sim":
            if arrays:
                _launch.runtime_device(who, list(arrays.items()), device, outputs=self.written() & arrays.keys())
            with _launch.SimMemory(device) as memory:
                pointers = {name: memory.put(info) for name, info in arrays.items()}
                self.launch(None, **{**values, **pointers})
                for name in self.written() & arrays.keys():
                    memory.get(arrays[name])
            return
        if any(info.kind != "torch" for info in arrays.values()):
            raise InputError(f"{who}: the bundle is on {device!r}: pass torch tensors on it (numpy arrays run on a "
                             "bundle of a 'sim:<target>' device)")
        if arrays:
            _launch.runtime_device(who, list(arrays.items()), device, aligned=())
            if stream is None:
                stream = _launch.stream_of(next(iter(arrays.values())).obj.device)
        self.launch(stream, **{**values, **{name: info.ptr for name, info in arrays.items()}})


class Kernel(_Launchable):
    """One kernel of a loaded bundle: its manifest entry, and launch by argument name. The runtime loads it through
    the driver (on CUDA a PTX JIT, up to half a second) on its first launch or grid, not with the bundle."""
    _get, _create, _launch = "tessera_kernel_get", "tessera_args_create", "tessera_launch"

    def __init__(self, bundle, info):
        self.bundle = bundle
        self._loaded = None
        self.info = info
        self.name = self.info["name"]
        self.directive = self.info.get("directive")
        self.attributes = self.info.get("attributes", {})
        self._init_args(self.info["args"])

    def grid(self, **values):
        """The grid tessera_launch would use for these argument values."""
        grid = (ctypes.c_uint32 * 3)()
        self._with_args(values, lambda args: _lib.call("tessera_launch_grid", self._handle, args, ctypes.byref(grid)))
        return tuple(grid)

    def __repr__(self):
        return f"Kernel({self.name!r}, {self.directive} {self.attributes})"


class KernelSet(_Launchable):
    """Kernels of a bundle launched together in the manifest's order with one argument set (manifest "kernel_sets"):
    each kernel takes the arguments it declares, by name; workspace arguments are device memory the runtime
    allocates per stream (zeroed first where the manifest says so), shared by the set's kernels, never set here."""
    _get, _create, _launch = "tessera_kernel_set_get", "tessera_set_args_create", "tessera_launch_set"

    def __init__(self, bundle, info):
        self.bundle = bundle
        self._loaded = None
        self.info = info
        self.name = info["name"]
        self.directive = info.get("directive")
        self.attributes = info.get("attributes", {})
        self.kernels = [bundle.kernels[name] for name in info["kernels"]]
        self._init_args(info["args"])   # the runtime's union of the kernels' arguments, in set_all order
        # A role some kernel gives an argument ("input" in one kernel may be "output" in another).
        for kernel in self.kernels:
            for name, role in kernel.roles.items():
                if role in ("output", "inout"):
                    self.roles[name] = role

    def reserve(self, stream=None, **values):
        """Makes the workspaces of `stream` (and the spare a new stream takes) large enough for a launch with these
        argument values, launching nothing: before capturing a CUDA graph of calls larger than any made so far."""
        self._with_args(values, lambda args: _lib.call("tessera_kernel_set_reserve", self._handle, args, stream))

    def __repr__(self):
        return f"KernelSet({self.name!r}, kernels={[k.name for k in self.kernels]})"


class Bundle:
    """A bundle loaded on a device (the runtime checks its target against the device first)."""

    def __init__(self, device, directory):
        self.device = device
        self.directory = Path(directory)
        self._handle = _lib.call_handle("tessera_bundle_load", device._handle, str(self.directory).encode())
        self.target = _lib.call_str("tessera_bundle_target", self._handle)
        # Manifest entries only: the driver loads a kernel when it is first launched.
        count = _lib.call_int("tessera_bundle_kernel_count", self._handle)
        infos = [json.loads(_lib.call_str("tessera_bundle_kernel_json", self._handle, i)) for i in range(count)]
        self.kernels = {info["name"]: Kernel(self, info) for info in infos}
        count = _lib.call_int("tessera_bundle_kernel_set_count", self._handle)
        infos = [json.loads(_lib.call_str("tessera_bundle_kernel_set_json", self._handle, i)) for i in range(count)]
        self.kernel_sets = {info["name"]: KernelSet(self, info) for info in infos}
        self._remembered = {}

    def kernel(self, name):
        """The kernel called `name`; KernelNotFoundError (from the runtime, listing the kernels) otherwise."""
        if name not in self.kernels:
            _lib.call_handle("tessera_kernel_get", self._handle, name.encode())
        return self.kernels[name]

    def kernel_set(self, name):
        """The kernel set called `name`; KernelNotFoundError (from the runtime, listing the sets) otherwise."""
        if name not in self.kernel_sets:
            _lib.call_handle("tessera_kernel_set_get", self._handle, name.encode())
        return self.kernel_sets[name]

    def find(self, directive, **attributes):
        """The first kernel that is `directive` with these attributes, or None."""
        return next((k for k in self.kernels.values() if k.matches(directive, **attributes)), None)

    def find_set(self, directive, **attributes):
        """The first kernel set that is `directive` with these attributes, or None."""
        return next((s for s in self.kernel_sets.values() if s.matches(directive, **attributes)), None)

    def remember(self, key, choose):
        """choose(), computed once per key for this bundle: an op's kernel choice for one variant (the bundle's
        kernels never change). An exception is not remembered: the next call chooses, and raises, again."""
        try:
            return self._remembered[key]
        except KeyError:
            chosen = self._remembered[key] = choose()
            return chosen

    def __repr__(self):
        return f"Bundle({str(self.directory)!r}, target={self.target!r}, kernels={list(self.kernels)})"


class Device:
    """An opened runtime device. Device(...) always opens a new one; tessera.device(spec) returns a cached one."""

    def __init__(self, backend="cuda", ordinal=0):
        self.spec = backend
        self.ordinal = ordinal
        self._handle = _lib.call_handle("tessera_device_open", backend.encode(), ordinal)
        self.arch = _lib.call_str("tessera_device_arch", self._handle)
        self.backend = _lib.call_str("tessera_device_backend", self._handle)
        self._bundles = {}
        self._found = {}   # search path -> the bundle found there for this device (the default bundle)
        self._lock = threading.Lock()

    def bundle(self, directory=None):
        """The bundle in `directory` (default: the one found for this device's arch, searched once per search path:
        every op call asks for it), loaded once per device."""
        if directory is None:
            search = _paths.search_path()
            found = self._found.get(search)
            if found is None:
                found = self._found[search] = self.bundle(_paths.find_bundle(self.arch, simulated=self.backend == "sim"))
            return found
        directory = Path(directory)
        key = directory.resolve()
        with self._lock:
            if key not in self._bundles:
                self._bundles[key] = Bundle(self, directory)
            return self._bundles[key]

    # Memory: device pointers and host addresses are ints.
    def malloc(self, nbytes):
        return _lib.call_handle("tessera_malloc", self._handle, nbytes)

    def free(self, ptr):
        _lib.call("tessera_free", self._handle, ptr)

    def memcpy_htod(self, dst, src, nbytes):
        _lib.call("tessera_memcpy_htod", self._handle, dst, src, nbytes)

    def memcpy_dtoh(self, dst, src, nbytes):
        _lib.call("tessera_memcpy_dtoh", self._handle, dst, src, nbytes)

    def memset(self, dst, value, nbytes):
        _lib.call("tessera_memset", self._handle, dst, value, nbytes)

    def synchronize(self):
        _lib.call("tessera_synchronize", self._handle)

    def __repr__(self):
        return f"Device({self.spec!r}, ordinal={self.ordinal}, arch={self.arch!r})"


def parse_device(spec):
    """'cuda', 'cuda:1', 'hip:0', 'sim', 'sim:gfx942' -> (backend string, ordinal). For sim the text
    after ':' is the simulated chip, not an ordinal."""
    kind, _, rest = spec.partition(":")
    if kind == "sim" or not rest:
        return spec, 0
    if not rest.isdigit():
        raise InputError(f"device {spec!r}: expected '{kind}' or '{kind}:<ordinal>'")
    return kind, int(rest)


_devices = {}
_devices_lock = threading.Lock()


def device(spec="cuda"):
    """The cached Device for a spec such as 'cuda', 'cuda:1' or 'sim:gfx942' (a Device is returned as is)."""
    if isinstance(spec, Device):
        return spec
    key = parse_device(spec)
    with _devices_lock:
        if key not in _devices:
            _devices[key] = Device(*key)
        return _devices[key]
