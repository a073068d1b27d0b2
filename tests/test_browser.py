"""The explorer in a real browser: Voila serves ``notebooks/explorer.ipynb`` on localhost, Playwright drives
Debian's Chromium, two sliders move, and the figure, the reported speed-up and the ranking table change as the
package predicts; the page holds one figure and one table (the sliders' own), the table with intervals.

Nothing leaves the machine: every request to another host is aborted (and must not be a script, so the
widget JavaScript is served by Voila itself), Chromium runs with background networking off in a fresh
profile, and Playwright never downloads a browser. Screenshots go to ``reports/browser/``.
"""
import ast
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from studykit import paths

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("STUDYKIT_CHROMIUM", "/usr/bin/chromium")
EXPLORER = paths.NOTEBOOKS / "explorer.ipynb"
SHOTS = paths.REPORTS / "browser"
BUDGET_S = 85  # the whole test, server start to last check
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SPEEDUP = re.compile(r"speed-up over syncSGD: ([0-9.]+)x")


def _voila() -> str | None:
    here = Path(sys.executable).with_name("voila")
    return str(here) if here.exists() else shutil.which("voila")


def _requirements():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium (apt-get install -y chromium; .ci/run does it "
                    "as root) or set STUDYKIT_CHROMIUM; Playwright's own browser download is never used")
    pytest.importorskip("playwright.sync_api", reason="the playwright Python package is absent (pip install playwright)")
    pytest.importorskip("voila", reason="voila is absent (pip install voila)")
    if _voila() is None:
        pytest.skip("the voila command is not on PATH")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def voila_server(tmp_path):
    """``voila notebooks/explorer.ipynb`` on a free localhost port; the process group is killed afterwards."""
    _requirements()
    port = _free_port()
    log = open(tmp_path / "voila.log", "w")
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # conftest's Agg would hide the figures
    # Voila executes the notebook with nbclient, whose interact handling can lose the cell's reply
    # (nbclient#312; "Executing 4 of 5" for ever in about one run of four here): a config file on
    # JUPYTER_CONFIG_PATH applies the kit's workaround in the server, the command stays plain voila
    conf = tmp_path / "jupyter-config"
    conf.mkdir()
    (conf / "voila.py").write_text("from studykit.nbtools import jupyter_fix\njupyter_fix.apply()\n")
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(conf), env.get("JUPYTER_CONFIG_PATH")]))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(paths.ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen([_voila(), str(EXPLORER.relative_to(paths.ROOT)), "--no-browser", f"--port={port}",
                             "--Voila.ip=127.0.0.1"], cwd=paths.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # its own process group: the kernel goes with it
    t0 = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"voila exited with {proc.returncode}:\n{(tmp_path / 'voila.log').read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() - t0 > 30:
                    pytest.fail("voila did not listen within 30 s:\n" + (tmp_path / "voila.log").read_text()[-3000:])
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/", t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()


def _defaults() -> dict:
    """The explorer's parameters cell, as values (so the test follows the notebook's defaults)."""
    cells = json.loads(EXPLORER.read_text())["cells"]
    (cell,) = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    return {n.target.id: ast.literal_eval(n.value) for n in ast.parse("".join(cell["source"])).body
            if isinstance(n, ast.AnnAssign)}


def _expected(**moved) -> tuple[float, list[str]]:
    """What the explorer should report: the same pure functions on the sliders' values (``explore.controls``):
    the speed-up and the ranking's candidates, fastest first."""
    from studykit.lessons import explore
    from studykit.perfmodel import Calibration

    d = _defaults()
    cal = Calibration.load(paths.ROOT / d["calibration_path"])
    widgets = explore.controls(cal, d["model"], d["batch_size"], d["bandwidth_gbps"], d["world_size"],
                               d["compressor"], d["param_value"])
    values = {k: w.value for k, w in widgets.items()}
    values.update(moved)
    return explore.explore_data(cal, **values)["speedup"], list(explore.ranking(cal, **values)["candidate"])


def _expected_speedup(**moved) -> float:
    return _expected(**moved)[0]


#: the ranking table's rows as cell texts (the explorer's one table: ``explore._ranking_html``)
TABLE_ROWS = ("() => Array.from(document.querySelectorAll('table.studykit-ranking tbody tr'))"
              ".map(r => Array.from(r.cells).map(c => c.innerText.trim()))")


def test_explorer_sliders_move_figure_and_speedup(voila_server, tmp_path):
    from playwright.sync_api import sync_playwright

    url, t0 = voila_server
    port = url.split(":")[2].rstrip("/")
    left_ms = lambda: max(1000, int((BUDGET_S - (time.monotonic() - t0)) * 1000))  # noqa: E731
    SHOTS.mkdir(parents=True, exist_ok=True)
    local, blocked = [], []

    def only_localhost(route):
        req = route.request
        if req.url.startswith((f"http://127.0.0.1:{port}/", "data:", "blob:")):
            local.append((req.resource_type, req.url))
            route.continue_()
        else:
            blocked.append((req.resource_type, req.url))
            route.abort()

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),  # a fresh --user-data-dir
            executable_path=CHROMIUM, headless=True, args=[f for f in CHROMIUM_FLAGS if f != "--headless"],
            viewport={"width": 1400, "height": 1100})
        page = ctx.pages[0] if ctx.pages else ctx.new_page()
        try:
            ctx.route("**/*", only_localhost)
            page.goto(url, wait_until="domcontentloaded", timeout=left_ms())
            out = page.locator(".widget-output")
            page.wait_for_function("re => { const o = document.querySelector('.widget-output');"
                                   " return o && o.querySelector('img') && new RegExp(re).test(o.innerText); }",
                                   arg=SPEEDUP.pattern, timeout=left_ms())

            def state():
                return out.locator("img").first.get_attribute("src"), float(SPEEDUP.search(out.inner_text()).group(1))

            def one_live_view(**moved):
                """One figure and one table on the page, both in the sliders' output; the table's candidates are
                the package's ranking at the sliders' values, each time with an interval (low < high)."""
                assert page.locator("img").count() == 1 and out.locator("img").count() == 1
                assert page.locator("table.studykit-ranking").count() == 1
                assert out.locator("table.studykit-ranking").count() == 1
                rows = page.evaluate(TABLE_ROWS)  # rank, candidate, iteration_ms, low_ms, high_ms, ...
                assert [r[1] for r in rows] == _expected(**moved)[1]
                assert all(float(r[3]) < float(r[4]) for r in rows), rows

            def shoot(name: str):
                """The sliders and the figure they drive (Voila's page scrolls inside a container)."""
                box = page.locator(".widget-interact")
                (box if box.count() else out).first.screenshot(path=str(SHOTS / name))

            def move(label: str, key: str, shot: str):
                """Focus the slider labelled ``label``, press ``key``; wait for a new figure and speed-up."""
                src, speed = state()
                slider = page.locator(".widget-slider").filter(
                    has=page.locator("label", has_text=re.compile(rf"^{re.escape(label)}$")))
                assert slider.count() == 1, f"no single slider labelled {label!r}"
                slider.locator(".noUi-handle").first.focus()
                page.keyboard.press(key)
                page.wait_for_function(
                    "([src, re]) => { const o = document.querySelector('.widget-output'); const i = o && o.querySelector('img');"
                    " return i && i.src !== src && new RegExp(re).test(o.innerText); }",
                    arg=[src, SPEEDUP.pattern], timeout=left_ms())
                shoot(shot)
                value = float(slider.locator(".widget-readout").inner_text().replace(",", ""))
                return value, src, speed

            page.screenshot(path=str(SHOTS / "explorer_page.png"), full_page=True)
            shoot("explorer_0_initial.png")
            src0, speed0 = state()
            assert speed0 == pytest.approx(_expected_speedup(), abs=0.006)
            one_live_view()

            gpus, _, _ = move("GPUs", "End", "explorer_1_gpus_end.png")
            src1, speed1 = state()
            expect1 = _expected_speedup(world_size=int(gpus))
            assert src1 != src0
            assert speed1 == pytest.approx(expect1, abs=0.006), (gpus, speed1, expect1)
            assert round(expect1, 2) != round(speed0, 2)  # the move shows in the text
            one_live_view(world_size=int(gpus))

            bw, _, _ = move("bandwidth (Gbit/s)", "End", "explorer_2_bandwidth_end.png")
            src2, speed2 = state()
            expect2 = _expected_speedup(world_size=int(gpus), bandwidth_gbps=bw)
            assert src2 != src1
            assert speed2 == pytest.approx(expect2, abs=0.006), (bw, speed2, expect2)
            assert speed2 < speed1  # more bandwidth: syncSGD gains, compression's edge shrinks (Fig. 3)
            one_live_view(world_size=int(gpus), bandwidth_gbps=bw)

            # widget JavaScript came from Voila itself; only non-script assets (icon fonts CSS) were refused
            scripts = [u for t, u in local if t == "script"]
            assert any("/voila/static/" in u for u in scripts), scripts
            assert not [u for t, u in blocked if t == "script"], blocked
            assert time.monotonic() - t0 < 90
        except Exception:
            page.screenshot(path=str(SHOTS / "explorer_failure.png"), full_page=True)
            raise
        finally:
            ctx.close()
