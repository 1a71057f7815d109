"""The page's views beyond the headline block's own tables (``leaderboard.publish``): one module each, declaring
its ``View`` (``leaderboard.page``): the section it writes into, how, and the rows only it reads. A new view is one
module here and one entry in ``VIEWS``; ``publish`` does not change."""

from __future__ import annotations

from leaderboard.page import View
from leaderboard.views import backbone, budget, compare_view, kept, ranks, readers, retrieval, scale, size

# in reading order within each section (the sections' own order is leaderboard.sections); the rows a view owns
# follow every other run in runs.csv in this order
VIEWS: list[View] = [
    readers.VIEW,
    size.VIEW,
    kept.VIEW,
    retrieval.FAILS_VIEW,
    retrieval.MORE_VIEW,
    budget.VIEW,
    backbone.VIEW,
    scale.VIEW,
    ranks.VIEW,
    compare_view.VIEW,
]
