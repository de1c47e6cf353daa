"""Sub-experts derived from the classifiers' votes: several normalisations, and subsets.

A fusion model's classifiers differ in what their scores mean, so one normalisation rarely
suits all of them, and an average of a few classifiers is often better than the best of
them (combinatorial fusion: Hsu & Taksa 2005, Hsu, Chung & Kristal 2006). Both are offered
as sub-experts, and the learner weighs them as it weighs the classifiers:

- ``"normalize": ["raw", "sum-to-one", "rank"]`` enters each classifier once per listed
  normalisation (sub-experts named ``expert:cnn/raw``, ``expert:cnn/sum-to-one``, ...);
- ``"combinations": {"size": k, "by": "score" | "rank" | ["score", "rank"]}`` adds, for
  every subset of 2 to k classifiers and each ``by``, the average of the members' votes:
  by "score" each member's scores as the first listed normalisation gives them, by "rank"
  its rank votes (``(k-1-r)/(k-1)`` for the label of rank r). The average is over the
  members that vote; a subset none of whose members votes abstains, and a subset with a
  retired member votes no more. Named ``expert:cnn+svm/score``.

A trial costs O(sum over subsets of their size x labels) for the subsets, in one compiled
pass over them (:func:`models.kernels.subsets.subset_votes`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.core.params import Integer, InvalidParameter, Options
from models.inputs.payload import check_option, is_list, read_section
from models.kernels.subsets import subset_votes

__all__ = ["BY", "DERIVED_LIMIT", "NORMALIZE", "Combinations", "Subsets", "read_normalize"]

NORMALIZE = ("raw", "sum-to-one", "rank", "argmax")
BY = ("score", "rank")
#: The most derived sub-experts a space may declare, whatever the service allows.
DERIVED_LIMIT = 1 << 16


def read_normalize(value: Any) -> tuple[tuple[str, ...], str | list[str]]:
    """The normalisations ``value`` names (one, or a list of distinct ones), and the
    value as a config gives it back."""
    if not is_list(value):
        return (check_option(value, "experts.normalize", Options(NORMALIZE)),), value
    if not value or len(set(map(str, value))) != len(value):
        raise InvalidParameter(
            "experts.normalize", value, f"one of {list(NORMALIZE)} or a list of distinct ones"
        )
    norms = [
        check_option(v, f"experts.normalize[{j}]", Options(NORMALIZE)) for j, v in enumerate(value)
    ]
    return tuple(norms), norms


@dataclass(frozen=True)
class Combinations:
    """``{"size": k, "by": ...}``: averages of every subset of 2 to k classifiers."""

    size: int
    by: tuple[str, ...]
    by_listed: bool = False

    @classmethod
    def read(cls, value: Any) -> Combinations:
        section = read_section(value, "experts.combinations", ("size", "by"))
        size = check_option(section.get("size"), "experts.combinations.size", Integer(2, 1_000_000))
        by = section.get("by", "score")
        if not is_list(by):
            return cls(size, (check_option(by, "experts.combinations.by", Options(BY)),))
        if not by or len(set(map(str, by))) != len(by):
            raise InvalidParameter(
                "experts.combinations.by", by, f"one of {list(BY)} or a list of distinct ones"
            )
        named = [
            check_option(v, f"experts.combinations.by[{j}]", Options(BY)) for j, v in enumerate(by)
        ]
        return cls(size, tuple(named), True)

    def config(self) -> dict[str, Any]:
        return {"size": self.size, "by": list(self.by) if self.by_listed else self.by[0]}

    def count(self, n: int, most: int = DERIVED_LIMIT) -> tuple[int, bool]:
        """The derived sub-experts of ``n`` classifiers, counted until past ``most`` (subsets
        of s classifiers grow in number up to s = n/2, so that is soon): the count, and
        whether it is complete."""
        total, top = 0, min(self.size, n)
        for s in range(2, top + 1):
            total += math.comb(n, s) * len(self.by)
            if total > most:
                return total, s == top
        return total, True


class Subsets:
    """The derived sub-experts of ``n`` classifiers: item ``t * len(by) + b`` is subset t
    (by size, then in lexicographic order) averaged by ``by[b]``.

    Raises :class:`InvalidParameter` naming ``experts.combinations`` when there would be
    more than ``limit`` of them, before any is enumerated.
    """

    def __init__(
        self,
        n: int,
        combinations: Combinations,
        retired: Sequence[int] = (),
        limit: int = DERIVED_LIMIT,
    ) -> None:
        count, complete = combinations.count(n, limit)
        if count > limit:
            give = f"give {count}" if complete else f"give more than {count}"
            raise InvalidParameter(
                "experts.combinations",
                combinations.config(),
                f"at most {limit} derived sub-experts (max_derived_experts): subsets of up "
                f"to {combinations.size} of {n} experts by {list(combinations.by)} {give}",
            )
        self.by = combinations.by
        self.members: list[tuple[int, ...]] = []
        for size in range(2, min(combinations.size, n) + 1):
            self.members.extend(itertools.combinations(range(n), size))
        widest = max(map(len, self.members), default=0)
        # every subset's members, then -1s: the compiled pass reads them so
        self.table = np.full((len(self.members), widest), -1, dtype=np.int64)
        for d, m in enumerate(self.members):
            self.table[d, : len(m)] = m
        gone = np.zeros(n + 1, dtype=bool)  # (n: the padding's -1)
        gone[list(retired)] = True
        # whether each subset still votes, and its newest member (it came with that one)
        self.live = np.logical_not(gone[self.table].any(axis=1))
        newest = self.table.max(axis=1) if len(self.members) else np.zeros(0, dtype=np.int64)
        self.newest = np.repeat(newest, len(self.by))

    def __len__(self) -> int:
        return len(self.members) * len(self.by)

    def names(self, experts: Sequence[str]) -> list[str]:
        """Each derived sub-expert's name, ``a+b/score``, in item order."""
        return ["+".join(experts[i] for i in m) + f"/{by}" for m in self.members for by in self.by]

    def votes(
        self,
        n: int,
        expert: np.ndarray,
        scores: Mapping[str, np.ndarray],
        payload: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(item, class, value, row)`` of the derived votes of vote rows ``expert``
        (rows of ``scores[by]`` for each by), rows grouped by ``payload``; ``row`` is the
        first vote row of the payload each derived vote belongs to."""
        by = np.ascontiguousarray(np.stack([scores[b] for b in self.by]), dtype=np.float64)
        return subset_votes(
            np.ascontiguousarray(expert, dtype=np.int64),
            np.ascontiguousarray(payload, dtype=np.int64),
            by,
            self.table,
            self.live,
            n,
        )
