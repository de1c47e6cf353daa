"""When a failed call is tried again, and after how long (shared by both clients).

A call is *idempotent* when sending it twice has the effect of sending it once: reads,
predictions with a trial id (the service returns the stored prediction for the same id
and instance), labels (the same label again returns the same answer), and the other
writes (``learn``, creating or deleting a model, importing a state), which the client
sends with an ``Idempotency-Key`` the service answers retries by. Those are retried after
a failed or timed-out connection and after a 503. A call marked not idempotent is retried
only when the request certainly did not reach the service: the connection could not be
made. Every call is retried after a 429 (a rate limit or quota of the API key), which the
service answers before applying anything, waiting its ``Retry-After``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from committee_client.errors import CommitteeError, ConnectionFailed, RateLimited, Unavailable

__all__ = ["DEFAULT_RETRY", "Retry", "retry_policy"]


@dataclass(frozen=True)
class Retry:
    """How failed calls are retried: up to ``attempts`` tries in all, exponential backoff.

    Parameters
    ----------
    attempts
        Tries per call, the first included (1: never retry).
    backoff
        Seconds before the first retry; each further retry waits ``multiplier`` times longer.
    multiplier
        Growth of the wait between retries.
    max_delay
        Longest wait, also the cap on a ``Retry-After`` the service sends.
    jitter
        Fraction of each wait drawn at random (0 to 1), so clients don't retry in step.

    Examples
    --------
    >>> Retry(attempts=4, backoff=0.5, jitter=0).delay(3)
    2.0
    >>> Retry(backoff=0.1, jitter=0).delay(1, retry_after=1.0)
    1.0
    """

    attempts: int = 3
    backoff: float = 0.1
    multiplier: float = 2.0
    max_delay: float = 10.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        for name in ("backoff", "max_delay"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter}")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based)."""
        wait = self.backoff * self.multiplier ** (attempt - 1)
        wait *= 1 - self.jitter * random.random()
        if retry_after is not None:
            wait = max(wait, retry_after)
        return min(wait, self.max_delay)

    def after(self, error: CommitteeError, attempt: int, idempotent: bool) -> float | None:
        """Seconds to wait before trying again after ``error``, or None to give up."""
        if attempt >= self.attempts:
            return None
        if isinstance(error, ConnectionFailed):
            retry = idempotent or not error.sent
        elif isinstance(error, RateLimited):  # refused whole: nothing was applied
            retry = True
        else:
            retry = idempotent and isinstance(error, Unavailable)
        if not retry:
            return None
        retry_after = error.retry_after if isinstance(error, Unavailable) else None
        return self.delay(attempt, retry_after)


def retry_policy(retry: Retry | int) -> Retry:
    """A policy from a policy or a number of attempts."""
    return retry if isinstance(retry, Retry) else Retry(attempts=retry)


DEFAULT_RETRY = Retry()
