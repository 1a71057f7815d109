"""One static, self-contained HTML page: inline CSS and JavaScript, plots embedded (SubEM-CR as inline SVG whose
points name themselves on hover, latency as base64 PNG), no network.

A contents bar stays at the top and links the page's sections (``leaderboard.sections``), each under its heading
and the one line saying what it answers: the headline block (Table 2, its SubEM-CR plot, its latency) first, then
the other views, the grid of every run (folded behind its filters) and the other blocks under "Archive". The grid
sorts on a click on any header (numbers numerically, empty cells last) and is filtered by dataset, generator and
profile (the filters also hide the plots of other generators and profiles). Every row links to its provenance
entry (run folder, commit, config key, models, packages).
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import pandas as pd

from leaderboard.tables import DAGGER, ELSEWHERE, fmt, label

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto 1.5rem;max-width:1500px;
padding:0 1rem;color:#1b1f24}
h1{font-size:1.5rem;margin:.8rem 0 .2rem}h2{font-size:1.2rem;margin:0 0 .2rem;border-bottom:1px solid #ddd}
h3{font-size:1.02rem;margin:1.2rem 0 .3rem}
#contents{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid #d6d9de;padding:.45rem 0;
display:flex;flex-wrap:wrap;gap:.2rem 1.1rem;font-size:13.5px}
#contents a{color:#0b57a4;text-decoration:none}#contents a:hover{text-decoration:underline}
#contents a.empty{color:#6b6f76}
section{scroll-margin-top:calc(var(--bar,2.2rem) + .4rem);margin-top:2.2rem}
p.question{margin:.1rem 0 .6rem;font-style:italic;color:#3d4450}
p.empty{color:#6b6f76;border-left:3px solid #d6d9de;padding-left:.6rem}
tr.group td{background:#f6f8fa;font-style:italic;text-align:left;color:#555}
th.ds{text-align:center}
figure svg{max-width:100%;height:auto}
.beside{display:flex;gap:1.6rem;align-items:flex-start;flex-wrap:wrap}.beside .side{flex:1 1 22rem;max-width:44rem}
.beside .side p.note:first-child{font-size:13px;color:#333}
table{border-collapse:collapse;margin:.5rem 0;font-size:13px}
th,td{border:1px solid #d6d9de;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#f2f4f7;position:sticky;top:0}
td:first-child,th:first-child,#runs td:nth-child(-n+4),#runs th:nth-child(-n+4){text-align:left}
#runs th{cursor:pointer;user-select:none}
#runs th[aria-sort=ascending]::after{content:" \\25B2"}
#runs th[aria-sort=descending]::after{content:" \\25BC"}
tr.oracle td{color:#6b6f76;font-style:italic}
.ns{color:#9a6700}.best{font-weight:700}
.filters{display:flex;gap:1rem;align-items:center;flex-wrap:wrap;background:#f6f8fa;padding:.5rem .8rem;
border-radius:6px}
figure{margin:1rem 0}figure img{max-width:100%;border:1px solid #eee}
.prov{border:1px solid #e3e6ea;border-radius:6px;padding:.4rem .8rem;margin:.5rem 0}
.prov:target{outline:3px solid #f0b400}
.prov dt{font-weight:600;float:left;clear:left;width:11rem}.prov dd{margin-left:11.5rem;word-break:break-all}
.prov dd.same{word-break:normal;color:#555}
.note{color:#555;font-size:12.5px}.wide{overflow-x:auto}
#cmp-diff td{text-align:left;white-space:normal;max-width:24rem;vertical-align:top}
"""

JS = """
const table=document.getElementById('runs');
function val(td){const v=td.dataset.v!==undefined?td.dataset.v:td.textContent.trim();
  if(v===''||v==='-')return null;const n=Number(v);return isNaN(n)?v.toLowerCase():n;}
function sortBy(th){const i=[...th.parentNode.children].indexOf(th);
  const asc=th.getAttribute('aria-sort')!=='ascending';
  table.querySelectorAll('th').forEach(h=>h.removeAttribute('aria-sort'));
  th.setAttribute('aria-sort',asc?'ascending':'descending');
  const body=table.tBodies[0];const rows=[...body.rows];
  rows.sort((a,b)=>{const x=val(a.cells[i]),y=val(b.cells[i]);
    if(x===null&&y===null)return 0;if(x===null)return 1;if(y===null)return -1;
    const c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));
    return asc?c:-c;});
  rows.forEach(r=>body.appendChild(r));}
table.querySelectorAll('th').forEach(th=>th.addEventListener('click',()=>sortBy(th)));
const keys=['dataset','generator','profile'];
function applyFilters(){const f={};keys.forEach(k=>f[k]=document.getElementById('f-'+k).value);
  let shown=0;for(const r of table.tBodies[0].rows){
    const ok=keys.every(k=>!f[k]||r.dataset[k]===f[k]);r.hidden=!ok;if(ok)shown++;}
  document.getElementById('shown').textContent=shown;
  document.querySelectorAll('[data-group]').forEach(e=>{
    e.hidden=!(['generator','profile'].every(k=>!f[k]||e.dataset[k]===f[k]));});}
keys.forEach(k=>document.getElementById('f-'+k).addEventListener('change',applyFilters));
applyFilters();
"""

