"""The page's two-row comparison: ``python -m leaderboard compare`` in the browser, for any two rows of a block.

The rows' records (the scored examples each summary was computed from) are embedded once as JSON: per dataset,
the question ids, every question's text and gold answers, the distinct answers (cut to ``ANSWER_CHARS``), and per
variant an array aligned with the ids (null where the row lacks the question) of its SubEM, CR, echo flag and the
index of its answer: rows that answer alike (the same context often gives the same answer) share one string, which
keeps a block with every test question under the size a page should have; the whole is gzipped and base64-encoded
(``pack``), unpacked by the browser's ``DecompressionStream`` (the page stays one offline file: a ``fetch`` of a file
beside it fails over ``file://``); ``#cmp`` gets ``data-ready`` once the view is filled. Two selects
pick rows A and B of one dataset; the page pairs them on their shared questions and shows A's wins, losses and
ties on SubEM, the difference in points, and every question where they differ: the question, the golds, both
answers with their SubEM, CR and echo flag. Kept contexts stay out of the page (the command line shows them where
the run folder holds them). Nothing here loads a model.
"""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pandas as pd

from harness.metrics import compression_ratio
from harness.records import echoed
from leaderboard.collect import read_records
from leaderboard.page import Block, Data, Page, View

ANSWER_CHARS = 80  # the start of each answer; `python -m leaderboard compare` prints them whole

JS = """
(async()=>{const packed=Uint8Array.from(atob(document.getElementById('cmp-data').textContent.trim()),
  c=>c.charCodeAt(0));
const data=JSON.parse(await new Response(new Blob([packed]).stream()
  .pipeThrough(new DecompressionStream('gzip'))).text());
const $=id=>document.getElementById(id);
function opts(sel,values,pick){sel.replaceChildren(...values.map(v=>{const o=document.createElement('option');
  o.value=v;o.textContent=v;return o;}));if(values.includes(pick))sel.value=pick;}
function cell(tr,text){const td=document.createElement('td');td.textContent=text;tr.appendChild(td);}
function variants(){const vs=Object.keys(data[$('cmp-d').value].rows);
  const a=$('cmp-a').value,b=$('cmp-b').value;
  opts($('cmp-a'),vs,vs.includes(a)?a:vs.find(v=>v!=='full')||vs[0]);
  opts($('cmp-b'),vs,vs.includes(b)?b:(vs.includes('full')?'full':vs[0]));show();}
function show(){const d=data[$('cmp-d').value],A=d.rows[$('cmp-a').value],B=d.rows[$('cmp-b').value];
  const both=d.ids.map((_,k)=>k).filter(k=>A[k]&&B[k]);let w=0,l=0,sa=0,sb=0;const body=$('cmp-diff').tBodies[0];
  body.replaceChildren();
  for(const k of both){const a=A[k],b=B[k];sa+=a[0];sb+=b[0];if(a[0]===b[0])continue;
    if(a[0]>b[0])w++;else l++;const tr=document.createElement('tr');const q=d.questions[k];
    cell(tr,body.rows.length+1);cell(tr,d.ids[k]);cell(tr,a[0]>b[0]?'A':'B');cell(tr,q[0]);cell(tr,q[1].join(' | '));
    for(const r of [a,b]){cell(tr,d.answers[r[3]]||'(empty)');cell(tr,r[0]);cell(tr,r[1]===null?'-':r[1]+'x');
      cell(tr,r[2]?'echo':'');}
    body.appendChild(tr);}
  const n=both.length,diff=n?100*(sa-sb)/n:0;
  $('cmp-out').textContent=`${$('cmp-a').value} vs ${$('cmp-b').value}: ${n} shared questions; SubEM `+
    `${w} wins, ${l} losses, ${n-w-l} ties for A; difference ${diff>=0?'+':''}${diff.toFixed(1)} points`;}
opts($('cmp-d'),Object.keys(data));$('cmp-d').addEventListener('change',variants);
['cmp-a','cmp-b'].forEach(k=>$(k).addEventListener('change',show));variants();$('cmp').dataset.ready='1';})();
"""

HEADS = ("#", "id", "better", "question", "gold", "A answer", "A SubEM", "A CR", "A echo")


def _entry(record: dict[str, Any], answers: dict[str, int]) -> list[Any]:
    """[SubEM, CR (None when nothing was there to compress), echo flag, answer's index] of one record; ``answers``
    maps each distinct answer (cut to ``ANSWER_CHARS``) to its index, in the order first seen."""
    cr = compression_ratio(record["original_tokens"], record["compressed_tokens"])
    answer = answers.setdefault((record.get("prediction") or "")[:ANSWER_CHARS], len(answers))
    return [record["subem"], None if cr is None else round(cr, 2), int(echoed(record)), answer]


def compare_data(rows: pd.DataFrame) -> dict[str, Any]:
    """Per dataset: ``ids``, ``questions`` ([question, golds], aligned with ``ids``), ``answers`` (the distinct
    answers) and ``rows`` (variant -> ``_entry`` or None per id), from the records of ``rows`` (one run per variant
    and dataset, as collected)."""
    found: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for r in rows.itertuples():
        recs = read_records(r.folder, None if pd.isna(r.n) else int(r.n))
        found.setdefault(r.dataset, {})[r.variant] = {rec["id"]: rec for rec in recs}
    data: dict[str, Any] = {}
    for ds, per_variant in found.items():
        first = {}  # every id, in the order rows first hold it, with its first record
        for recs in per_variant.values():
            for i, rec in recs.items():
                first.setdefault(i, rec)
        answers: dict[str, int] = {}
        entries = {v: [_entry(rs[i], answers) if i in rs else None for i in first] for v, rs in per_variant.items()}
        data[ds] = {
            "ids": list(first),
            "questions": [[rec.get("question") or "?", list(rec["answers"])] for rec in first.values()],
            "answers": list(answers),
            "rows": entries,
        }
    return data


def pack(data: dict[str, Any]) -> str:
    """``data`` as gzipped JSON in base64 (the page unpacks it with the browser's ``DecompressionStream``): the
    answers repeat words and names, and packed they take a third of the page they would take as JSON."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def compare_html(data: dict[str, Any]) -> str:
    """The view: dataset, A and B selects, the tally, the differing questions' table, the data and the script."""
    heads = "".join(f"<th>{h}</th>" for h in (*HEADS, "B answer", "B SubEM", "B CR", "B echo"))
    payload = pack(data)
    return f"""<div class="filters" id="cmp"><label>dataset <select id="cmp-d"></select></label>
<label>A <select id="cmp-a"></select></label><label>B <select id="cmp-b"></select></label></div>
<p id="cmp-out"></p>
<details><summary>The questions where A and B differ</summary><div class="wide"><table id="cmp-diff">
<thead><tr>{heads}</tr></thead><tbody></tbody></table></div></details>
<p class="note">The paired bootstrap of A against full is in Table 2; contexts: <code>python -m leaderboard compare
RUNS A B --dataset D</code>.</p>
<script type="application/octet-stream" id="cmp-data">{payload}</script>
<script>{JS}</script>"""


def render(page: Page, d: Data, b: Block) -> None:
    """Any two rows of the headline block, question by question."""
    if page.archive:
        return
    page.md.append(
        "On the page (`index.html`), or on the command line: `python -m leaderboard compare RUNS A B --dataset D`.\n"
    )
    page.add(compare_html(compare_data(b.rows(d.full))))


VIEW = View("compare", "compare", render)
