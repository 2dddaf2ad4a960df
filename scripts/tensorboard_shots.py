"""Screenshots of TensorBoard on a fresh demo run, as a new user sees it, for docs/tensorboard.md.

    python scripts/tensorboard_shots.py                 # trains `make demo`'s run (about 2 minutes), then the shots
    python scripts/tensorboard_shots.py --run outputs/bahdanau/2026-11-28_10-00-00   # an existing run instead

It starts TensorBoard on the run's outputs folder and opens each tab in headless Chromium (Debian's `chromium`
package: `apt-get install chromium`) driven by Playwright (`pip install playwright`; its own browsers are not needed),
saving one PNG per tab in docs/images/tensorboard/ once the tab has drawn its charts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABS = {  # file name -> the tab, what to type in its tag filter, the window's size (width, height)
    "time_series": ("timeseries", "", (1400, 1300)),
    "heatmaps": ("timeseries", "heatmaps", (1400, 1000)),
    "hparams": ("hparams", "", (1400, 700)),
    "text": ("text", "", (1400, 900)),
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def demo_run(outputs: Path) -> Path:
    """`make demo`'s run, trained into outputs/bahdanau/<now> as `python train.py experiment=demo` names it."""
    run_dir = outputs / "bahdanau" / datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    command = [sys.executable, "train.py", "data=sample", "experiment=demo", f"hydra.run.dir={run_dir}"]
    print("training:", " ".join(command[1:]), file=sys.stderr)
    subprocess.run(command, cwd=ROOT, check=True)
    return run_dir


def serve(outputs: Path, port: int) -> subprocess.Popen:
    """TensorBoard on `outputs`, once it lists a run."""
    tensorboard = [sys.executable, "-m", "tensorboard.main", "--logdir", str(outputs), "--port", str(port)]
    server = subprocess.Popen([*tensorboard, "--load_fast", "false"], stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=2) as response:
                if json.loads(response.read()):
                    return server
        except OSError:
            pass
        time.sleep(0.1)
    server.kill()
    raise SystemExit(f"TensorBoard on port {port} listed no run of {outputs} within a minute")


def shoot(port: int, tabs: dict, folder: Path, chromium: str) -> None:
    """One PNG per tab: the page loaded, the settings pane closed, the tag filter typed, then a few seconds to draw."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            for name, (tab, tag_filter, (width, height)) in tabs.items():
                page = browser.new_page(viewport={"width": width, "height": height})
                page.goto(f"http://127.0.0.1:{port}/#{tab}")
                page.wait_for_timeout(4000)
                close = page.locator("button[aria-label='Close side pane']")
                if close.count():
                    close.first.click()
                if tag_filter:
                    page.get_by_placeholder("Filter tags (regex)").last.fill(tag_filter)
                    page.keyboard.press("Escape")  # the filter's suggestions closed
                page.wait_for_timeout(4000)
                target = folder / f"{name}.png"
                page.screenshot(path=str(target))
                page.close()
                print("wrote", target.relative_to(ROOT) if target.is_relative_to(ROOT) else target, file=sys.stderr)
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, help="a run folder (outputs/<model>/<time>); default: train the demo")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "images" / "tensorboard")
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = parser.parse_args()
    if not args.chromium:
        raise SystemExit("no Chromium found: apt-get install chromium, or give --chromium PATH")
    try:
        import playwright  # noqa: F401
    except ImportError:
        raise SystemExit("Playwright drives the browser: pip install playwright") from None
    with tempfile.TemporaryDirectory() as scratch:
        if args.run:  # served from a folder of its own, under its model's name, as `--logdir outputs` shows it
            run_dir = args.run.resolve()
            outputs = Path(scratch) / "outputs"
            (outputs / run_dir.parent.name).mkdir(parents=True)
            (outputs / run_dir.parent.name / run_dir.name).symlink_to(run_dir)
        else:
            outputs = Path(scratch) / "outputs"
            demo_run(outputs)
        port = free_port()
        server = serve(outputs, port)
        try:
            args.output.mkdir(parents=True, exist_ok=True)
            shoot(port, TABS, args.output, args.chromium)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
