"""Screenshot a page of `mhatrain attention --html` in headless Chromium while the pointer rests on
one token (needs the `test` extra and Debian's chromium + chromium-driver). How
docs/images/attention-html.png was made, from the repository root:

    mhatrain attention runs/ablate4-multi30k/h08-seed1 "A man in an orange hat starring at something." \\
        --out runs/h08-view --html
    python scripts/attention_screenshot.py runs/h08-view/attention.html docs/images/attention-html.png \\
        --kind 3 --layer 4 --hover 7 --size 1300x700
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.browser starts the browser

from tests.browser import start_chromium  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Screenshot a page of `mhatrain attention --html` in headless Chromium."
    )
    parser.add_argument("page", type=Path, help="HTML file written by mhatrain attention --html")
    parser.add_argument("png", type=Path, help="where to write the screenshot")
    parser.add_argument("--kind", type=int, default=1, help="attention menu entry, from 1")
    parser.add_argument("--layer", type=int, default=1, help="layer menu entry, from 1")
    parser.add_argument("--hover", type=int, default=0, help="query token to hover, from 0 (-1: none)")
    parser.add_argument("--size", default="1300x760", help="browser window, WIDTHxHEIGHT")
    args = parser.parse_args()

    from selenium.webdriver import ActionChains
    from selenium.webdriver.support.ui import Select

    width, height = (int(n) for n in args.size.split("x"))
    with tempfile.TemporaryDirectory() as profile:
        driver = start_chromium(Path(profile), width, height)
        try:
            driver.get(args.page.resolve().as_uri())
            Select(driver.find_element("id", "kind")).select_by_index(args.kind - 1)
            Select(driver.find_element("id", "layer")).select_by_index(args.layer - 1)
            if args.hover >= 0:
                token = driver.find_element("css selector", f'.token[data-side="query"][data-index="{args.hover}"]')
                ActionChains(driver).move_to_element(token).perform()
            args.png.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(args.png))
        finally:
            driver.quit()
    print(f"wrote {args.png} ({args.png.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
