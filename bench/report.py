"""Numbers derived from the measurements (ratios, the physical limit, targets) and their reports.

Example:
    >>> ratio = Ratio.of([10.0, 12.0, 11.0], [10.0, 10.0, 10.0])
    >>> ratio.format()
    '1.10 [1.00–1.20]'
    >>> serial_fps([10.0, 20.0], [10.0, 20.0])  # two halves at 10 frames/s: 5 frames/s together
    [5.0, 10.0]
    >>> Target("rlcollect / hand loop", 0.95, ratio).met
    True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import Summary

__all__ = ["Ratio", "Target", "header_markdown", "markdown_table", "serial_fps", "write_results"]


def serial_fps(*parts: Sequence[float]) -> list[float]:
    """Per repetition: frames/s if every frame paid for each part once (``1 / sum(1 / fps)``).

    Each part is given as frames/s per repetition; repetition ``i`` of the parts ran side by side.
    """
    return [1 / sum(1 / fps for fps in rep) for rep in zip(*parts, strict=True)]


@dataclass(frozen=True)
class Ratio:
    """How two contenders compare on one workload, from repetitions that ran side by side.

    Repetition ``i`` of both contenders ran next to each other, under the same conditions of a
    shared machine, so the ratio is taken pair by pair.

    Attributes:
        value: median of the paired ratios.
        low, high: lowest and highest paired ratio.
    """

    value: float
    low: float
    high: float

    @classmethod
    def of(cls, numerator: Sequence[float], denominator: Sequence[float]) -> Ratio:
        """Ratio of two contenders' frames/s, given per repetition."""
        paired = Summary.of([a / b for a, b in zip(numerator, denominator, strict=True)])
        return cls(paired.median, paired.min, paired.max)

    def format(self) -> str:
        """``value [low–high]``."""
        return f"{self.value:.2f} [{self.low:.2f}–{self.high:.2f}]"


@dataclass(frozen=True)
class Target:
    """A minimum for a ratio (met by the median of its paired ratios)."""

    name: str
    minimum: float
    ratio: Ratio

    @property
    def met(self) -> bool:
        """Whether the ratio's median reaches the minimum."""
        return self.ratio.value >= self.minimum


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub markdown table; the first column left-aligned, the others right-aligned."""
    align = [":---"] + ["---:"] * (len(header) - 1)
    return "\n".join("| " + " | ".join(line) + " |" for line in [header, align, *rows])


def header_markdown(title: str, info: dict[str, str], command: str, method: str) -> str:
    """Title, then date, machine, versions, command and method as a list."""
    versions = ", ".join(
        f"{k} {info[k]}" for k in ("python", "torch", "numpy", "gymnasium", "tensordict", "torchrl")
    )
    return (
        f"# {title}\n\n"
        f"- date: {info['date']}\n"
        f"- machine: {info['nproc']} CPUs (`nproc`), {info['cpu']}\n"
        f"- versions: {versions}, rlcollect {info['rlcollect']}"
        f" (sources sha256 {info['rlcollect_sources']})\n"
        f"- command: `{command}`\n"
        f"- method: {method}\n"
    )


def write_results(folder: Path, stem: str, markdown: str, data: dict[str, Any]) -> None:
    """Write ``folder/stem.md`` and ``folder/stem.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.md").write_text(markdown)
    (folder / f"{stem}.json").write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {folder / stem}.md and .json")
