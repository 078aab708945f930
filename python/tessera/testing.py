"""The tolerance rule of CORRECTNESS.md for checking kernel outputs against float64, shared by the tests and the benchmarks."""
from typing import NamedTuple


class Tolerance(NamedTuple):
    ok: bool
    failing: int            # elements out of tolerance, NaN included
    nan: int                # NaN elements (poison never overwritten, or computed)
    max_error: float        # max |out - ref| (NaN if any element is NaN)
    reference_error: float  # max |same - ref| of the same-precision implementation

    def __str__(self):
        if self.ok:
            return f"ok (max error {self.max_error:.3g}, same-precision {self.reference_error:.3g})"
        return (f"{self.failing} elements out of tolerance ({self.nan} NaN); max error {self.max_error:.3g}, "
                f"same-precision max error {self.reference_error:.3g}")


def check_tolerance(out64, ref64, same64, scale64, factor=2.0, floor=1e-5):
    """Elementwise |out - ref| <= factor * max|same - ref| + floor * scale, on float64 numpy arrays or torch tensors.

    ref64: the float64 result from the same (rounded) inputs; same64: a straightforward
    same-precision implementation (fp32 accumulation, rounded to the output dtype); scale64: the
    magnitude the floor scales with (|A|·|B| for a GEMM: it grows with K like any accumulation
    error). factor is 2 for forward kernels, 3 for backward. NaN never passes.
    """
    reference_error = float(abs(same64 - ref64).max()) if same64.shape[0] * same64.shape[-1] else 0.0
    err = abs(out64 - ref64)
    bad = ~(err <= factor * reference_error + floor * scale64)
    failing, nan = int(bad.sum()), int((out64 != out64).sum())
    max_error = float(err.max()) if err.shape[0] * err.shape[-1] else 0.0
    return Tolerance(failing == 0, failing, nan, max_error, reference_error)
