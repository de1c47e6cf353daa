"""Compiled loops of V-Combine over recycled and averaged-recycled members (numba).

One call runs a whole trial of every member: the best member's scores and the vote before
anyone learns, the averaged members' predictions, every recycled member's trial (the same
kernel :class:`models.wrappers.recycling.Recycling` runs), every averaged member's absorption of its
recycled member's new hypothesis, and the push into the r-buffer. Each step does the
arithmetic of the Python path it replaces, in the same order, so results are bit for bit
those of the composed classes (``tests/models/test_voting_fast.py`` checks that).

The learners' weights (W, S, P) come in typed lists; the recycled members' stores and the
averaged members' running sums in blocks with one row per member (see
:mod:`models.voting.compiled`). ``role[g]`` is 0 for a recycled member and 1 for an averaged
one; ``idx[g]`` is its row in its own blocks and ``lead[g]`` an averaged member's
recycled member (a row of the recycled blocks); ``ROWS[j]`` is how many rows averaged
member j's sums have.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from models.kernels.averaging import averaged_scores, weight
from models.kernels.common import argmax_first, linear_max_scores_into
from models.kernels.dispatch import effective_weight, subexpert_scores_into, weight_scale
from models.kernels.families import (
    ALMA,
    ALMA_FOLDS,
    BALANCED,
    BALANCED_SHIFT,
    base_family,
)
from models.kernels.recycling import learn_and_recycle, push

__all__ = ["buffer_record", "members_trial"]


@njit(cache=True, nogil=True, inline="always")
def _row(base, W, r, i):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Row r of a sub-expert learner's linear view at i (its ``linear_rows``)."""
    if base == BALANCED:
        return W[i, r]
    if base == ALMA:
        return W[1, i]
    return W[0, i]


