"""Devices, bundles and kernels over the runtime: one Device per backend string (cached), bundles cached per directory."""
import ctypes
import json
import sys
import threading
from pathlib import Path

from . import _lib, _paths
from ._errors import InputError

# Roles of the arguments the runtime fills at launch (docs/bundle.md): callers never set them.
RUNTIME_FILLED_ROLES = frozenset({"tensor_map", "tile_counter"})

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


class Kernel:
    """One kernel of a loaded bundle: its manifest entry, and launch by argument name. The runtime loads it through
    the driver (on CUDA a PTX JIT, up to half a second) on its first launch or grid, not with the bundle."""

    def __init__(self, bundle, info):
        self.bundle = bundle
        self._loaded = None
        self.info = info
        self.name = self.info["name"]
        self.directive = self.info.get("directive")
        self.attributes = self.info.get("attributes", {})
        self.args = [(a["name"], a["type"]) for a in self.info["args"]]
        self._types = dict(self.args)
        # What callers set: not what the runtime fills at launch.
        self.settable = frozenset(a["name"] for a in self.info["args"] if a.get("role") not in RUNTIME_FILLED_ROLES)
        self._packing = None   # _values_struct(self.args, self.settable), made on the first launch

    @property
    def _handle(self):
        """The runtime's kernel, got (so loaded) on first use; a driver failure raises here, and the next use retries.
        Threads racing here get the same kernel: the runtime loads it once."""
        if self._loaded is None:
            self._loaded = _lib.call_handle("tessera_kernel_get", self.bundle._handle, self.name.encode())
        return self._loaded

    def matches(self, directive, **attributes):
        """True if this kernel is `directive` with these attribute values (an absent attribute counts as False)."""
        return self.directive == directive and all(
            self.attributes.get(key, False) == value for key, value in attributes.items())

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
        args = _lib.call_handle("tessera_args_create", self._handle)
        try:
            self._fill(args, values)
            return action(args)
        finally:
            _lib.library().tessera_args_destroy(args)

    def launch(self, stream=None, **values):
        """Sets every argument by name and launches on `stream` (a CUstream/hipStream_t as int, or None). Asynchronous."""
        self._with_args(values, lambda args: _lib.call("tessera_launch", self._handle, args, stream))

    def grid(self, **values):
        """The grid tessera_launch would use for these argument values."""
        grid = (ctypes.c_uint32 * 3)()
        self._with_args(values, lambda args: _lib.call("tessera_launch_grid", self._handle, args, ctypes.byref(grid)))
        return tuple(grid)

    def __repr__(self):
        return f"Kernel({self.name!r}, {self.directive} {self.attributes})"


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
        self._remembered = {}

    def kernel(self, name):
        """The kernel called `name`; KernelNotFoundError (from the runtime, listing the kernels) otherwise."""
        if name not in self.kernels:
            _lib.call_handle("tessera_kernel_get", self._handle, name.encode())
        return self.kernels[name]

    def find(self, directive, **attributes):
        """The first kernel that is `directive` with these attributes, or None."""
        return next((k for k in self.kernels.values() if k.matches(directive, **attributes)), None)

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
