"""ECOC code matrices (one-per-class, dense, exhaustive, random) and their decoders."""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence

import numpy as np

from models.core.params import InvalidParameter

__all__ = [
    "MAX_EXHAUSTIVE",
    "MAX_LENGTH",
    "columns_distinct",
    "default_length",
    "dense_code",
    "exhaustive_code",
    "hamming_decode",
    "hamming_distances",
    "loss_decode",
    "losses",
    "min_row_distance",
    "one_per_class_code",
    "random_code",
    "seeded_random_code",
]

#: The exhaustive code has 2^(k-1) - 1 columns; S3 uses a column subset from k = 8 on.
MAX_EXHAUSTIVE = 11
#: Limits that keep code search and decoding cheap: classes, and columns of any code.
MAX_LENGTH = 4096


# -- codes -------------------------------------------------------------------------------------


def one_per_class_code(k: int) -> np.ndarray:
    """M = I_k: column c separates class c from the rest; rows are 2 apart."""
    return np.eye(k, dtype=np.uint8)


def dense_code(k: int) -> np.ndarray:
    """Row c is c in ceil(log2 k) bits, most significant first; rows may be 1 apart (S3)."""
    length = max(1, (k - 1).bit_length())
    shifts = np.arange(length - 1, -1, -1)
    return ((np.arange(k)[:, None] >> shifts) & 1).astype(np.uint8)


def exhaustive_code(k: int) -> np.ndarray:
    """DB95's exhaustive code: 2^(k-1) - 1 columns, rows 2^(k-2) apart.

    Row 1 is all ones; for i >= 2, entry (i, l) is floor(l / 2^(k-i)) mod 2.

    >>> exhaustive_code(3).tolist()
    [[1, 1, 1], [0, 0, 1], [0, 1, 0]]
    """
    if not 2 <= k <= MAX_EXHAUSTIVE:
        raise InvalidParameter("k", k, f"2 to {MAX_EXHAUSTIVE} classes for the exhaustive code")
    col = np.arange(2 ** (k - 1) - 1)
    shifts = np.arange(k - 2, -1, -1)  # 2^(k-i) for i = 2..k
    rows = (col[None, :] >> shifts[:, None]) & 1
    return np.vstack([np.ones((1, col.size), dtype=np.uint8), rows.astype(np.uint8)])


def default_length(k: int) -> int:
    """min(2^(k-1) - 1, max(ceil(10 log2 k), k)): DB95's range, capped by what exists."""
    return min(2 ** (k - 1) - 1, max(math.ceil(10 * math.log2(k)), k), MAX_LENGTH)


def random_code(k: int, length: int, rng: np.random.Generator, n_tries: int = 20) -> np.ndarray:
    """The best of ``n_tries`` random codes by minimum row distance (the first among equals).

    Entries are Bernoulli(1/2); a column that is constant, or equal or complementary to an
    earlier one, is drawn again, so at most 2^(k-1) - 1 columns exist.

    >>> code = random_code(4, 6, np.random.default_rng(1))
    >>> code.shape, min_row_distance(code) >= 2
    ((4, 6), True)
    """
    most = 2 ** (k - 1) - 1
    if not 1 <= length <= most:
        raise InvalidParameter(
            "length", length, f"1 to 2^(k-1) - 1 = {most} distinct columns for {k} classes"
        )
    best, best_d = None, -1
    for _ in range(n_tries):
        code = _random_columns(k, length, rng)
        d = min_row_distance(code)
        if d > best_d:
            best, best_d = code, d
    assert best is not None
    return best


@functools.lru_cache(maxsize=64)
def seeded_random_code(k: int, length: int, seed: int, n_tries: int) -> np.ndarray:
    """random_code from a seed, kept: clones and state imports rebuild the learner."""
    code = random_code(k, length, np.random.default_rng(seed), n_tries)
    code.flags.writeable = False
    return code


def _random_columns(k: int, length: int, rng: np.random.Generator) -> np.ndarray:
    cols: list[np.ndarray] = []
    seen: set[bytes] = set()
    while len(cols) < length:
        for col in rng.integers(0, 2, size=(length - len(cols), k), dtype=np.uint8):
            if col.min() == col.max():
                continue
            key = hashlib.blake2b((col ^ (1 - col[0])).tobytes(), digest_size=16).digest()
            if key not in seen:
                seen.add(key)
                cols.append(col)
    return np.array(cols, dtype=np.uint8).T.copy()


def min_row_distance(code: np.ndarray) -> int:
    """The smallest Hamming distance between two rows (codewords) of ``code``.

    >>> min_row_distance(exhaustive_code(5)), min_row_distance(one_per_class_code(4))
    (8, 2)
    """
    m = np.asarray(code, dtype=np.float32)  # sums of at most 2^24 bits are exact
    if m.shape[0] < 2:
        raise ValueError(f"a code needs at least 2 rows, got {m.shape[0]}")
    ones = m.sum(axis=1)
    d = ones[:, None] + ones[None, :] - 2.0 * (m @ m.T)  # k x k: k is at most MAX_CLASSES
    np.fill_diagonal(d, np.inf)
    return int(d.min())


def columns_distinct(code: np.ndarray) -> bool:
    """No column is constant, and no two are equal or complementary."""
    if (code.min(axis=0) == code.max(axis=0)).any():
        return False
    canonical = code ^ (1 - code[0])[None, :]  # flip each column to start with 1
    return int(np.unique(canonical, axis=1).shape[1]) == code.shape[1]


# -- decoding ----------------------------------------------------------------------------------


def hamming_distances(bits: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Hamming(b, M[c]) for every class c."""
    return np.count_nonzero(np.asarray(code) != np.asarray(bits)[None, :], axis=1)


def hamming_decode(bits: Sequence[int] | np.ndarray, code: np.ndarray) -> int:
    """The class whose codeword is nearest to ``bits``; ties go to the smallest class.

    >>> hamming_decode([0, 1, 0], exhaustive_code(3)), hamming_decode([0, 0, 0], exhaustive_code(3))
    (2, 1)
    """
    return int(np.argmin(hamming_distances(np.asarray(bits), code)))


def losses(margins: np.ndarray, code: np.ndarray) -> np.ndarray:
    """sum_l max(0, -(2 M[c][l] - 1) m_l) for every class c (hinge at zero margin)."""
    signs = 2.0 * np.asarray(code, dtype=np.float64) - 1.0
    return np.maximum(0.0, -signs * np.asarray(margins, dtype=np.float64)[None, :]).sum(axis=1)


def loss_decode(margins: Sequence[float] | np.ndarray, code: np.ndarray) -> int:
    """Loss-based decoding (beyond the lecture notes S3, see docs/readings.rst): the class
    of least loss, ties to the smallest."""
    return int(np.argmin(losses(np.asarray(margins), code)))
