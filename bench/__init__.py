"""Benchmarks of rlcollect: ``python -m bench.single_process`` (``multi_process``, ``replay``, ``ray``).

How we measure and how to run each script: ``bench/README.md``.
"""
