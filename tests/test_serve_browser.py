"""The `lmlab serve` page in a real browser (headless Chromium through Playwright): what a
person typing and clicking sees. Screenshots go to test-artifacts/."""

from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.serve_runs import make_runs, serving

pytestmark = pytest.mark.slow
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"  # Debian's, installed by setup.sh
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(make_runs(tmp_path_factory.mktemp("serve"))) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def open_page(server, browser, request):
    """`open_page("?run=mlm")` → the page; its screenshot is saved when the test ends."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.set_default_timeout(20_000)

    def at(query: str = ""):
        page.goto(server.url + "/" + query)
        expect(page.locator("#run-a option")).to_have_count(7)
        return page

    yield at
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"serve-{request.node.name}.png", full_page=True)
    page.close()


def test_fill_mask_draws_a_bar_per_candidate(open_page):
    page = open_page("?run=mlm")
    page.fill("#fill-mask input[name=text]", "the cat [MASK] home")
    page.fill("#fill-mask input[name=top_k]", "4")
    page.click("#fill-mask button")
    bars = page.locator("#fill-mask .bar")
    expect(bars).to_have_count(4)
    shown = [float(p) for p in page.locator("#fill-mask .bar .p").all_inner_texts()]
    assert shown == sorted(shown, reverse=True) and 0 < sum(shown) <= 1
    assert bars.first.locator(".fill").get_attribute("style").startswith("width:")
    expect(page.locator("#error")).to_be_hidden()


def test_switching_run_clears_the_answers_drawn_for_the_last_one(open_page):
    page = open_page("?run=mlm")
    page.click("#fill-mask button")
    expect(page.locator("#fill-mask .pane")).to_have_count(1)
    page.click("#embed button")
    expect(page.locator("#embed .pane")).to_have_count(1)
    page.select_option("#run-a", "clm")
    expect(page.locator("#fill-mask .pane")).to_have_count(0)
    expect(page.locator("#embed .pane")).to_have_count(0)


def test_generation_streams_pieces_with_their_alternatives(open_page):
    page = open_page("?run=clm")
    page.fill("#generate input[name=prompt]", "the cat")
    page.fill("#generate input[name=max_new_tokens]", "12")
    page.fill("#generate input[name=seed]", "3")
    page.click("#generate button:not(.stop)")
    expect(page.locator('#generate .pane[data-done="true"]')).to_have_count(1)
    pieces = page.locator("#generate .piece")
    assert pieces.count() >= 2  # drawn event by event, not as one block at the end
    assert page.locator("#generate .output").inner_text().startswith("the cat")
    pieces.first.hover()
    assert pieces.first.get_attribute("title").count("\n") >= 5  # the token and 5 others


def test_attention_grids_differ_by_policy_side_by_side(open_page):
    page = open_page("?run=mlm&beside=clm")
    page.fill("#attention textarea", "the cat sees a bird and the dog")
    page.fill("#attention input[name=prefix_len]", "2")
    page.check("#attention input[name=all]")
    page.click("#attention button")
    expect(page.locator("#attention table.grid")).to_have_count(8)  # 4 policies × 2 runs
    pane = page.locator('#attention .pane[data-run="clm"]')
    n = pane.locator("table[data-kind=causal] tbody tr").count()
    assert n >= 3  # the text's tokens and its closing [EOS]

    def allowed(kind: str) -> int:
        return pane.locator(f"table[data-kind={kind}] td.on").count()

    assert allowed("bidirectional") == n * n
    assert allowed("causal") == n * (n + 1) // 2
    assert allowed("prefix") == n * (n + 1) // 2 + 1  # the first token also sees the second
    query, key = pane.locator("table[data-kind=causal] td.on").first.get_attribute(
        "title").split(" → ")
    assert query == key  # the first token sees only itself
    expect(pane.locator("table[data-kind=span-corruption] thead")).to_contain_text("<extra_id_0>")


def test_embeddings_and_a_fine_tuned_classifier(open_page):
    page = open_page("?run=classify")
    page.click("#embed button")
    expect(page.locator("#embed table.sim tr")).to_have_count(3)
    page.click("#predict button")
    expect(page.locator("#predict .bar")).to_have_count(2)  # one bar per label


# Each bar's label: its text, whether it fits its box, and whether it ends before its bar.
LABEL_FITS = """bar => {
  const label = bar.querySelector(".label"), fill = bar.querySelector(".fill");
  return { text: label.innerText,
           fits: label.scrollWidth <= label.clientWidth,
           clear: label.getBoundingClientRect().right <= fill.getBoundingClientRect().left };
}"""


def test_a_long_label_is_shown_whole(open_page):
    long = "operating systems and their kernels (a_label_with_no_space_to_break_at)"

    def renamed(route):  # the run's labels, one of them long
        response = route.fetch()
        answer = response.json()
        for prediction in answer["predictions"]:
            prediction["scores"] = {long if label == "pos" else label: score
                                    for label, score in prediction["scores"].items()}
        route.fulfill(response=response, json=answer)

    page = open_page("?run=classify")
    page.route("**/api/predict", renamed)
    page.click("#predict button")
    expect(page.locator("#predict .bar")).to_have_count(2)
    shown = [bar.evaluate(LABEL_FITS) for bar in page.locator("#predict .bar").all()]
    assert {label["text"] for label in shown} == {long, "neg"}
    assert all(label["fits"] and label["clear"] for label in shown), shown


# Pixels inside a curves canvas's frame (its labels lie outside it) of each of the page's first
# three line colours (app.js COLORS), in the lines' order.
CURVE_PIXELS = """canvas => {
  const pad = 44;  // the frame's margin in app.js
  const data = canvas.getContext("2d")
    .getImageData(pad, pad, canvas.width - 2 * pad, canvas.height - 2 * pad).data;
  return [[74, 123, 208], [204, 51, 51], [43, 138, 62]].map(([r, g, b]) => {
    let count = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i] === r && data[i + 1] === g && data[i + 2] === b) count += 1;
    }
    return count;
  });
}"""


def test_a_fine_tuned_run_draws_its_loss_and_its_score(open_page):
    """A fine-tuned run's validation rows hold its task's scores and no loss: the training
    loss, the validation accuracy and the learning rate are all drawn."""
    page = open_page("?run=classify&beside=clm")
    for run in ("classify", "clm"):
        canvas = page.locator(f'#curves canvas[data-run="{run}"]')
        expect(canvas).to_be_visible()
        page.wait_for_function("c => c.getContext('2d').getImageData(0, 0, c.width, c.height)"
                               ".data.some(v => v)", arg=canvas.element_handle())
        assert all(canvas.evaluate(CURVE_PIXELS)), run


def test_answers_and_entities_are_highlighted_in_the_text(open_page, server):
    page = open_page("?run=qa&beside=ner")
    context = "the dog sees a bird"
    page.fill("#predict textarea", f"which animal ? ||| {context}")
    page.click("#predict button")
    answer = page.locator('#predict .pane[data-run="qa"] mark')
    expect(answer).to_have_count(1)
    qa = server.runs.get("qa")
    from lmlab.infer.predict import predict

    expected = predict(qa.run, [f"which animal ? ||| {context}"])[0]
    assert answer.inner_text() == expected["answer"] and expected["answer"] in context
    page.fill("#predict textarea", "the cat likes a dog")
    page.click("#predict button")
    entities = predict(server.runs.get("ner").run, ["the cat likes a dog"])[0]["entities"]
    marks = page.locator('#predict .pane[data-run="ner"] mark')
    expect(marks).to_have_count(len(entities))
    assert marks.all_inner_texts() == [entity["word"] for entity in entities]


def test_a_comparison_report_is_shown(open_page):
    page = open_page()
    reports = page.locator("#comparisons .pane")
    expect(reports).to_have_count(2)
    frame = page.frame_locator('#comparisons .pane[data-comparison="comparison"] iframe')
    expect(frame.locator("h1")).to_have_text("mlm against clm")
    expect(page.locator('#comparisons .pane[data-comparison="comparison-running"]')
           ).to_contain_text("under way")


def test_a_bad_request_shows_the_error(open_page):
    page = open_page("?run=mlm")
    page.fill("#fill-mask input[name=text]", "no mask here")
    page.click("#fill-mask button")
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("#error")).to_contain_text("has no [MASK] token")