COLUMNS = [  # (header, row -> (text, sort value or None), title)
    ("Profile", lambda r: (r.profile, None), ""),
    ("Generator", lambda r: (r.generator, None), ""),
    ("Dataset", lambda r: (label(r.dataset), None), ""),
    (
        "Method",
        lambda r: (_method(r), None),
        "a variant that repeats another row for row is shown once: (= alias); ‡ trained through another generator",
    ),
    ("n", lambda r: (fmt(r.n, "{:.0f}"), r.n), "examples"),
    ("SubEM", lambda r: (fmt(r.subem), r.subem), "%"),
    (
        "SubEM 95% CI",
        lambda r: (f"[{fmt(r.subem_lo, '{:.1f}')}, {fmt(r.subem_hi, '{:.1f}')}]", r.subem_lo),
        "percentile bootstrap, 1000 resamples",
    ),
    ("EM", lambda r: (fmt(r.em), r.em), "%"),
    ("F1", lambda r: (fmt(r.f1), r.f1), "token F1, %"),
    ("F1 95% CI", lambda r: (f"[{fmt(r.f1_lo, '{:.1f}')}, {fmt(r.f1_hi, '{:.1f}')}]", r.f1_lo), ""),
    ("CR", lambda r: (fmt(r.cr, "{:.2f}×"), r.cr), "ratio of sums"),
    ("ΔSubEM vs full", lambda r: (_delta(r), r.d_subem), "paired bootstrap; † not significant"),
    ("p", lambda r: (fmt(r.p_subem, "{:.3f}"), r.p_subem), "two-sided, paired bootstrap"),
    ("compress s", lambda r: (fmt(r.compress_s, "{:.3f}"), r.compress_s), "per example"),
    ("online s", lambda r: (fmt(r.online_s, "{:.3f}"), r.online_s), "generation per example"),
    ("total s", lambda r: (fmt(r.total_s, "{:.3f}"), r.total_s), ""),
    (
        "break-even",
        lambda r: (fmt(r.break_even), r.break_even),
        "compression s / generation s saved vs full; < 1 pays off",
    ),
    ("commit", lambda r: ((r.commit or "")[:10] + ("+dirty" if r.dirty else ""), None), ""),
]


def _method(r) -> str:
    aliases = getattr(r, "aliases", None)
    alias = f" (= {aliases})" if isinstance(aliases, str) and aliases else ""
    elsewhere = ELSEWHERE if isinstance(getattr(r, "trained_elsewhere", None), str) else ""
    return r.variant + elsewhere + alias + (" (oracle)" if r.oracle else "")


def _delta(r) -> str:
    if r.d_subem is None or pd.isna(r.d_subem):
        return "-"
    return f"{r.d_subem:+.2f}" + ("" if r.sig_subem else DAGGER)


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _text(v) -> str:
    """A provenance value; missing ones print as '-' so that every <dd> keeps its line."""
    return "-" if v is None or (isinstance(v, float) and pd.isna(v)) or v == "" else str(v)