@njit(cache=True, nogil=True)
def member_scores(g, member, a, b, v, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Member g's scores of one instance into ``out``, as its ``_scores`` computes them."""
    role, idx, lead, fams, Ws, Ss, Ps, ACC, SEEN, MARK, TOTALS, COEF, ROWS = member
    if role[g] == 0:
        i = idx[g]
        subexpert_scores_into(fams[i], Ws[i], Ss[i], Ps[i], a, b, v, out)
        return
    j, i = idx[g], lead[g]
    T = TOTALS[j]
    scale = 1.0 if T[1] != 0.0 else weight_scale(base_family(fams[i]), Ss[i], Ps[i])
    R = ROWS[j]
    averaged_scores(ACC[j, :R], SEEN[j, :R], MARK[j], T[0], T[1], scale, COEF[j, :R], a, b, v, out)


@njit(cache=True, nogil=True)
def _absorb_averaged(j, i, member, IA, ILEN, a, updated):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Averaging._absorb of averaged member j over recycled member i, after i's trial.

    The coordinates compared are Recycling.support's: every one once the stored items
    hold as many non-zeros as there are sub-experts, else the instance's and the items'.
    After every absorption the sums have seen every coordinate as it is, so when i did not
    update (``updated`` False) none can differ and only the totals advance.
    """
    _, _, _, fams, Ws, Ss, Ps, ACC, SEEN, MARK, TOTALS, _, ROWS = member
    base = base_family(fams[i])
    S, P, T = Ss[i], Ps[i], TOTALS[j]
    p, t, epoch, shift = T[0], T[1], T[2], T[3]
    if not updated:
        T[0] = p + weight_scale(base, S, P)
        T[1] = t + 1.0
        return
    W = Ws[i]
    R = ROWS[j]
    acc, seen, mark = ACC[j, :R], SEEN[j, :R], MARK[j]
    shifted = (S[BALANCED_SHIFT] if base == BALANCED else 0.0) - shift
    if shifted != 0.0:  # the learner divided its weights by 2**shifted
        factor = 2.0**-shifted
        acc *= factor
        seen *= factor
        T[3] = shift + shifted
    n = mark.shape[0]
    lens = ILEN[i]
    everywhere = lens.sum() >= n
    now = float(int(S[ALMA_FOLDS])) if base == ALMA else 0.0
    if now != epoch:  # the learner rescaled every coordinate
        everywhere = True
        T[2] = now
    rows = R
    if everywhere:
        for e in range(n):
            _flush(acc, seen, mark, base, W, rows, e, p)
    else:
        for e in range(a.shape[0]):
            _flush(acc, seen, mark, base, W, rows, a[e], p)
        ia = IA[i]
        for item in range(lens.shape[0]):
            for e in range(lens[item]):
                _flush(acc, seen, mark, base, W, rows, ia[item, e], p)
    if T[2] != epoch:  # every coordinate flushed: P counted afresh, as Averaging._absorb
        for e in range(n):
            mark[e] -= p
        if T.shape[0] > 4:
            T[4] -= p
        p = 0.0
    T[0] = p + weight_scale(base, S, P)
    T[1] = t + 1.0


@njit(cache=True, nogil=True, inline="always")
def _flush(acc, seen, mark, base, W, rows, e, p):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Fold coordinate e into the running sums if the learner moved it (as ``absorb``)."""
    moved = False
    for r in range(rows):
        if _row(base, W, r, e) != seen[r, e]:
            moved = True
    if moved:
        for r in range(rows):
            acc[r, e] += seen[r, e] * (p - mark[e])
            seen[r, e] = _row(base, W, r, e)
        mark[e] = p


# The entry points take their arrays and lists one by one: numba types a tuple argument
# in Python on every call, which would cost more than the trial.
@njit(cache=True, nogil=True)
def members_trial(  # type: ignore[no-untyped-def]
    a, b, v, c, best,
    role, idx, lead, fams, Ws, Ss, Ps, ACC, SEEN, MARK, TOTALS, COEF, ROWS,
    order, us, IA, IB, IV, ILEN, IY, ICNT, RING, INTERNAL,
    SW, SSCALE, nheld,
    BA, BB, BV, BLEN, BY, BCNT, BRING,
    wf, wi, cur, vote, preds, status, delta,
):  # fmt: skip  # pragma: no cover
    """One V-Combine trial of every member; see the module docstring.

    The member lists (role ... COEF) are those of :func:`member_scores`; then come the
    order in which the recycled members learn and their stores (us ... INTERNAL), the slot
    hypotheses' weights and scales in slot order, the r-buffer as a recycling store (BA ...
    BRING), and scratch space and per-member outputs (wf ... delta). Returns (failed,
    voted, best's prediction): failed is the member whose update was refused (an overflow:
    the members before it in ``order`` have learned, and it half; no averaged one has),
    else -1.
    """
    member = (role, idx, lead, fams, Ws, Ss, Ps, ACC, SEEN, MARK, TOTALS, COEF, ROWS)
    k = cur.shape[0]
    member_scores(best, member, a, b, v, cur)
    tmp = wf[:k]
    vote[:] = 0.0
    for h in range(nheld):  # VotingHypothesis: slots in order, then the current hypothesis
        linear_max_scores_into(SW[h], a, b, v, tmp)
        for j in range(k):
            vote[j] = vote[j] + tmp[j] * SSCALE[h]
    for j in range(k):
        vote[j] = vote[j] + cur[j]
    voted, predicted = argmax_first(vote), argmax_first(cur)
    n = role.shape[0]
    moved = np.zeros(len(Ws), dtype=np.bool_)  # whether recycled member i updated
    for g in range(n):  # the averaged members predict before their recycled members learn
        if role[g] == 1:
            member_scores(g, member, a, b, v, tmp)
            preds[g] = argmax_first(tmp)
    for t in range(order.shape[0]):
        g = order[t]
        i = idx[g]
        internal = INTERNAL[i]
        done = internal[2]
        pred, st = learn_and_recycle(
            fams[i], Ws[i], Ss[i], Ps[i], k, a, b, v, c, IA[i], IB[i], IV[i], ILEN[i],
            IY[i], ICNT[i], RING[i], internal, us[i], wf, wi,
        )  # fmt: skip
        preds[g], status[g], delta[g] = pred, st, internal[2] - done
        moved[i] = st == 1 or internal[2] > done
        if st == 2:
            return g, voted, predicted
    for g in range(n):
        if role[g] == 1:
            _absorb_averaged(idx[g], lead[g], member, IA, ILEN, a, moved[lead[g]])
    if BLEN.shape[0] > 0:
        push(a, b, v, c, 0, BA, BB, BV, BLEN, BY, BCNT, BRING)
    return -1, voted, predicted


@njit(cache=True, nogil=True)
def buffer_record(  # type: ignore[no-untyped-def]
    g, role, idx, lead, fams, Ws, Ss, Ps, ACC, SEEN, MARK, TOTALS, COEF, ROWS,
    BA, BB, BV, BLEN, BY, BCNT, BRING, out, dense,
):  # fmt: skip  # pragma: no cover
    """How many of the buffered instances member g's current hypothesis predicts correctly.

    When the buffer holds more non-zeros than there are sub-experts, member g's weights
    are computed once for every sub-expert (into ``dense``), as its own scores compute
    them, and each instance sums them in the same order, so the predictions are the same.
    """
    member = (role, idx, lead, fams, Ws, Ss, Ps, ACC, SEEN, MARK, TOTALS, COEF, ROWS)
    s = BLEN.shape[0]
    once = dense.shape[0] <= BLEN.sum()
    if once:
        _member_weights(g, member, dense)
    correct = 0
    for r in range(BRING[1]):
        j = (BRING[0] + r) % s
        m = BLEN[j]
        if once:
            out[:] = 0.0
            for t in range(m):
                out[BB[j, t] if out.shape[0] > 1 else 0] += dense[BA[j, t]] * BV[j, t]
        else:
            member_scores(g, member, BA[j, :m], BB[j, :m], BV[j, :m], out)
        if argmax_first(out) == BY[j]:
            correct += 1
    return correct


@njit(cache=True, nogil=True)
def _member_weights(g, member, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Member g's weight of every sub-expert, in the form its scores multiply."""
    role, idx, lead, fams, Ws, Ss, Ps, ACC, SEEN, MARK, TOTALS, COEF, ROWS = member
    if role[g] == 0:
        i = idx[g]
        base = base_family(fams[i])
        W = Ws[i]
        scale = weight_scale(base, Ss[i], Ps[i])
        for e in range(out.shape[0]):
            out[e] = effective_weight(base, W, scale, e)
        return
    j, i = idx[g], lead[g]
    T = TOTALS[j]
    scale = weight_scale(base_family(fams[i]), Ss[i], Ps[i]) if T[1] == 0.0 else 1.0
    R = ROWS[j]
    acc, seen, mark, coef = ACC[j, :R], SEEN[j, :R], MARK[j], COEF[j, :R]
    for e in range(out.shape[0]):
        out[e] = weight(acc, seen, mark, T[0], T[1], scale, coef, e)
