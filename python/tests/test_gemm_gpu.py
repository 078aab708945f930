"""GEMM on the GPU (torch CUDA tensors) against float64: sizes from {1, 17, 64, 255, 1000, 4096}, f16/bf16, poisoned outputs; skipped without a CUDA GPU."""
import random

import pytest

import support
from support import torch
import tessera

pytestmark = [support.requires_cuda, pytest.mark.usefixtures("exact_fp32_matmul")]

SIZES = (1, 17, 64, 255, 1000, 4096)
# A representative sample of the 216 (M, N, K): every size in every position, asymmetric shapes,
# the all-ones case and the 4096 cube once.
SHAPES = [
    (1, 1, 1), (4096, 4096, 4096),
    (17, 64, 255), (64, 17, 1000), (255, 1000, 17), (1000, 255, 64), (1, 4096, 64), (4096, 1, 255),
    (64, 255, 1), (17, 1, 4096), (1, 17, 17), (255, 255, 255), (1000, 1000, 1000), (4096, 17, 64),
    (17, 4096, 1000), (64, 64, 4096), (1000, 1, 17), (255, 4096, 1), (4096, 255, 1000), (1, 1000, 255),
    (17, 17, 1), (1000, 64, 4096), (255, 17, 64), (4096, 1000, 17), (64, 1000, 1),
]
assert all({s[i] for s in SHAPES} == set(SIZES) for i in range(3))


class Inputs:
    """Fresh random inputs with their seed (reported on failure)."""

    def __init__(self):
        self.seed = random.randrange(2**31)
        self.gen = torch.Generator(device="cuda").manual_seed(self.seed)

    def __call__(self, shape, dtype):
        return torch.randn(shape, generator=self.gen, device="cuda").to(support.torch_dtype(dtype))

    def b(self, K, N, dtype, layout):
        return self((N, K), dtype).t() if layout == "nt" else self((K, N), dtype)


def check(out, a, b):
    """support.tolerance_report for a GEMM output: float64 reference and fp32-accumulated same-precision result."""
    a64, b64 = a.double(), b.double()
    same = (a.float() @ b.float()).to(out.dtype).double()
    return support.tolerance_report(out.double(), a64 @ b64, same, a64.abs() @ b64.abs())


def poisoned(M, N, dtype):
    return torch.full((M, N), float("nan"), dtype=support.torch_dtype(dtype), device="cuda")


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("out_kind", ["same", "f32"])
@pytest.mark.parametrize("dtype", support.DTYPES)
@pytest.mark.parametrize("M,N,K", SHAPES, ids=lambda s: str(s))
def test_gemm_matches_float64(M, N, K, dtype, out_kind, layout):
    rand = Inputs()
    a, b = rand((M, K), dtype), rand.b(K, N, dtype, layout)
    out = poisoned(M, N, dtype if out_kind == "same" else "f32")
    assert tessera.gemm(a, b, out=out) is out
    torch.cuda.synchronize()
    problem = check(out, a, b)
    assert problem is None, f"{M}x{N}x{K} {dtype}->{out.dtype} {layout} seed {rand.seed}: {problem}"


def test_new_output_in_the_input_dtype_or_float32():
    rand = Inputs()
    a, b = rand((255, 64), "bf16"), rand((64, 17), "bf16")
    c = tessera.gemm(a, b)
    assert (c.dtype, c.shape, c.device) == (torch.bfloat16, (255, 17), a.device)
    c32 = tessera.gemm(a, b, torch.float32)
    torch.cuda.synchronize()
    assert c32.dtype == torch.float32
    assert check(c, a, b) is None and check(c32, a, b) is None