def _img(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _bold(text: str) -> str:
    """Markdown's ``**best**`` (the tables' bold marks) as ``<strong>``."""
    return re.sub(r"\*\*(.+?)\*\*", r'<strong class="best">\1</strong>', text)


def _head_html(columns: pd.Index) -> str:
    """One header row, or two for (group, name) columns: each run of equal groups spans its columns."""
    if not isinstance(columns, pd.MultiIndex):
        return "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in columns) + "</tr>"
    top, runs = [], []
    for group, _ in columns:
        if runs and runs[-1][0] == group:
            runs[-1][1] += 1
        else:
            runs.append([group, 1])
    for group, span in runs:
        top.append(f'<th class="ds" colspan="{span}">{_e(group)}</th>' if group else f'<th colspan="{span}"></th>')
    return "<tr>" + "".join(top) + "</tr><tr>" + "".join(f"<th>{_e(c)}</th>" for _, c in columns) + "</tr>"


def _table_html(df: pd.DataFrame, table_id: str = "", groups: dict[int, str] | None = None) -> str:
    """``df`` as a table; ``groups``: row position -> a line shown above that row, across the table."""
    rows = []
    for i, row in enumerate(df.astype(str).values):
        if groups and i in groups:
            rows.append(f'<tr class="group"><td colspan="{len(df.columns)}">{_e(groups[i])}</td></tr>')
        rows.append("<tr>" + "".join(f"<td>{_bold(_e(v))}</td>" for v in row) + "</tr>")
    tid = f' id="{_e(table_id)}"' if table_id else ""
    return (
        f'<div class="wide"><table{tid}><thead>{_head_html(df.columns)}</thead><tbody>{"".join(rows)}</tbody>'
        "</table></div>"
    )


def _options(values) -> str:
    return '<option value="">all</option>' + "".join(
        f'<option value="{_e(v)}">{_e(v)}</option>' for v in sorted(set(values))
    )


SHARED_AFTER = 160  # a provenance value at least this long is printed once; later runs with it link back to it


def _prov(i: int, r, seen: dict[str, str]) -> str:
    """Run ``i``'s provenance block. A long value (a method's ``describe()``, the package versions) already printed
    for an earlier run links to that run's block instead (``seen``: value -> its first block's link), which keeps
    the page under its size budget without hiding anything."""
    name = f"{_e(r.variant)} · {_e(label(r.dataset))} · {_e(r.generator)} · {_e(r.profile)}"
    items = [
        ("run folder", r.folder),
        ("path under results", r.relpath),
        ("git commit", r.commit),
        ("dirty tree", r.dirty),
        ("config key", r.config_key),
        ("generator model", r.generator_model),
        ("generator backend", r.generator_backend),
        ("method models", r.method_models),
        ("method info", r.method_info),
        ("finished at", r.finished_at),
        ("runs of this key", r.runs_seen),
        ("summary = records", r.recomputed),
        ("hardware", r.hardware),
        ("packages", r.packages),
    ]
    dl = []
    for k, v in items:
        text = _text(v)
        shared = len(text) >= SHARED_AFTER
        if shared and text in seen:
            dl.append(f'<dt>{_e(k)}</dt><dd class="same">the same as {seen[text]}</dd>')
            continue
        if shared:
            seen[text] = f'<a href="#prov-{i}">{name}</a>'
        dl.append(f"<dt>{_e(k)}</dt><dd>{_e(text)}</dd>")
    return f'<div class="prov" id="prov-{i}"><strong>{name}</strong><dl>{"".join(dl)}</dl></div>'


def section(heading: str, body: str, level: int = 2) -> str:
    """A heading (``<h2>``..``<h4>``) and its body."""
    level = min(max(level, 2), 6)
    return f"<h{level}>{_e(heading)}</h{level}>{body}"


def note(text: str) -> str:
    """A paragraph of small print ('' for no text); Markdown backticks dropped."""
    return f'<p class="note">{_e(text.strip().replace("`", ""))}</p>' if text.strip() else ""


def points(items: list[str]) -> str:
    """A list of small-print findings, one per item ('' for none); Markdown backticks dropped."""
    lis = "".join(f"<li>{_e(t.strip().replace('`', ''))}</li>" for t in items if t.strip())
    return f'<ul class="note">{lis}</ul>' if lis else ""


def figure(profile: str, generator: str, path: Path, caption: str = "") -> str:
    """A plot, embedded (an ``.svg`` inline, so that its points' titles show on hover; a PNG as an image); the
    runs grid's generator and profile filters hide it with the rows of its block."""
    if path.suffix == ".svg":
        svg = path.read_text(encoding="utf-8")
        body = svg[svg.index("<svg") :]  # inline: no XML declaration or doctype inside HTML
    else:
        body = f'<img alt="{_e(path.stem)}" src="{_img(path)}">'
    text = f"{_e(path.stem)}{': ' + _e(caption) if caption else ''}"
    return (
        f'<figure data-group data-profile="{_e(profile)}" data-generator="{_e(generator)}">{body}'
        f'<figcaption class="note">{text}</figcaption></figure>'
    )


def _grid(rows: pd.DataFrame) -> str:
    """Every run in one sortable table, folded behind its filters (a ``<details>`` opened on demand)."""
    trs = []
    for i, r in enumerate(rows.itertuples()):
        tds = []
        for head, get, _ in COLUMNS:
            text, v = get(r)
            cls = ' class="ns"' if head == "ΔSubEM vs full" and text.endswith(DAGGER) else ""
            sv = "" if v is None or (isinstance(v, float) and pd.isna(v)) else f' data-v="{_e(v)}"'
            tds.append(f"<td{cls}{sv}>{_e(text)}</td>")
        tds.append(f'<td><a href="#prov-{i}">provenance</a></td>')
        attrs = " ".join(f'data-{k}="{_e(getattr(r, k))}"' for k in ("dataset", "generator", "profile"))
        trs.append(f"<tr {attrs}{' class=oracle' if r.oracle else ''}>{''.join(tds)}</tr>")
    heads = "".join(f'<th title="{_e(t)}">{_e(h)}</th>' for h, _, t in COLUMNS) + "<th>run</th>"
    filters = "".join(
        f'<label>{k} <select id="f-{k}">{_options(rows[k])}</select></label>'
        for k in ("dataset", "generator", "profile")
    )
    return f"""<details id="all-runs"><summary>Every run, every block ({len(rows)} rows): filter by dataset,
generator and profile, sort on a header click</summary>
<div class="filters">{filters}<span><span id="shown">{len(rows)}</span> of {len(rows)} runs shown</span></div>
<div class="wide"><table id="runs"><thead><tr>{heads}</tr></thead><tbody>{"".join(trs)}</tbody></table></div>
<p class="note">{DAGGER}: not significantly different from <code>full</code> (paired bootstrap over the same
examples, 95%). Oracle rows read the gold answers. Click a header to sort.</p></details>"""


def runs_html(rows: pd.DataFrame) -> str:
    """The "All runs" section's body: the grid of every run, then every run's provenance."""
    seen: dict[str, str] = {}
    provs = "".join(_prov(i, r, seen) for i, r in enumerate(rows.itertuples()))
    return f"{_grid(rows)}<h3>Provenance</h3>{provs}"


def page_section(sid: str, title: str, question: str, body: str) -> str:
    """A section of the page: its heading, the one line of what it answers, its body."""
    return f'<section id="{_e(sid)}"><h2>{_e(title)}</h2><p class="question">{_e(question)}</p>{body}</section>'


def beside(main: str, side: str) -> str:
    """``side`` (notes) to the right of ``main`` (a table), below it on a narrow screen."""
    return f'<div class="beside">{main}<div class="side">{side}</div></div>'


def folded(summary: str, frame: pd.DataFrame) -> str:
    """A long table folded behind a one-line summary (opened on a click)."""
    return f"<details><summary>{_e(summary)}</summary>{_table_html(frame)}</details>"


def empty(text: str) -> str:
    """The line a section shows while it has no content."""
    return f'<p class="empty">{_e(text)}</p>'


# a section's heading lands just under the contents bar, however many lines the bar wraps to at this width
BAR_JS = (
    "(()=>{const n=document.getElementById('contents');const f=()=>document.documentElement.style"
    ".setProperty('--bar',n.offsetHeight+'px');f();addEventListener('resize',f);})();"
)


def page(sections: list[tuple[str, str, bool, str]], title: str, note_text: str) -> str:
    """``sections``: (id, contents-bar label, whether it is empty, HTML from ``page_section``) in reading order;
    the ``grid`` section holds the grid (``runs_html``), whose script the page carries."""
    dim = ' class="empty" title="no content yet"'
    bar = "".join(f'<a href="#{_e(sid)}"{dim if state else ""}>{_e(label_)}</a>' for sid, label_, state, _ in sections)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>
<body>
<nav id="contents" aria-label="contents"><strong>Contents</strong>{bar}</nav>
<h1>{_e(title)}</h1><p class="note">{_e(note_text)}</p>
{"".join(body for *_, body in sections)}
<script>{JS}</script>
<script>{BAR_JS}</script>
</body></html>
"""


def frame_html(df: pd.DataFrame, table_id: str = "", groups: dict[int, str] | None = None) -> str:
    """A table (two header rows when ``df`` has (group, name) columns); ``groups``: row position -> a line shown
    above that row."""
    return _table_html(df, table_id, groups)
