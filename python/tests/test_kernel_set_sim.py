"""Kernel sets on the simulator: the test-only colsum pair (test/Inputs/colsum-kernel-set.mlir) compiled for gfx942 and
sm_90, launched by argument name on numpy arrays; its zeroed f32 workspace shared by both kernels, reused and grown."""
import subprocess

import numpy as np
import pytest

import support
import tessera

SOURCE = support.REPO / "test" / "Inputs" / "colsum-kernel-set.mlir"
TARGETS = ("gfx942", "sm_90")


@pytest.fixture(scope="module", params=TARGETS)
def colsum(request, tmp_path_factory):
    """The colsum kernel set on `sim:<target>`, from a bundle compiled by the build's tessera-compile."""
    compiler = support.compiler_path()
    if compiler is None:
        pytest.skip("no tessera-compile in a build tree (TESSERA_BUILD_DIR or build*/) to compile the test kernels")
    target = request.param
    out = tmp_path_factory.mktemp("colsum") / target
    subprocess.run([str(compiler), str(SOURCE), f"--target={target}", "-o", str(out)], check=True,
                   capture_output=True)
    device = support.sim_device(target)
    return device.bundle(out).kernel_set("colsum")


def random_input(rng, M, N, ld=None):
    """Small integers as f32 (every sum exact), in an (M, ld) array viewed as (M, N): padding between rows."""
    ld = ld or N
    full = rng.integers(-8, 9, size=(M, ld)).astype(np.float32)
    return full, full[:, :N]


def expected(x, scale):
    return (x.astype(np.float64).sum(axis=0) * scale).astype(np.float32)


def test_the_set_is_in_the_manifest_in_launch_order(colsum):
    assert [k.name for k in colsum.kernels] == ["colsum_accumulate", "colsum_finish"]
    assert [name for name, _ in colsum.args] == ["x", "acc", "M", "N", "ld", "out", "scale"]
    assert colsum.roles["acc"] == "workspace"
    assert "acc" not in colsum.settable
    assert colsum.bundle.find_set("colsum") is colsum


def test_column_sums_exactly(colsum):
    rng = np.random.default_rng()
    for M, N, ld in ((1, 1, 1), (3, 17, 17), (37, 100, 103), (5, 130, 130)):
        full, x = random_input(rng, M, N, ld)
        out = np.full(N, np.nan, dtype=np.float32)
        colsum.run(x=full, out=out, M=M, N=N, ld=ld, scale=0.5)
        np.testing.assert_array_equal(out, expected(x, 0.5), err_msg=f"M={M} N={N} ld={ld}")


def test_reused_workspace_starts_at_zero_every_call(colsum):
    # The same workspace serves every call; without the zeroing the second call would add the first one's sums.
    rng = np.random.default_rng()
    for _ in range(3):
        full, x = random_input(rng, 9, 40)
        out = np.full(40, np.nan, dtype=np.float32)
        colsum.run(x=full, out=out, M=9, N=40, ld=40, scale=1.0)
        np.testing.assert_array_equal(out, expected(x, 1.0))


def test_larger_calls_grow_the_workspace_and_smaller_ones_reuse_it(colsum):
    rng = np.random.default_rng()
    for N in (8, 1000, 64):
        full, x = random_input(rng, 4, N)
        out = np.full(N, np.nan, dtype=np.float32)
        colsum.run(x=full, out=out, M=4, N=N, ld=N, scale=2.0)
        np.testing.assert_array_equal(out, expected(x, 2.0), err_msg=f"N={N}")


def test_empty_columns_launch_nothing(colsum):
    out = np.full(4, 7.0, dtype=np.float32)
    colsum.run(x=np.zeros((2, 4), np.float32), out=out, M=2, N=0, ld=4, scale=1.0)
    assert (out == 7.0).all()


def test_launch_by_name_with_pointers(colsum):
    device = colsum.bundle.device
    x = np.arange(6, dtype=np.float32)
    with tessera._launch.SimMemory(device) as memory:
        px = memory.alloc(x.nbytes)
        pout = memory.alloc(12)
        device.memcpy_htod(px, x.ctypes.data, x.nbytes)
        colsum.launch(x=px, out=pout, M=2, N=3, ld=3, scale=1.0)
        out = np.empty(3, np.float32)
        device.memcpy_dtoh(out.ctypes.data, pout, 12)
    np.testing.assert_array_equal(out, [3, 5, 7])


def test_errors(colsum):
    x, out = np.zeros((2, 4), np.float32), np.zeros(4, np.float32)
    with pytest.raises(tessera.ArgumentError, match="argument 'acc' of kernel set colsum is a workspace the runtime "
                                                    "allocates for the launch; it is not set"):
        colsum.launch(x=1, out=1, acc=1, M=2, N=4, ld=4, scale=1.0)
    with pytest.raises(tessera.ArgumentError, match="kernel set colsum: arguments not set: scale"):
        colsum.run(x=x, out=out, M=2, N=4, ld=4)
    with pytest.raises(tessera.InputError, match="colsum.run: x has dtype f16; the argument is f32"):
        colsum.run(x=x.astype(np.float16), out=out, M=2, N=4, ld=4, scale=1.0)
    with pytest.raises(tessera.InputError, match="colsum.run: out is a read-only numpy array"):
        out.flags.writeable = False
        colsum.run(x=x, out=out, M=2, N=4, ld=4, scale=1.0)
    with pytest.raises(tessera.ArgumentError, match="kernel colsum_accumulate shares the workspace 'acc' with kernel "
                                                    "set 'colsum': launch the set"):
        colsum.kernels[0].launch(x=1, M=2, N=4, ld=4)
    with pytest.raises(tessera.KernelNotFoundError, match="has no kernel set 'colsums' \\(kernel sets: colsum\\)"):
        colsum.bundle.kernel_set("colsums")
