"""What the views of the published page share (``leaderboard.publish`` runs them, ``leaderboard.views`` holds them):
the page being written (``Page``), the tables every block is cut from (``Data``), one (profile, generator) block
(``Block``) and a view's declaration (``View``: its section, what it writes, and the rows only it reads)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.stats import RESAMPLES, SEED
from leaderboard import html


def slug(*parts: str) -> str:
    """File-name-safe join of a block's names (``table2_<profile>_<generator>.csv``)."""
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", p) for p in parts)


@dataclass
class Page:
    """What ``publish`` writes, gathered block by block: Markdown parts, the HTML of each page section
    (``leaderboard.sections``; ``section`` is the one the views now write into, every archived block goes to
    "archive"), files written. ``depth`` shifts headings down a level (archived blocks)."""

    out: Path
    md: list[str] = field(default_factory=list)
    parts: dict[str, list[str]] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)
    depth: int = 0
    archive: bool = False
    section: str = "headline"

    def h(self, level: int, text: str) -> str:
        """A Markdown heading at ``level`` (2: a block, 3: its sections), one deeper in the archive."""
        return f"{'#' * (level + self.depth)} {text}"

    @property
    def head(self) -> list[str]:
        """The HTML of the section now written (the archive while an archived block is)."""
        return self.parts.setdefault("archive" if self.archive else self.section, [])

    def html(self, heading: str, body: str, level: int = 3) -> None:
        """A heading and its body into the section now written."""
        self.head.append(html.section(heading, body, level + self.depth))

    def add(self, body: str) -> None:
        """HTML without a heading (a plot, a view) into the section now written."""
        self.head.append(body)

    def view(self, md: str, body: str, csv: Path | None) -> None:
        """A view's Markdown, HTML and CSV, written only where it made a CSV (it had rows to show)."""
        if csv:
            self.md.append(md)
            self.add(body)
            self.written.append(csv)


@dataclass
class Data:
    """The tables every block is cut from."""

    full: pd.DataFrame  # collected rows shown (aliases dropped) with uncertainty and latency columns
    shared: pd.DataFrame
    short: pd.DataFrame
    lat: pd.DataFrame
    ref: pd.DataFrame
    passes: pd.DataFrame  # latency passes (tools.latency_pass), compared within a pass only
    owned: dict[str, pd.DataFrame] = field(default_factory=dict)  # per view name, the rows only it reads
    results: Path = Path(".")  # the results root (the scale view reads its recounted tokens there)
    resamples: int = RESAMPLES  # publish's bootstrap resamples and seed, for the views that bootstrap
    seed: int = SEED

    def rows_of(self, view: str) -> pd.DataFrame:
        """The rows the view ``view`` owns (``View.owns``); empty when it owns none."""
        return self.owned.get(view, pd.DataFrame())


@dataclass(frozen=True)
class Block:
    """One (profile, generator) block and the settings every view of it reads."""

    profile: str
    gen: str
    baseline: str
    min_n: int

    def rows(self, df: pd.DataFrame) -> pd.DataFrame:
        return df[(df.profile == self.profile) & (df.generator == self.gen)]

    @property
    def slug(self) -> str:
        return slug(self.profile, self.gen)


@dataclass(frozen=True)
class View:
    """One view of the page: ``render(page, data, block)`` writes its Markdown and HTML into ``section``
    (``leaderboard.sections``), or nothing. ``owns(runs)``: a mask of the collected rows only this view reads
    (taken out of Table 2 and every other view before they are built: ``Data.rows_of(name)`` hands them back)."""

    name: str
    section: str
    render: Callable[[Page, Data, Block], None]
    owns: Callable[[pd.DataFrame], pd.Series] | None = None
