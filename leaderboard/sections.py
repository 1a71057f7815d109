"""The page's sections, in reading order: each has one job, says in one line what question it answers, and is
linked from the contents bar at the top of ``index.html`` (``leaderboard.md`` follows the same order).

A section's content comes from the views whose ``section`` is its id (``leaderboard.page.View``: the headline
block's own tables in ``leaderboard.publish.OWN``, every other view a module of ``leaderboard.views``): each
``render(page, data, block)`` writes Markdown and HTML into the page, or nothing when it has nothing to show. A new
view is one module and one entry in ``leaderboard.views.VIEWS``. A section that no view filled shows its ``empty``
line instead, never made-up content. ``grid`` and ``archive`` are filled by ``publish`` itself (the grid of every
run, the other blocks).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    id: str  # the HTML anchor (``#id``); not an id the page's tables use (``runs``, ``cmp``, ...)
    title: str  # in the contents bar and as the heading (the headline's heading names its block)
    question: str  # the one line under the heading: what this section answers
    empty: str = ""  # shown while no view fills it; ``{generator}`` and ``{profile}`` name the headline block


SECTIONS: tuple[Section, ...] = (
    Section(
        "headline",
        "Headline",
        "Which methods keep the answers while cutting the context, and what does the compression cost in time?",
    ),
    Section(
        "readers",
        "Across readers",
        "Do the headline's conclusions hold when another generator reads the same compressed contexts?",
        "One reader so far: every headline row is read by {generator}; a block of the {profile} profile that "
        "reads with the same model (another prompt or engine) is not another reader. This view fills itself once "
        "the Table 2 rows are run under a generator of another model.",
    ),
    Section(
        "kept",
        "Kept and read",
        "Does a row lose the answer, or does the reader read what is left better? Each row's difference from full, "
        "split into the answers it drops and how each reader reads what it keeps.",
        "Not shown yet: no context texts of the headline block's `full` row (the records' own or the archive's "
        "store, leaderboard/runs/contexts/).",
    ),
    Section(
        "budget",
        "At the same budget",
        "Is CompSelect better, or does it keep a different amount? Every method whose keep rate can be set, at "
        "CompSelect's compression ratio, on the same questions.",
        "Not run yet: no budget variant (conf/method/*_budget.yaml) of the headline block.",
    ),
    Section(
        "backbone",
        "Compressors at size",
        "Does a compressor with a larger language model inside keep better contexts, and do the seeds' orderings "
        "hold then? Each language-model compressor on two backbones, read by each reader.",
        "Not run yet: no row of the {profile} profile with its compressors' language models switched (`backbone=`, "
        "conf/backbone/).",
    ),
    Section(
        "ranks",
        "Where the answer sits",
        "Does full fall as the first answer-bearing passage sits lower, and do the selectors gain by position or "
        "by cutting distraction?",
        "Not shown yet: no `full` row of the headline block whose passages can be re-read here.",
    ),
    Section(
        "retrieval",
        "When retrieval fails",
        "How does each method do on the questions whose retrieved passages hold no gold answer (the papers' Table 7)?",
        "Not measured yet on this page: no table of the questions whose passages hold no gold answer.",
    ),
    Section(
        "passages",
        "More passages",
        "What does each method lose when the generator is given more passages, and so more noise (k = 5 against "
        "k = 10)?",
        "Not measured yet on this page: no view puts a row read with more passages beside the same row read with "
        "the default top-k.",
    ),
    Section(
        "scale",
        "At the readers' scale",
        "What would each row cost in time and compute with the papers' readers (1B to 70B) on a GPU, from the tokens "
        "its stages read and wrote?",
        "Not predicted yet on this page: no recounted token records of the headline block (python -m tools.recount).",
    ),
    Section(
        "diagnostics",
        "Diagnostics",
        "How much of a row's score is the generator answering the question: echoes of the prompt, hedged "
        "answers, contexts that kept nothing, a method's own errors?",
        "No diagnostics recorded for the headline block.",
    ),
    Section(
        "compare",
        "Two rows, question by question",
        "Where exactly do two rows of the headline block differ: which questions one gets right and the other not?",
        "No per-question records to compare.",
    ),
    Section(
        "papers",
        "Beside the papers",
        "How do our rows compare with the numbers the papers report, each in its own setting?",
        "No paper reports numbers in a setting comparable to this block.",
    ),
    Section(
        "grid",
        "All runs",
        "Where does each number come from: every run of every block, with its folder, commit, models and machine?",
    ),
    Section(
        "archive",
        "Archive",
        "What did the other generators and profiles show? Each block as the headline's, older runs included.",
        "No other block: every run is in the headline block.",
    ),
)


def by_id(section_id: str) -> Section:
    """The section of that id (a ``KeyError`` names the known ids)."""
    for s in SECTIONS:
        if s.id == section_id:
            return s
    raise KeyError(f"no section {section_id!r}; known: {', '.join(s.id for s in SECTIONS)}")
