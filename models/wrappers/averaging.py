"""Averaging A-B (Freund & Schapire 1999; Mesterharm & Hsu, §V and §VII).

Refusals: roll back. Only B can refuse, before the running sums move; a checkpoint (for a
wrapper that must undo a whole trial) keeps B's undo token and the sums at the coordinates
B may change (all of them when B may rescale).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from models.core.hypothesis import Hypothesis, Label, LinearHypothesis, LinearMaxHypothesis
from models.core.instance import Attributes
from models.core.learner import Learner, Outcome, Spec
from models.core.nested import Wrapper, inner_spec
from models.core.params import MAX_SIZE, Integer, InvalidParameter, Labels
from models.core.state import InvalidState
from models.kernels import averaging as kernel

__all__ = ["Averaging"]


class Averaging(Wrapper):
    """A-B: run B unchanged, predict with the average of B's hypotheses over all trials.

    After T real trials A-B predicts with (1/T) sum_{t=1..T} H_t, where H_t is B's
    hypothesis after trial t (at the first trial, B's initial one). Each hypothesis thus
    counts once for every trial it was in force, as in the averaged perceptron. A-B counts
    its own (averaged) mistakes; B learns from its own predictions.

    The average is kept lazily in O(changed coordinates) per trial. B's hypothesis is
    H = g * sum_r coef_r * b_r (rows of per-coordinate values and a global scale g, see
    ``Learner.linear_rows``). Per coordinate i the wrapper keeps the value b_i last seen,
    the sum acc_i of g_t b_{t,i} up to the trial that value appeared, and P_i = P at that
    trial, where P = sum_t g_t; so sum_t g_t b_{t,i} = acc_i + b_i (P - P_i). After a trial
    only the coordinates B may have changed (``support``) are compared and flushed; a
    global rescale of b (``linear_epoch``) flushes all of them, which is rare.

    What is averaged is B's own stored scale: w for the Perceptron, w+ - w- for Balanced
    Winnow, normalised weights for Committee, the primal w for ALMA. Mesterharm & Hsu do
    not say which scale; this is the reading documented in docs/readings.rst (averaging).

    Parameters
    ----------
    learner
        Spec of the linear learner B (any basic learner but weighted-majority, or a
        recycling wrapper around one).
    labels, n_features, n_experts
        Supplied by the model; B gets the same.

    Examples
    --------
    >>> ab = Averaging({"kind": "perceptron"}, n_features=2)
    >>> ab.learn([1.0, 0.0], -1)
    Outcome(mistake=True, updated=True)
    >>> ab.learn([1.0, 0.0], -1)  # the average of H_1 = (-1, 0) predicts -1
    Outcome(mistake=False, updated=False)
    """

    kind = "averaging"
    _parameter_constraints = {
        "learner": Spec(),
        "labels": Labels(),
        "n_features": Integer(1, MAX_SIZE, optional=True),
        "n_experts": Integer(1, MAX_SIZE, optional=True),
    }
    _state_arrays = {
        "acc_": "float64",
        "seen_": "float64",
        "mark_": "float64",
        "totals_": "float64",
    }

    def __init__(
        self,
        learner: Mapping[str, Any] | Learner,
        labels: Sequence[Label] = (1, -1),
        n_features: int | None = None,
        n_experts: int | None = None,
    ) -> None:
        self.learner = learner
        self.labels = labels  # type: ignore[assignment]
        self.n_features = n_features
        self.n_experts = n_experts
        self._initialise()

    def _check_params(self) -> None:
        super()._check_params()
        inner = self.learner_
        try:
            rows = inner.linear_rows(np.zeros(0, dtype=np.int64)).shape[0]
            probe = inner.snapshot()
        except TypeError:
            raise InvalidParameter(
                "learner", inner_spec(inner), "a linear learner (not weighted-majority or voting)"
            ) from None
        self._rows = rows
        self._coef = np.asarray(inner.linear_coef(), dtype=np.float64)
        self._binary = isinstance(probe, LinearHypothesis)
        self._threshold = probe.threshold if isinstance(probe, LinearHypothesis) else 0.0
        self._strict = probe.strict if isinstance(probe, LinearHypothesis) else False
        self._rule = np.array([self._binary, self._strict, self._threshold], dtype=np.float64)
        self._out = np.empty(1 if self._binary else len(self.labels))  # scratch, not state

    def _reset_state(self) -> None:
        super()._reset_state()
        n = self.input_size
        self.acc_ = np.zeros((self._rows, n))
        self.seen_ = np.array(self.learner_.linear_rows(None), dtype=np.float64)
        self.mark_ = np.zeros(n)
        # [P = sum of g_t, T = real trials, the inner epoch and shift last seen, then the
        # mark, sums and values of a coordinate no trial has moved (what a new one takes)]
        self.totals_ = np.concatenate(
            [
                [0.0, 0.0, float(self.learner_.linear_epoch()), self.learner_.linear_shift()],
                [0.0],
                np.zeros(self._rows),
                self.learner_.silent_rows(),
            ]
        )

    def _array_shapes(self) -> dict[str, tuple[int, ...]]:
        n = self.input_size
        return {
            "acc_": (self._rows, n),
            "seen_": (self._rows, n),
            "mark_": (n,),
            "totals_": (-1,),
        }

    def _check_state(self) -> None:
        p, t = (float(v) for v in self.totals_[:2])
        if self.totals_.shape[0] not in (4, 5 + 2 * self._rows):
            raise InvalidState(f"averaging: expected {5 + 2 * self._rows} totals")
        if t < 0 or t != np.floor(t) or (self.mark_ > p + 1e-9 * abs(p)).any():
            raise InvalidState("averaging: trial count or prefix marks out of range")

    def _import_extra(self, children: Mapping[str, Any]) -> None:
        super()._import_extra(children)
        if not np.array_equal(self.seen_, self.learner_.linear_rows(None)):
            raise InvalidState("averaging: the stored hypothesis does not match the learner's")
        if self.totals_.shape[0] == 4:  # kept before the untouched coordinate was
            silent = self.learner_.silent_rows()
            self.totals_ = np.concatenate([self.totals_, [0.0], np.zeros(self._rows), silent])

    def _ghost(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Views of the untouched coordinate's mark, sums and values."""
        r = self._rows
        return self.totals_[4:5], self.totals_[5 : 5 + r], self.totals_[5 + r : 5 + 2 * r]

    def _take(self, old: Learner, at: np.ndarray) -> None:
        """B grows as its kind does; a new coordinate takes the sums of one no trial has
        moved, so the average holds it as it would had it been there from the start."""
        assert isinstance(old, Averaging)
        self.learner_._adopt(old.learner_, at)
        mark, acc, seen = old._ghost()
        self.acc_[:] = acc[:, None]
        self.seen_[:] = seen[:, None]
        self.mark_[:] = mark[0]
        self.acc_[:, at], self.seen_[:, at], self.mark_[at] = old.acc_, old.seen_, old.mark_
        self.totals_ = old.totals_.copy()

    # -- the averaged hypothesis ----------------------------------------------------

    def averaged_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        """sum_t g_t b_t / T at ``idx`` (all when None); B's current hypothesis before trial 1."""
        p, t = self.totals_[:2]
        sl = slice(None) if idx is None else idx
        if t == 0:
            return self.seen_[:, sl] * self.learner_.linear_scale()
        return (self.acc_[:, sl] + self.seen_[:, sl] * (p - self.mark_[sl])) / t

    def _averaged_weights(self, idx: np.ndarray) -> np.ndarray:
        p, t = self.totals_[:2]
        out = np.empty(idx.shape[0])
        scale = self.learner_.linear_scale() if t == 0 else 1.0
        kernel.averaged(
            self.acc_, self.seen_, self.mark_, p, t, scale, self._coef, idx, out
        )  # fmt: skip
        return out

    def weights(self) -> np.ndarray:
        return self._averaged_weights(np.arange(self.input_size))

    def _scores(self, x: Any) -> np.ndarray:
        p, t = self.totals_[:2]
        scale = self.learner_.linear_scale() if t == 0 else 1.0
        if isinstance(x, Attributes):
            out = np.empty(1)
            kernel.averaged_scores(
                self.acc_, self.seen_, self.mark_, p, t, scale, self._coef,
                x.indices, x.indices, x.values, out,
            )  # fmt: skip
            m = float(out[0]) - self._threshold
            return np.array([m, -m])
        out = np.empty(len(self.labels))
        kernel.averaged_scores(
            self.acc_, self.seen_, self.mark_, p, t, scale, self._coef,
            x.expert, x.cls, x.value, out,
        )  # fmt: skip
        return out

    def _predict(self, x: Any) -> int:
        t = self.totals_[1]
        scale = self.learner_.linear_scale() if t == 0 else 1.0
        a, b, v = (x.indices, x.indices, x.values) if self._binary else (x.expert, x.cls, x.value)
        predicted = kernel.averaged_predict(
            self.acc_, self.seen_, self.mark_, self.totals_, scale, self._coef,
            a, b, v, self._out, self._rule,
        )  # fmt: skip
        return int(predicted)

    def _learn(self, x: Any, c: int) -> tuple[int, bool]:
        pred = self._predict(x)
        updated = self._member_learns(self.learner_, x, self.labels[c]).updated
        self._absorb(self.learner_.support(x))
        return pred, updated

    def _save(self, x: Any, whole: bool) -> Any:
        """The sums :meth:`kernel.absorb` may change (B's trial journals itself); none when only a
        refused trial is to be undone, since B refuses before they move."""
        if not whole:
            return None
        if self.learner_.rescales():
            sums: Any = (None, self.acc_.copy(), self.seen_.copy(), self.mark_.copy())
        else:
            idx = self.learner_.support(x)
            sums = (idx, self.acc_[:, idx], self.seen_[:, idx], self.mark_[idx])
        return sums, self.totals_.copy()

    def _restore(self, saved: Any) -> None:
        if saved is None:
            return
        (idx, acc, seen, mark), totals = saved
        where = slice(None) if idx is None else idx
        self.acc_[:, where], self.seen_[:, where], self.mark_[where] = acc, seen, mark
        self.totals_[...] = totals

    def follow(self, x: Any, c: int, predicted: int, updated: bool) -> Outcome:
        """Count a trial that B, shared with another learner, has just learned.

        ``x`` is already coerced, ``c`` is the true class, ``predicted`` the class this
        learner predicted before B learned, ``updated`` whether B updated.
        """
        self._absorb(self.learner_.support(x))
        self.count(predicted != c, updated)
        return Outcome(predicted != c, updated)

    def _moves_with_inner(self) -> int:
        """Once B has moved, the average moves on every trial: 1 then, else 0."""
        return int(self.learner_.version_ > 0)

    def followed(self, mistake: bool, updated: bool) -> None:
        """Count a trial of B whose hypothesis is already folded into the running sums
        (by V-Combine's compiled trial)."""
        self.count(mistake, updated, self._moves_with_inner())

    def _absorb(self, candidates: np.ndarray) -> None:
        """Fold B's hypothesis after this trial into the running average."""
        inner = self.learner_
        p, t, epoch, shift = self.totals_[:4]
        moved = inner.linear_shift() - shift
        ghost = self.totals_.shape[0] > 4
        if moved:  # B divided its weights by 2**moved: so do the sums, and nothing changed
            factor = 2.0**-moved
            self.acc_ *= factor
            self.seen_ *= factor
            if ghost:
                self.totals_[5:] *= factor
            self.totals_[3] = shift + moved
        now = inner.linear_epoch()
        if now != epoch:  # b was rescaled everywhere: compare every coordinate
            candidates = np.arange(self.input_size)
            self.totals_[2] = now
            if ghost:  # the untouched coordinate too, as kernel.absorb flushes one
                mark, acc, seen = self._ghost()
                silent = inner.silent_rows()
                if (silent != seen).any():
                    acc += seen * (p - mark[0])
                    seen[:] = silent
                    mark[0] = p
        if candidates.size:
            rows = inner.linear_rows(None)
            kernel.absorb(self.acc_, self.seen_, self.mark_, rows, candidates, p)
        if now != epoch:
            # Every coordinate was just flushed: count P afresh from 0, so that the scale
            # after a rescale (Committee's can be 1e100 times smaller) is not lost in it.
            self.mark_ -= p
            if ghost:
                self.totals_[4] -= p
            p = 0.0
        self.totals_[0] = p + inner.linear_scale()
        self.totals_[1] = t + 1
        self.moved(self._moves_with_inner())

    def snapshot(self) -> Hypothesis:
        w = self.weights()
        if self._binary:
            return LinearHypothesis(w, self._threshold, self.labels, self._strict, self._check)
        return LinearMaxHypothesis(w, self.labels, self._check)

    # An averaged learner's own linear view is the average, which moves everywhere.
    def support(self, x: Any) -> np.ndarray:
        return np.arange(self.input_size)

    def linear_epoch(self) -> int:
        return 0

    def linear_rows(self, idx: np.ndarray | None = None) -> np.ndarray:
        return self.averaged_rows(idx)

    def linear_scale(self) -> float:
        return 1.0
