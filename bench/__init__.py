"""Benchmarks of rlcollect against the hand-written loop, TorchRL and the physical limit.

Run from the repository root: ``python -m bench.single_process`` (``--quick`` for a smoke run),
and ``python -m bench.profile_rlcollect --workload cartpole-8`` for where rlcollect's time per step
goes. How we measure is described in ``BENCHMARKS.md``; :mod:`bench.harness` implements it.
"""
