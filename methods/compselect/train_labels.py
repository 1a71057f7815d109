"""Training targets and labels of CompSelect (000 sections 4.1-4.3), as pure functions.

- Extractor targets: the answer-containing sentences ``S^a`` (Eq. 3; the authors' code tests every gold alias
  as a raw, case-sensitive substring: ``match="raw"``), plus for ``epsilon > 0`` every sentence within cosine
  *distance* ``epsilon`` of one of them (KNN expansion; the code compares 1 - cos <= epsilon), ordered by
  cosine similarity to the question as in the code.
- Target padding (a departure for weak extractors: ``extractor.pad_to``, 5 in the embedded training config, null
  in the paper one): a target shorter than
  ``pad_to`` sentences is followed by the other shown sentences most similar to the question (MiniLM cosine)
  until it has ``pad_to``. With MiniLM the paper's KNN expansion adds nothing at any of its epsilons (68% of
  targets stay one sentence), and a 135M extractor trained on them writes one clue; padded targets teach it to
  list the answer sentence first and the next candidates after it, for the reranker and truncator to judge.
- Reranker labels: a clue is positive when the generator answers correctly (SubEM) from it alone; questions
  whose clues are all positive or all negative are dropped (000 footnote 2); pairs are every positive x every
  negative. ``reranker.positives`` (default ``generator``, the paper's rule) can instead make a clue positive
  when it holds a gold answer (``answer``; the extractor targets' test) or on either test (``either``). With the
  fourth set's labels, a 135M reader answers from one clue on 109 of 515 labelling questions, and 43 of its 164
  correct clues hold no answer; the answer test gives 239 questions with both kinds. Cross-validated
  (``reranker_cv``), it is no better than the paper's rule, so neither config uses it (methods/compselect/README.md).
- Reranker triplets from the extractor's own questions, training and validation (a departure,
  ``reranker.extractor_triplets``, off by default): for each of them up to that many (answer sentence, other
  target sentence) pairs of its extractor target (``target_triplets``), added to the generator-labelled triplets.
  The paper trains the reranker on the labelling questions alone; with a 135M reader those give about 300
  triplets from 122 questions. 1,942 more (N=2) cross-validated no better (``reranker_cv --extractor-triplets
  2``), so neither config uses it.
- Truncator label: ``K = argmin_k {k : Correct(q, D_k)}`` over the prefixes ``D_k`` of the reranked clues (Eq.
  10), 0 (the empty set) when no prefix is correct. The authors' code scans k = n..1 and stops at the first
  correct prefix, i.e. returns the *largest* correct k; it is kept as ``scan="authors_code"`` for comparison
  only.
- Truncator fallback (a departure for weak generators, off by default): where no prefix is correct, K = the
  prefix under which the generator finds the gold answer most likely (``likelihood_label``). With SmolLM2-135M
  81 of 89 paper labels are empty and the truncator learns to cut everything; the answer's likelihood grades
  the prefixes the correctness test cannot tell apart.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np

from harness.metrics import normalize

MATCHES = ("raw", "normalized")
SCANS = ("argmin", "authors_code")
POSITIVES = ("generator", "answer", "either")


def contains_answer(sentence: str, answers: Sequence[str], match: str = "raw") -> bool:
    if match == "raw":
        return any(a in sentence for a in answers)
    if match != "normalized":
        raise ValueError(f"match={match!r}; valid: {', '.join(MATCHES)}")
    s = f" {normalize(sentence)} "
    return any(f" {normalize(a)} " in s for a in answers if normalize(a))


def answer_sentences(sentences: Sequence[str], answers: Sequence[str], match: str = "raw") -> list[int]:
    """Indices of the sentences that contain a gold answer (S^a)."""
    return [i for i, s in enumerate(sentences) if contains_answer(s, answers, match)]


def knn_expand(embeddings: np.ndarray, seeds: Sequence[int], epsilon: float) -> list[int]:
    """``seeds`` plus every row whose cosine distance to some seed is at most ``epsilon`` (rows
    L2-normalised).

    Sorted indices; ``epsilon = 0`` returns the seeds (and exact duplicates of them).
    """
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if not len(seeds):
        return []
    sims = embeddings @ embeddings[list(seeds)].T  # (n, |seeds|)
    near = np.where((1.0 - sims.max(axis=1)) <= epsilon + 1e-6)[0]
    return sorted(set(int(i) for i in near) | set(int(s) for s in seeds))


def order_by_similarity(indices: Sequence[int], embeddings: np.ndarray, query: np.ndarray) -> list[int]:
    """``indices`` by descending cosine similarity of their rows to ``query`` (ties keep the given order)."""
    sims = embeddings[list(indices)] @ query if len(indices) else np.zeros(0)
    return [indices[j] for j in sorted(range(len(indices)), key=lambda j: (-float(sims[j]), j))]


def pad_target(target: Sequence[int], embeddings: np.ndarray, query: np.ndarray, pad_to: int | None) -> list[int]:
    """``target`` followed by the other rows most similar to ``query`` until it has ``pad_to`` (or no row is
    left); ``target`` itself unchanged, and ``pad_to`` None or <= len(target) returns it as it is."""
    target = list(target)
    if pad_to is None or len(target) >= pad_to:
        return target
    taken = set(target)
    rest = order_by_similarity([i for i in range(len(embeddings)) if i not in taken], embeddings, query)
    return target + rest[: pad_to - len(target)]


def truncation_label(n: int, correct: Callable[[int], bool], scan: str = "argmin") -> int:
    """The truncator's target K in [0, n] given ``correct(k)`` for the prefix of the first k ranked clues.

    ``argmin`` (the paper): the smallest correct k, scanning k = 1..n and stopping at the first correct
    prefix; ``authors_code``: k = n..1, stopping at the first correct prefix (the largest correct k). 0 if
    none is correct.
    """
    return next((k for k in scan_order(n, scan) if correct(k)), 0)


def likelihood_label(nlls: Sequence[float]) -> int:
    """The fallback truncation label (a departure, ``truncator.fallback=likelihood``): given the generator's
    gold-answer NLL with the first k ranked clues for k = 0..n, the k with the lowest NLL (the smallest such k
    on ties; 0 when no clue makes the answer more likely than no context)."""
    if not len(nlls):
        raise ValueError("likelihood_label needs the NLL of at least the empty prefix")
    return min(range(len(nlls)), key=lambda k: (nlls[k], k))


def scan_order(n: int, scan: str = "argmin") -> list[int]:
    """The prefix sizes a truncation scan tries, in order (``argmin``: 1..n; ``authors_code``: n..1)."""
    if scan not in SCANS:
        raise ValueError(f"scan={scan!r}; valid: {', '.join(SCANS)}")
    return list(range(1, n + 1)) if scan == "argmin" else list(range(n, 0, -1))


def reranker_positives(correct: Sequence[bool], has_answer: Sequence[bool], rule: str) -> list[bool]:
    """Which clues of one question are positives: ``generator`` (000 Eq. 6: the generator answers correctly from the
    clue alone), ``answer`` (the clue contains a gold answer) or ``either``."""
    if rule not in POSITIVES:
        raise ValueError(f"reranker.positives={rule!r}; valid: {', '.join(POSITIVES)}")
    if rule == "generator":
        return list(correct)
    if rule == "answer":
        return list(has_answer)
    return [c or a for c, a in zip(correct, has_answer, strict=True)]


def reranker_pairs(clues: Sequence[str], positive: Sequence[bool]) -> list[tuple[str, str]]:
    """(positive, negative) clue pairs of one question; empty when all or none are positive."""
    pos = [c for c, p in zip(clues, positive, strict=True) if p]
    neg = [c for c, p in zip(clues, positive, strict=True) if not p]
    if not pos or not neg:
        return []
    return [(p, n) for p in pos for n in neg]


def target_triplets(
    rows: Sequence[dict], questions: dict[str, str], per_question: int, seed: int
) -> list[tuple[str, str, str]]:
    """Reranker triplets from extractor target rows (``extractor_targets.jsonl``: ``target`` indices,
    ``answer_sentences``, ``texts``): per row up to ``per_question`` (question, answer sentence, other target
    sentence), drawn (seeded) from every positive x negative pair; none from a row without an answer sentence
    or without another sentence."""
    rng = random.Random(seed)
    out: list[tuple[str, str, str]] = []
    for row in rows:
        if per_question <= 0 or not row.get("texts"):
            continue
        seeds = set(row["answer_sentences"])
        pos = [t for i, t in zip(row["target"], row["texts"], strict=True) if i in seeds]
        neg = [t for i, t in zip(row["target"], row["texts"], strict=True) if i not in seeds]
        pairs = [(p, n) for p in pos for n in neg]
        rng.shuffle(pairs)
        out += [(questions[row["id"]], p, n) for p, n in pairs[:per_question]]
    return out


def balance_empty(ids: Sequence[str], k: dict[str, int], ratio: float | None, seed: int) -> list[str]:
    """Training questions for the truncator with the empty label (K = 0) down-sampled to at most ``ratio``
    times the non-empty ones (a departure from the paper, off when ``ratio`` is None). With a weak generator
    most labels are empty and the truncator learns to cut everything; this keeps every non-empty label and a
    seeded random subset of the empty ones, in the original order."""
    if ratio is None:
        return list(ids)
    empty = [i for i in ids if k[i] == 0]
    cap = int(ratio * (len(ids) - len(empty)))
    keep = set(random.Random(seed).sample(empty, min(cap, len(empty))))
    return [i for i in ids if k[i] > 0 or i in keep]
