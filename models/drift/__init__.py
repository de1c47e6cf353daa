"""Drift detectors over a stream of numbers, such as a model's 0/1 mistakes (no I/O).

:class:`ADWIN` (Bifet & Gavaldà 2007) and :class:`PageHinkley` (Page 1954) compute, step
for step and float for float, what River's ``river.drift.ADWIN`` and
``river.drift.PageHinkley`` (0.26) compute, River's tests being the oracle: the same
inputs fire at the same indices. A detector keeps its state in a few numpy arrays that one
compiled step updates, so :meth:`~DriftDetector.update` (one value) and
:meth:`~DriftDetector.update_many` (a stream, its firing indices) are the same arithmetic,
and every worker replaying the same log raises the same alert at the same trial. As in
River, the update after a detection starts from an empty detector.

The package: :mod:`models.drift.base` (the contract of a detector, the checks of its input
and of its state document), :mod:`models.drift.adwin` and :mod:`models.drift.page_hinkley`;
their compiled steps and the named slots of their arrays are in :mod:`models.kernels.drift`.

Defaults for a model's mistake stream
-------------------------------------
Measured by ``python bench/drift.py`` on seeded Bernoulli streams: 100 stationary streams
of 100,000 trials at each error rate 0.05, 0.1, 0.25 and 0.5 (40 million trials), and 200
streams whose error rate steps from 0.1 to 0.4 after 10,000 trials (200 more after
50,000):

* ``ADWIN()``, River's defaults but ``delta=1e-5``: no false alarm in the 40 million
  trials (below 0.0075 per 100,000 at 95% confidence). River's ``delta=0.002`` raised 4
  (0.01 per 100,000): rare, but a service watching many models for long would see them.
  Delay after the step: median 111 trials, at most 207 (River's delta: 79 and 143).
* ``PageHinkley()``, River's defaults but ``delta=0.03``, ``threshold=50``, ``alpha=1``
  (no forgetting) and ``mode="up"`` (a rise of the error rate, a regression): no false
  alarm in the 40 million trials. River's defaults raised 5.4 per 100,000: with
  ``alpha=0.9999`` the sums wander by about 35 at error rate 0.5, so a threshold of 50 is
  crossed by chance. Delay after the step: median 177 trials, at most 256.

:data:`STEP_DELAY` holds the documented delays; ``tests/models/test_drift_properties.py``
checks both figures on seeded streams. ADWIN reports a change in either direction (a
falling error rate too, as a model learns); Page-Hinkley with ``mode="up"`` only a rise.

References
----------
A. Bifet and R. Gavaldà, "Learning from time-changing data with adaptive windowing",
SIAM International Conference on Data Mining (2007) 443-448. E. S. Page, "Continuous
inspection schemes", Biometrika 41 (1954) 100-115. River's ``river/drift``.
"""

from __future__ import annotations

from models.drift.adwin import ADWIN
from models.drift.base import FORMAT, VERSION, DriftDetector
from models.drift.page_hinkley import PageHinkley

__all__ = ["ADWIN", "DETECTORS", "FORMAT", "STEP_DELAY", "VERSION", "DriftDetector", "PageHinkley"]

#: The documented delay of each detector at its defaults: after the error rate of a
#: mistake stream steps from 0.1 to 0.4, the alarm comes within this many trials (the
#: largest delay measured by ``bench/drift.py``, rounded up; see the notes above).
STEP_DELAY = {"adwin": 256, "page-hinkley": 320}

#: Every detector by its kind, for a spec such as ``{"kind": "adwin", "delta": 1e-5}``.
DETECTORS: dict[str, type[DriftDetector]] = {"adwin": ADWIN, "page-hinkley": PageHinkley}
