"""Kernel sets on the GPU: the test-only colsum pair (test/Inputs/colsum-kernel-set.mlir) on torch CUDA tensors, its
zeroed f32 workspace per stream, reused and grown, on torch's current stream, and captured in a CUDA graph replayed
with new inputs. The bundle: dist's test-bundles/colsum/<target>, else compiled by a build's tessera-compile."""
import subprocess

import pytest

import support
from support import torch
import tessera

pytestmark = support.requires_cuda

SOURCE = support.REPO / "test" / "Inputs" / "colsum-kernel-set.mlir"


def bundle_dir(arch, tmp_path_factory):
    """A colsum bundle this GPU runs: PTX for its sm_XY or an older one (JIT-compiled forward)."""
    for root in (support.REPO / "test-bundles" / "colsum", support.REPO / "dist" / "test-bundles" / "colsum"):
        number = lambda name: int(name[3:])   # noqa: E731 ("sm_90" -> 90)
        found = sorted((d for d in root.glob("sm_*") if d.name[3:].isdigit() and number(d.name) <= number(arch)),
                       key=lambda d: number(d.name), reverse=True) if root.is_dir() else []
        if found:
            return found[0]
    compiler = support.compiler_path()
    if compiler is None:
        pytest.skip("no colsum test bundle (scripts/make_dist.sh writes dist/test-bundles) and no tessera-compile")
    out = tmp_path_factory.mktemp("colsum") / arch
    subprocess.run([str(compiler), str(SOURCE), f"--target={arch}", "-o", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def colsum(tmp_path_factory):
    device = tessera.device("cuda")
    return device.bundle(bundle_dir(device.arch, tmp_path_factory)).kernel_set("colsum")


def small_ints(M, N, ld=None, generator=None):
    """(M, ld) small integers as f32 (sums exact), viewed as (M, N)."""
    full = torch.randint(-8, 9, (M, ld or N), device="cuda", generator=generator).float()
    return full, full[:, :N]


def expected(x, scale):
    return (x.double().sum(dim=0) * scale).float()


def run(colsum, full, x, out, scale):
    M, N = x.shape
    colsum.run(x=full, out=out, M=M, N=N, ld=full.stride(0), scale=scale)


def test_column_sums_exactly_then_reused_and_grown(colsum):
    for M, N, ld in ((1, 1, 1), (3, 17, 17), (37, 100, 103), (1000, 4097, 4097), (5, 64, 64), (2, 3, 3)):
        full, x = small_ints(M, N, ld)
        out = torch.full((N,), float("nan"), device="cuda")
        run(colsum, full, x, out, 0.5)
        torch.testing.assert_close(out, expected(x, 0.5), rtol=0, atol=0, msg=f"M={M} N={N} ld={ld}")


def test_current_stream_and_two_busy_streams(colsum):
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    cases = [small_ints(2000, 3000) for _ in streams]
    outs = [torch.full((3000,), float("nan"), device="cuda") for _ in streams]
    for _ in range(3):   # back to back on both streams, no synchronisation in between
        for stream, (full, x), out in zip(streams, cases, outs):
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                run(colsum, full, x, out, 1.0)
    torch.cuda.synchronize()
    for (full, x), out in zip(cases, outs):
        torch.testing.assert_close(out, expected(x, 1.0), rtol=0, atol=0)


def test_cuda_graph_capture_and_replay_with_new_inputs(colsum):
    full, x = small_ints(300, 1000)
    out = torch.full((1000,), float("nan"), device="cuda")
    # torch's recipe: warm up on a side stream, then capture (on a stream of torch's own).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run(colsum, full, x, out, 2.0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(colsum, full, x, out, 2.0)
    for _ in range(3):   # every replay zeroes the workspace again, or the sums would pile up
        new_full, _ = small_ints(300, 1000)
        full.copy_(new_full)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, expected(x, 2.0), rtol=0, atol=0)


def test_a_capture_needing_a_larger_workspace_says_to_run_or_reserve_first(colsum):
    full, x = small_ints(4, 1 << 20)   # larger than any call before
    out = torch.empty(1 << 20, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(tessera.ArgumentError, match="is capturing a CUDA graph.*run the call once before capturing"):
        with torch.cuda.graph(graph):
            run(colsum, full, x, out, 1.0)
    colsum.reserve(x=full.data_ptr(), out=out.data_ptr(), M=4, N=1 << 20, ld=1 << 20, scale=1.0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(colsum, full, x, out, 1.0)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, expected(x, 1.0), rtol=0, atol=0)
