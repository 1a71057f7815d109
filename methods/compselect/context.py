"""What the generator reads of the kept clues (``clue_context``; a departure from 000 where not ``sentence``).

The paper hands the generator the kept clue sentences themselves, one per document, in ranked order
(``sentence``). A sentence cut from its passage can lose the entity it is about ("The church ... had three
altars."), which a small reader cannot recover. The other modes keep the same clues (the same K, chosen by the
truncator) and only widen what is shown of each, passages in the ranked order of their first clue:

- ``titled``: the clues of each passage under its title (the title line ``Passage.render`` gives a passage);
- ``window``: each clue with the sentence before and after it in its passage, under the title;
- ``passage``: the whole passages that hold a kept clue.

Which one the embedded profile uses is chosen on validation questions (``methods/compselect/README.md``).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.text import passage_sentences
from harness.types import Passage, Unit

CLUE_CONTEXTS = ("sentence", "titled", "window", "passage")


def clue_documents(passages: Sequence[Passage], kept: Sequence[Unit], context: str) -> tuple[list[str], list[Unit]]:
    """The documents for the kept clue units (ranked order) under ``context``, and the units they show."""
    if context not in CLUE_CONTEXTS:
        raise ValueError(f"clue_context={context!r}; valid: {', '.join(CLUE_CONTEXTS)}")
    sentences = passage_sentences(passages)
    if context == "sentence":
        return [sentences[u.passage][int(u.sentence or 0)] for u in kept], list(kept)
    by_passage: dict[int, set[int]] = {}
    for u in kept:
        by_passage.setdefault(u.passage, set()).add(int(u.sentence or 0))
    docs: list[str] = []
    units: list[Unit] = []
    for p, clues in by_passage.items():
        if context == "passage":
            docs.append(passages[p].render())
            units.append(Unit(p, None))
            continue
        offsets = (-1, 0, 1) if context == "window" else (0,)
        wide = {s + d for s in clues for d in offsets}
        shown = sorted(s for s in wide if 0 <= s < len(sentences[p]))
        body = " ".join(sentences[p][s] for s in shown)
        docs.append(Passage(body, passages[p].title).render())
        units.extend(Unit(p, s) for s in shown)
    return docs, units
