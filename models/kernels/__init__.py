"""Compiled loops (numba, cached on disk) and the family ids and parameter slots that name
the learners' state across the compiled boundary. Imports nothing else from ``models``."""
