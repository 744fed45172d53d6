"""The interactive attention page of `mhatrain attention --html`: its data is inert JSON, and what a
real (headless) browser draws from it matches the maps the command computed."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

from mhatrain import cli
from mhatrain.analysis.maps import KINDS
from mhatrain.analysis.page import AttentionView, render_page, write_attention_html
from mhatrain.console.shims import with_optional_values

from . import browser as browser_module
from .browser import require_browser, start_chromium
from .conftest import ROOT, run_cli

SENTENCE = "The red car likes the small hat."
HOSTILE = "</script><script>alert(1)</script> \"quoted\" & 'single' <b>bold</b> \u2028 \u2029 &amp; end"
DATA_OPEN = '<script type="application/json" id="attention-data">'


def embedded_data(page: str) -> dict:
    """The JSON the page's script reads, parsed as a browser would find it (up to the first </script>)."""
    start = page.index(DATA_OPEN) + len(DATA_OPEN)
    return json.loads(page[start : page.index("</script>", start)])


def synthetic_view(n_heads: int, queries: list[str], keys: list[str], seed: int = 0) -> AttentionView:
    """Row-stochastic random maps for two layers: [2, H, Tq, Tk]."""
    logits = np.random.default_rng(seed).normal(size=(2, n_heads, len(queries), len(keys))) * 3
    maps = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return AttentionView("cross", "cross-attention", "target", "source", queries, keys, [1, 2], maps)


# ----------------------------------------------------------------------------- without a browser


def test_page_data_is_inert_json_that_parses_back():
    tokens = [HOSTILE, "<img src=x onerror=alert(2)>", "&lt;", "▁Haus", "</s>"]
    view = synthetic_view(3, tokens[:4], tokens)
    page = render_page(HOSTILE, HOSTILE, [view], caption=HOSTILE)
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the data opened and closed no element
    assert "<b>" not in page and "<img" not in page and "\u2028" not in page and "\u2029" not in page
    assert not re.findall(r"<[^>]*\b(?:src|href)\s*=", page)  # nothing loaded from elsewhere: works offline
    data = embedded_data(page)
    assert data["source"] == data["translation"] == data["caption"] == HOSTILE
    (shown,) = data["views"]
    assert shown["queries"] == tokens[:4] and shown["keys"] == tokens and shown["heads"] == 3
    np.testing.assert_allclose(shown["maps"], view.maps, atol=0.5e-4)


def test_a_view_whose_labels_do_not_fit_its_maps_is_refused():
    view = synthetic_view(2, ["a", "b"], ["c", "d", "e"])
    view.keys = ["c", "d"]
    with pytest.raises(ValueError, match="do not match"):
        render_page("s", "t", [view])