def test_leading_dimensions_and_untouched_gaps():
    rand = Inputs()
    M, N, K = 255, 1000, 64
    a = rand((M, K + 40), "f16")[:, :K]             # lda = 104 (a 16-byte multiple)
    b = rand((K, N + 8), "f16")[:, :N]              # ldb = 1008
    wide = poisoned(M, N + 24, "f32")
    out = wide[:, :N]                               # ldc = 1024
    tessera.gemm(a, b, out=out)
    torch.cuda.synchronize()
    assert check(out, a, b) is None
    assert wide[:, N:].isnan().all(), "the kernel wrote past N"


def test_odd_leading_dimensions():
    rand = Inputs()
    a = rand((64, 255), "f16")[:, :17]               # lda 255: rows not 16-byte aligned (scalar path)
    bt = rand((33, 255), "f16")[:, :17]              # b = bt.T, ldb 255
    out = tessera.gemm(a, bt.t(), torch.float32)
    torch.cuda.synchronize()
    assert check(out, a, bt.t()) is None


def test_runs_on_the_current_stream():
    """On a side stream that is still busy, the GEMM must wait for the copy queued before it."""
    rand = Inputs()
    a_new, b = rand((1000, 4096), "f16"), rand((4096, 1000), "f16")
    a = rand((1000, 4096), "f16")
    out = poisoned(1000, 1000, "f32")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)               # ~25 ms of GPU time before the copy
        a.copy_(a_new)
        tessera.gemm(a, b, out=out)
    side.synchronize()
    assert check(out, a_new, b) is None, "the GEMM did not run on torch's current stream"


def test_second_call_with_new_inputs():
    rand = Inputs()
    out = poisoned(64, 255, "bf16")
    for _ in range(2):
        a, b = rand((64, 1000), "bf16"), rand((1000, 255), "bf16")
        tessera.gemm(a, b, out=out)
        torch.cuda.synchronize()
        assert check(out, a, b) is None


def test_misaligned_pointers_are_rejected():
    rand = Inputs()
    a, b = rand((64, 65), "f16"), rand((64, 64), "f16")
    with pytest.raises(tessera.InputError, match=r"a.data_ptr\(\) = 0x[0-9a-f]+ is not 16-byte aligned"):
        tessera.gemm(a[:, 1:], b)
    with pytest.raises(tessera.InputError, match=r"out.data_ptr\(\) = 0x[0-9a-f]+ is not 16-byte aligned"):
        tessera.gemm(a[:, :64], b, out=poisoned(64, 65, "f16")[:, 1:])


def test_tensors_on_one_device_and_device_argument():
    rand = Inputs()
    a, b = rand((17, 64), "f16"), rand((64, 17), "f16")
    with pytest.raises(tessera.InputError, match="tensors are on cpu|tensors on different devices"):
        tessera.gemm(a, b.cpu())
    with pytest.raises(tessera.InputError, match=r"device='sim:gfx942' but the tensors are on cuda:0"):
        tessera.gemm(a, b, device="sim:gfx942")


def test_gfx942_bundle_is_refused_on_this_gpu():
    """Loading a bundle for another chip fails before any code object is read, naming both chips."""
    targets = tessera.available_targets()
    if "gfx942" not in targets:
        pytest.skip("no gfx942 bundle in the bundle search path")
    dev = tessera.device("cuda")
    with pytest.raises(tessera.TargetMismatchError, match=rf"bundle target gfx942 does not match device {dev.arch}"):
        dev.bundle(targets["gfx942"])


def test_inputs_that_require_grad_are_refused_not_detached():
    """gemm has no backward: a call autograd would record raises; under torch.no_grad() or detached it runs."""
    a = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    b = torch.randn(32, 48, device="cuda", dtype=torch.float16)
    with pytest.raises(tessera.InputError, match=r"tessera\.gemm: b requires grad, but tessera\.gemm has no backward"):
        tessera.gemm(a, b.clone().requires_grad_())
    with torch.no_grad():
        c = tessera.gemm(a.clone().requires_grad_(), b)
    assert torch.equal(c, tessera.gemm(a, b)) and not c.requires_grad
