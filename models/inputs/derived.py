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

A trial costs O(sum over subsets of their size x labels) for the subsets: a subset's vote
is a gather and a sum over its members' rows.
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

    def count(self, n: int) -> int:
        """The derived sub-experts of ``n`` classifiers."""
        subsets = sum(math.comb(n, s) for s in range(2, min(self.size, n) + 1))
        return subsets * len(self.by)


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
        count = combinations.count(n)
        if count > limit:
            raise InvalidParameter(
                "experts.combinations",
                combinations.config(),
                f"at most {limit} derived sub-experts (max_derived_experts): subsets of up "
                f"to {combinations.size} of {n} experts by {list(combinations.by)} give {count}",
            )
        self.by = combinations.by
        self.members: list[tuple[int, ...]] = []
        # per subset size: the first subset's number and every subset's members, a row each
        self.groups: list[tuple[int, np.ndarray]] = []
        for s in range(2, min(combinations.size, n) + 1):
            first = len(self.members)
            self.members.extend(itertools.combinations(range(n), s))
            rows = np.array(self.members[first:], dtype=np.int64).reshape(-1, s)
            self.groups.append((first, rows))
        gone = np.zeros(n, dtype=bool)
        gone[list(retired)] = True
        # whether each subset still votes, and its newest member (it came with that one)
        self.live = np.array([not gone[list(m)].any() for m in self.members], dtype=bool)
        newest = np.array([m[-1] for m in self.members], dtype=np.int64)
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
        k = next(iter(scores.values())).shape[1]
        nb = len(self.by)
        out_i, out_c, out_v, out_r = [], [], [], []
        cuts = np.flatnonzero(np.diff(payload)) + 1
        for rows in np.split(np.arange(expert.size), cuts):
            if not rows.size:
                continue
            voted = np.zeros(n, dtype=np.int64)
            voted[expert[rows]] = 1
            for b, by in enumerate(self.by):
                table = np.zeros((n, k))
                table[expert[rows]] = scores[by][rows]
                for first, group in self.groups:
                    count = voted[group].sum(axis=1)
                    use = (count > 0) & self.live[first : first + group.shape[0]]
                    # each term divided first: the sum of finite scores stays finite
                    share = table[group] / np.maximum(count, 1)[:, None, None]
                    avg = share.sum(axis=1)
                    t, c = np.nonzero(avg * use[:, None])
                    out_i.append((first + t) * nb + b)
                    out_c.append(c)
                    out_v.append(avg[t, c])
                    out_r.append(np.full(t.size, rows[0], dtype=np.int64))
        if not out_i:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0), empty
        return (
            np.concatenate(out_i),
            np.concatenate(out_c),
            np.concatenate(out_v),
            np.concatenate(out_r),
        )