def test_bare_html_option_stands_for_the_default_file():
    args = ["attention", "run", "A cat."]
    assert with_optional_values(args + ["--html"]) == args + ["--html="]
    assert with_optional_values(args + ["--html", "--layer", "2"]) == args + ["--html=", "--layer", "2"]
    assert with_optional_values(args + ["--html", "page.html"]) == args + ["--html", "page.html"]
    assert with_optional_values(args + ["--html=page.html"]) == args + ["--html=page.html"]
    assert with_optional_values(["translate", "run", "--", "--html"]) == ["translate", "run", "--", "--html"]


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_browser_fails_in_ci_and_skips_elsewhere(ci, outcome, monkeypatch, tmp_path):
    monkeypatch.setattr(browser_module, "CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="no-chromium is missing"):
        browser_module.require_browser()


# ----------------------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    require_browser()
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def default_page(tiny_run, tmp_path_factory):
    """`mhatrain attention RUN SENTENCE --out DIR --html`: the page and the report JSON of the same run."""
    out = tmp_path_factory.mktemp("attention-html")
    result = run_cli("attention", str(tiny_run), SENTENCE, "--out", str(out), "--html")
    assert result.returncode == 0, result.stderr + result.stdout
    report = next(out.glob("attention-*.json"))
    page = report.with_suffix(".html")  # named as the sentence's other files
    assert f"html: {page}" in result.stdout
    return page, json.loads(report.read_text())


def lines(driver) -> list[tuple[int, int, int, float]]:
    """(head, query, key, stroke-opacity) of every attention line drawn now."""
    return [
        tuple(row)
        for row in driver.execute_script(
            "return [...document.querySelectorAll('line.attention-line')].map(l => [+l.dataset.head, "
            "+l.dataset.query, +l.dataset.key, +l.getAttribute('stroke-opacity')])"
        )
    ]


def hover(driver, side: str, index: int) -> None:
    from selenium.webdriver import ActionChains

    token = driver.find_element("css selector", f'.token[data-side="{side}"][data-index="{index}"]')
    ActionChains(driver).move_to_element(token).perform()


def click(driver, selector: str) -> None:
    driver.find_element("css selector", selector).click()  # moves the pointer off any token


def pressed_heads(driver, selector: str = "button.head") -> list[int]:
    return [
        int(b.get_attribute("data-head"))
        for b in driver.find_elements("css selector", selector)
        if b.get_attribute("aria-pressed") == "true"
    ]


def expected_from(maps, heads, query=None, key=None, scale=1.0, min_opacity=0.01) -> dict:
    """{(head, query, key): opacity} of the lines the page should draw."""
    Tq, Tk = len(maps[0]), len(maps[0][0])
    return {
        (h, i, j): maps[h][i][j] * scale
        for h in heads
        for i in range(Tq)
        for j in range(Tk)
        if (query is None or i == query) and (key is None or j == key) and maps[h][i][j] * scale >= min_opacity
    }


def assert_drawn(driver, expected: dict) -> None:
    drawn = {(h, i, j): opacity for h, i, j, opacity in lines(driver)}
    assert drawn.keys() == expected.keys()
    for line, opacity in drawn.items():
        assert opacity == pytest.approx(expected[line], abs=1e-12), line


def test_hovered_token_lines_are_its_attention_weights_for_the_visible_heads(default_page, browser):
    from selenium.webdriver.support.ui import Select

    path, report = default_page
    browser.get(path.resolve().as_uri())
    data = browser.execute_script("return JSON.parse(document.getElementById('attention-data').textContent)")
    min_opacity = float(browser.find_element("id", "lines").get_attribute("data-min-opacity"))
    assert [v["kind"] for v in data["views"]] == list(KINDS) and data["source"] == SENTENCE
    assert data["translation"] == report["translation"]
    for k, kind in enumerate(KINDS):
        view = data["views"][k]
        np.testing.assert_allclose(view["maps"], report["maps"][kind], atol=1e-4)  # the command's own maps
        Select(browser.find_element("id", "kind")).select_by_index(k)
        Select(browser.find_element("id", "layer")).select_by_visible_text("2")
        maps = view["maps"][1]  # layer 2: [H][Tq][Tk]
        assert len(browser.find_elements("css selector", "button.thumbnail")) == view["heads"] == 4
        query = len(view["queries"]) // 2
        hover(browser, "query", query)
        expected = expected_from(maps, range(4), query=query, min_opacity=min_opacity)
        assert expected  # some weight is drawn, and every line starts at the hovered token
        assert_drawn(browser, expected)
        assert len(browser.find_elements("css selector", "rect.weight-box")) == 4 * len(view["keys"])
        hover(browser, "key", 0)  # lines into a key token: every query's weight on it
        assert_drawn(browser, expected_from(maps, range(4), key=0, min_opacity=min_opacity))

    click(browser, 'button.head[data-head="1"]')  # hide head 2 (cross-attention, layer 2 still chosen)
    assert pressed_heads(browser) == [0, 2, 3]
    assert_drawn(browser, expected_from(maps, [0, 2, 3], scale=1 / 3, min_opacity=min_opacity))  # at rest
    hover(browser, "query", query)
    assert_drawn(browser, expected_from(maps, [0, 2, 3], query=query, min_opacity=min_opacity))

    click(browser, "#no-heads")
    assert pressed_heads(browser) == [] and lines(browser) == []
    click(browser, 'button.thumbnail[data-head="2"]')  # head 3 alone
    assert pressed_heads(browser) == [2] and pressed_heads(browser, "button.thumbnail") == [2]
    hover(browser, "query", query)
    assert_drawn(browser, expected_from(maps, [2], query=query, min_opacity=min_opacity))
    click(browser, "#all-heads")
    assert pressed_heads(browser) == [0, 1, 2, 3]
    assert_drawn(browser, expected_from(maps, range(4), scale=1 / 4, min_opacity=min_opacity))


def run_main(monkeypatch, *args) -> None:
    """The CLI in this process (cheaper than a subprocess), as `mhatrain ARGS`."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["mhatrain", *args])
    cli.main()


def test_html_naming_a_directory_is_refused_before_any_work(tiny_run, tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main(monkeypatch, "attention", str(tiny_run), "A cat.", "--out", str(tmp_path), "--html", str(tmp_path))
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: --html") and "is a directory" in error and len(error.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_hostile_sentence_renders_as_text(tiny_run, tmp_path, browser, monkeypatch, capsys):
    from selenium.common.exceptions import NoAlertPresentException

    page = tmp_path / "pages" / "hostile.html"
    run_main(
        monkeypatch,
        "attention",
        str(tiny_run),
        HOSTILE,
        "--out",
        str(tmp_path),
        "--kind",
        "cross",
        "--layer",
        "2",
        "--html",
        str(page),
    )
    assert f"html: {page}" in capsys.readouterr().out and not (tmp_path / "attention.html").exists()
    browser.get(page.as_uri())
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert  # noqa: B018 (the property raises when no alert is open)
    assert browser.find_element("id", "source").get_property("textContent") == HOSTILE
    assert browser.title == f"attention: {HOSTILE}"
    assert browser.execute_script("return document.querySelectorAll('script').length") == 2
    assert browser.find_elements("css selector", "body b, body img") == []
    kinds = [o.text for o in browser.find_elements("css selector", "#kind option")]
    assert kinds == ["cross-attention (decoder → encoder)"]
    assert [o.text for o in browser.find_elements("css selector", "#layer option")] == ["2"]


@pytest.mark.parametrize("n_heads", [1, 32])
def test_any_head_count_gets_its_own_colours_and_thumbnails(n_heads, tmp_path, browser):
    tokens = ["<s>", HOSTILE, "<img src=x onerror=alert(2)>", "&amp;", "Haus"]
    path = write_attention_html(tmp_path / "page.html", HOSTILE, "t", [synthetic_view(n_heads, tokens, tokens[1:])])
    browser.get(path.as_uri())
    colours = browser.execute_script(
        "return [...document.querySelectorAll('button.head')].map(b => getComputedStyle(b).backgroundColor)"
    )
    assert len(colours) == n_heads and len(set(colours)) == n_heads
    thumbnails = browser.find_elements("css selector", "button.thumbnail canvas")
    assert len(thumbnails) == n_heads
    assert all(c.get_property("width") > 0 and c.get_property("height") > 0 for c in thumbnails)
    shown = browser.execute_script(
        "return [...document.querySelectorAll('.token[data-side=\"query\"] text')].map(t => t.textContent)"
    )
    assert shown == tokens
    assert browser.find_elements("css selector", "body img") == []
    hover(browser, "query", 1)
    heads = {h for h, *_ in lines(browser)}
    assert heads <= set(range(n_heads)) and len(heads) == n_heads  # every head draws from the token
    toggle_colours = browser.execute_script(
        "return [...document.querySelectorAll('button.head')].map(b => b.style.getPropertyValue('--colour'))"
    )
    strokes = browser.execute_script(
        "return [...document.querySelectorAll('line.attention-line')]"
        ".map(l => [+l.dataset.head, l.getAttribute('stroke')])"
    )
    assert all(stroke == toggle_colours[h] for h, stroke in strokes)  # a head's lines wear its toggle's colour
