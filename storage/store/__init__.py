"""The model store, by concern: how it calls Redis (:mod:`~storage.store.calls`), the
records it reads and writes (:mod:`~storage.store.records`), models as a whole
(:mod:`~storage.store.lifecycle`), trials (:mod:`~storage.store.trials`), logs and
snapshots (:mod:`~storage.store.history`) and what dashboards poll
(:mod:`~storage.store.statistics`). :class:`storage.repository.ModelStore` composes them."""
