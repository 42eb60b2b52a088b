"""Benchmarks of rlcollect against the hand-written loop, TorchRL and the physical limit.

Run from the repository root, e.g. ``python -m bench.single_process`` (``--quick`` for a smoke run).
How we measure is described in ``BENCHMARKS.md``; :mod:`bench.harness` implements it.
"""
