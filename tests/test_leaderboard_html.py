"""The published HTML page in a real headless browser (Debian's chromium driven by Playwright, the ``browser``
fixture of conftest.py): it renders offline with its embedded plots, sorts on a header click, filters by dataset,
generator and profile, and links every row to its provenance. Skipped only when chromium or the playwright package
is absent (and then failed instead under RAG_HARNESS_REQUIRE_BROWSER=1, as in CI)."""

from __future__ import annotations

import pytest
from test_leaderboard import grid, write_run

from leaderboard.publish import publish


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("lb")
    grid(root / "res", n=20, generator="gen-a", datasets=("nq", "triviaqa"))
    grid(root / "res", n=20, generator="gen-b", datasets=("nq",))
    # one run of another profile, at SubEM 5.00: "5.00" sorts after "10.00" as text, so only a numeric sort passes
    write_run(root / "res", "full", "nq", [("Paris", ["Paris"])] + [("London", ["Paris"])] * 19, profile="paper")
    publish(root / "res", root / "out", resamples=200)
    return root / "out" / "index.html"


def _column(page, header: str) -> list[str]:
    idx = page.eval_on_selector_all("#runs thead th", "(ths, h) => ths.findIndex(t => t.textContent === h)", header)
    return page.eval_on_selector_all(
        "#runs tbody tr:not([hidden])", "(rows, i) => rows.map(r => r.cells[i].textContent)", idx
    )


@pytest.mark.slow
def test_page_renders_offline_sorts_filters_and_links_provenance(browser, page_file, tmp_path):
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    page.wait_for_load_state("load")
    assert not errors
    assert all(u.startswith(("file:", "data:")) for u in requests), requests  # nothing from the network

    # opens on the headline block (gen-a: the first of equally new blocks): its Table 2, then its plots; the
    # grid of every run is folded behind its filters, and the other blocks come under "Archive"
    assert page.inner_text("h2 >> nth=0") == "Profile embedded, generator gen-a"
    assert page.locator("h2:text-is('Archive')").is_visible() and not page.locator("#runs").is_visible()
    page.screenshot(path=str(tmp_path / "opening.png"), full_page=False)
    page.click("#all-runs summary")
    assert page.locator("#runs").is_visible()

    # renders: 4 methods x (2 + 1) dataset/generator pairs + the paper-profile run; two plots per profile/generator
    # pair, every one drawn: SubEM-CR inline as SVG, latency as a decoded PNG
    assert page.locator("#runs tbody tr").count() == 13 and page.inner_text("#shown") == "13"
    widths = page.eval_on_selector_all("figure img", "imgs => imgs.map(i => i.naturalWidth)")
    assert len(widths) == 3 and all(w > 300 for w in widths)
    widths = page.eval_on_selector_all("figure > svg", "svgs => svgs.map(s => s.getBoundingClientRect().width)")
    assert len(widths) == 3 and all(w > 300 for w in widths)

    # sorts numerically, descending on the second click
    page.click("#runs th:text-is('SubEM')")
    asc = [float(x) for x in _column(page, "SubEM")]
    assert asc == sorted(asc) and asc[:2] == [5.0, 10.0]
    page.click("#runs th:text-is('SubEM')")
    desc = [float(x) for x in _column(page, "SubEM")]
    assert desc == sorted(desc, reverse=True) and desc[0] == 90.0
    assert page.get_attribute("#runs th:text-is('SubEM')", "aria-sort") == "descending"

    # filters: generator, then dataset; the plots of the other generator hide too
    page.select_option("#f-generator", "gen-b")
    assert set(_column(page, "Generator")) == {"gen-b"} and page.inner_text("#shown") == "4"
    assert page.locator("figure:visible").count() == 2
    page.select_option("#f-generator", "")
    page.select_option("#f-dataset", "triviaqa")
    assert set(_column(page, "Dataset")) == {"TQA"} and len(_column(page, "Dataset")) == 4
    page.select_option("#f-profile", "embedded")
    assert page.inner_text("#shown") == "4"
    page.screenshot(path=str(tmp_path / "filtered.png"), full_page=False)
    page.select_option("#f-dataset", "")
    page.select_option("#f-profile", "paper")
    assert page.inner_text("#shown") == "1" and _column(page, "SubEM") == ["5.00"]
    assert page.locator("figure:visible").count() == 2
    page.select_option("#f-profile", "embedded")
    assert page.inner_text("#shown") == "12"

    # every row links to its provenance block, which names the run folder and the model ids
    page.select_option("#f-dataset", "")
    link = page.locator("#runs tbody tr:not([hidden]) a").first
    target = link.get_attribute("href")
    link.click()
    prov = page.locator(target)
    assert page.evaluate("location.hash") == target and prov.is_visible()
    assert "embedded:smollm2-135m-instruct@b179c9523d0e" in prov.inner_text()
    assert prov.locator("dt:text-is('config key') + dd").inner_text().startswith("key-")  # pairs stay aligned
    page.close()


def test_the_compare_view_pairs_any_two_headline_rows_question_by_question(browser, page_file):
    """bm25 (right on the first 6 of 20) against full (the first 12): 0 wins, 6 losses, 14 ties, -30 points, and
    the 6 questions where they differ; the selects offer only the headline block's rows."""
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_selector("#cmp[data-ready]")  # the view unpacked its records (gzip, DecompressionStream)
    assert not errors
    options = page.eval_on_selector_all("#cmp-a option", "os => os.map(o => o.value)")
    assert sorted(options) == ["bm25", "full", "naive", "oracle_sentences"]
    assert page.input_value("#cmp-d") == "nq" and page.input_value("#cmp-b") == "full"
    page.select_option("#cmp-a", "bm25")
    assert page.inner_text("#cmp-out") == (
        "bm25 vs full: 20 shared questions; SubEM 0 wins, 6 losses, 14 ties for A; difference -30.0 points"
    )
    page.click("text=The questions where A and B differ")
    rows = page.eval_on_selector_all("#cmp-diff tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
    assert [r[1] for r in rows] == [f"nq-{i}" for i in range(6, 12)]
    assert rows[0][2:9] == ["B", "q6", "Paris", "London", "0", "4x", ""] and rows[0][9] == "Paris"
    page.select_option("#cmp-d", "triviaqa")
    page.select_option("#cmp-a", "oracle_sentences")
    assert "SubEM 6 wins, 0 losses, 14 ties for A; difference +30.0 points" in page.inner_text("#cmp-out")
    page.close()
