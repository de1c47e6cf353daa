"""A check shared by the tests of instances built along two paths."""

from __future__ import annotations

from models.core.instance import Experts


def assert_same_experts(got: Experts, want: Experts) -> None:
    """The same arrays byte for byte (dtype, read-only, contiguous) and the same extent,
    classes and value range, of the same Python types."""
    assert type(got) is type(want) is Experts
    for a, b in ((got.expert, want.expert), (got.cls, want.cls), (got.value, want.value)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
        assert not a.flags.writeable and a.flags.c_contiguous
    assert (got.size, got.n_classes, got.low, got.high) == (
        want.size,
        want.n_classes,
        want.low,
        want.high,
    )
    assert type(got.size) is int and type(got.n_classes) is int
    assert type(got.low) is float and type(got.high) is float
