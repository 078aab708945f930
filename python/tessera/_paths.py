"""Where the runtime library and the bundles are: TESSERA_HOME, the dist/ holding this package, or a source tree's build/ and dist/."""
import os
import re
import shutil
from pathlib import Path

from ._errors import BundleNotFoundError, LibraryNotFoundError

RUNTIME_LIBRARY = "libtessera_runtime.so"
_PACKAGE_DIR = Path(__file__).resolve().parent


def homes():
    """Candidate roots in search order; a root may hold lib/libtessera_runtime.so and bundles/<target>/.

    TESSERA_HOME, when set, is the only root. Otherwise: TESSERA_BUILD_DIR when set (a build
    tree), the package's own _dist/ (a wheel from scripts/make_dist.sh carries the runtime and
    the bundles there), the folder two levels above the package (dist/ for dist/python/tessera;
    the checkout for python/tessera), then the checkout's build/ and dist/.
    """
    env = os.environ.get("TESSERA_HOME")
    if env:
        return [Path(env)]
    up = _PACKAGE_DIR.parent.parent
    build = os.environ.get("TESSERA_BUILD_DIR")
    return ([Path(build)] if build else []) + [_PACKAGE_DIR / "_dist", up, up / "build", up / "dist"]


def runtime_library():
    """Path of libtessera_runtime.so: the first root holding lib/libtessera_runtime.so."""
    tried = [root / "lib" / RUNTIME_LIBRARY for root in homes()]
    for path in tried:
        if path.is_file():
            return path
    hint = "TESSERA_HOME is set" if os.environ.get("TESSERA_HOME") else \
        "set TESSERA_HOME to a dist/ folder or a build tree"
    raise LibraryNotFoundError(f"{RUNTIME_LIBRARY} not found (tried {', '.join(map(str, tried))}; {hint})")


def search_path():
    """The environment variables the bundle search reads, as a key: the same key finds the same bundle while the
    folders stay as they are."""
    return tuple(os.environ.get(name) for name in ("TESSERA_HOME", "TESSERA_BUILD_DIR", "TESSERA_BUNDLE_PATH"))


def bundle_dirs():
    """Folders holding one bundle per target (<dir>/<target>/manifest.json): TESSERA_BUNDLE_PATH
    (':'-separated) first, then <root>/bundles of every root."""
    extra = [Path(p) for p in os.environ.get("TESSERA_BUNDLE_PATH", "").split(os.pathsep) if p]
    return extra + [root / "bundles" for root in homes()]


def _sm_version(target):
    match = re.fullmatch(r"sm_(\d+)", target)
    return int(match.group(1)) if match else None


def compatible_targets(arch, available, simulated=False):
    """Bundle targets a device of `arch` can load, best first: for NVIDIA its arch-specific variant
    (sm_90a on sm_90: wgmma/TMA kernels; not on the simulator, which has neither), then the arch itself and
    older plain sm_XY (PTX is JIT-compiled forward). AMD code objects are chip-exact."""
    order = [arch]
    version = _sm_version(arch)
    if version is not None:
        if not simulated:
            order.insert(0, arch + "a")
        older = [t for t in available if _sm_version(t) is not None and _sm_version(t) < version]
        order += sorted(older, key=_sm_version, reverse=True)
    return order


def available_targets():
    """{target: bundle dir} over the search path; an earlier folder wins."""
    found = {}
    for folder in bundle_dirs():
        if folder.is_dir():
            for sub in sorted(folder.iterdir()):
                if (sub / "manifest.json").is_file():
                    found.setdefault(sub.name, sub)
    return found


def later_bundles(bundle_dir):
    """The other bundles of bundle_dir's target later in the search path (a variant the first lacks may be in one:
    dist's test bundles)."""
    first = Path(bundle_dir).resolve()
    target = first.name
    return [folder / target for folder in bundle_dirs()
            if (folder / target / "manifest.json").is_file() and (folder / target).resolve() != first]


def find_bundle(arch, simulated=False):
    """The bundle directory for a device of chip `arch` (for example 'sm_90', 'gfx942'): the best
    compatible target first, then the earliest folder of the search path. `simulated`: for the simulator."""
    found = available_targets()
    for target in compatible_targets(arch, list(found), simulated):
        if target in found:
            return found[target]
    raise BundleNotFoundError(
        f"no bundle for target {arch} (bundles found for: {', '.join(sorted(found)) or 'none'}; searched "
        f"{', '.join(map(str, bundle_dirs()))}; build one with scripts/make_dist.sh or set "
        "TESSERA_HOME / TESSERA_BUNDLE_PATH)")


COMPILER = "tessera-compile"


def compiler():
    """Path of tessera-compile, or None: TESSERA_COMPILER when set (the only candidate then), else bin/ of every
    root (a build tree has one), else PATH."""
    env = os.environ.get("TESSERA_COMPILER")
    if env:
        return Path(env) if Path(env).is_file() else None
    for root in homes():
        path = root / "bin" / COMPILER
        if path.is_file():
            return path
    found = shutil.which(COMPILER)
    return Path(found) if found else None
