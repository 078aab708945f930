"""pytest setup: the tessera package next to the tests comes first on sys.path; the exact-fp32-matmul fixture of the GPU references."""
import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# No kernels on demand unless a test asks for them (test_ondemand.py): a missing variant raises, naming its directive,
# and nothing is written to the user's cache.
os.environ["TESSERA_COMPILER"] = str(Path(tempfile.gettempdir()) / "tessera-tests-no-compiler")
os.environ["TESSERA_CACHE_DIR"] = tempfile.mkdtemp(prefix="tessera-tests-cache-")


@pytest.fixture(scope="module")
def exact_fp32_matmul():
    """The same-precision reference is fp32 matmul: no TF32 and no reduced-precision reductions."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved[0]
    torch.set_float32_matmul_precision(saved[1])


