"""The ``rlcollect`` command line: ``rlcollect collect`` and ``rlcollect inspect``.

``rlcollect collect`` runs a :class:`~rlcollect.Collector` on a Gymnasium env and writes every
batch to a memory-mapped TensorDict folder; ``rlcollect inspect`` prints what such a folder holds.
The entry point is :func:`rlcollect.cli.main.main` (``python -m rlcollect.cli`` works too).
"""
