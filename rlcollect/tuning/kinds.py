"""The collectors ``tune`` compares (no torch import: the command line's ``--help`` lists them)."""

__all__ = ["KINDS"]

#: In the order ties are broken.
KINDS = ("MultiSyncCollector", "MultiAsyncCollector", "Collector", "AsyncBatchedCollector")
