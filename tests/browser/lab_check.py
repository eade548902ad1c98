"""What a learner sees in JupyterLab, checked in a real headless Chromium: `make test-browser`.

Run it as `.venv/bin/python tests/browser/lab_check.py [NOTEBOOK ...]` (Playwright from
requirements-browser.txt must be installed in .venv). It is not a pytest file, so `pytest` does not
collect it: it needs a browser, and it runs every kernel it opens in the learner's way, through JupyterLab.

nbval runs kernels headless, so a widget that does not render, a progress bar printed as text, a solution
that is not collapsed, a plot that does not show, or a notebook marked unsaved as soon as it is opened
would all pass it. This script starts JupyterLab from .venv as `make lab` does (root_dir=notebooks, bound
to 127.0.0.1 on a free port, with a token; its settings, workspaces, checkpoints and runtime files go to
a temporary folder and autosave is off, so no notebook file is written), opens every notebook in
Chromium, driven by Playwright, and checks:
- opened without running: every diagram loads, every "Under the hood" aside is collapsed and opens with
  one click, an animated diagram's stepper changes its picture when stepped; stored outputs and plots
  render, every solution cell is collapsed, no error or
  stderr output shows, no widget's stale text fallback shows, checker cells show their stored verdicts,
  and no unsaved-changes dot appears once the kernel has started;
- the notebooks with widgets or progress bars (at least 01 and 04), after Run All and an idle kernel: no
  error or stderr output, every widget is a control (not text), tqdm bars are progress widgets, every
  checker cell prints a verdict, widget labels are not cut off, and in an `interact_manual` widget
  changing a control changes nothing until its run button is pressed, which re-runs the experiment and
  changes the output.
Screenshots go to tests/browser/screenshots/ (git-ignored), one per notebook and stage; a failing
notebook also gets a screenshot and its page's console log there. JupyterLab and Chromium are stopped
whatever happens, and the script then checks that no process it started is alive and that the port no
longer listens.

Chromium: $CHROMIUM (a path) if set, else the real binary of a Debian or Ubuntu `chromium` package (not
its wrapper script), else a Chrome or Chromium on PATH or in /Applications. Playwright's own browser
download is not used.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
LAB = REPO / ".venv" / "bin" / "jupyter"
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
# Notebooks run with Run All; any other notebook whose source uses ipywidgets or tqdm is added to them.
RUN_ALWAYS = ("01_dataloader_workers.ipynb", "04_pool_vs_process.ipynb")
WIDGET_SOURCE = re.compile(r"\b(ipywidgets|interact|interact_manual|tqdm)\b")
CHECKER_CALL = re.compile(r"\bchecks\.\w+\(")
VERDICT = re.compile(r"^(Correct|Not yet)\b", re.MULTILINE)
CHROMIUM_CANDIDATES = (
    "/usr/lib/chromium/chromium",  # Debian's real binary (/usr/bin/chromium is a wrapper script)
    "/usr/lib/chromium-browser/chromium-browser",  # older Ubuntu packages
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
)
CHROMIUM_ON_PATH = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
# As root, without the background-networking flags Chromium keeps trying to reach the network.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = """no Chromium found. Install one, or point $CHROMIUM at a Chrome or Chromium executable:
  Debian/Ubuntu:  sudo apt-get update && sudo apt-get install -y chromium   (Ubuntu: chromium-browser)
  macOS:          brew install --cask chromium
  then run `make test-browser` again."""
START_TIMEOUT = 90.0  # s: JupyterLab's server answering its API
PAGE_TIMEOUT = 90.0  # s: a notebook page showing its cells with a started kernel
RUN_ALL_TIMEOUT = 300.0  # s: Run All of one notebook (about 60 s on an idle 2-core machine)
INTERACT_TIMEOUT = 120.0  # s: one press of an interact_manual run button
STOP_GRACE = 20.0  # s: JupyterLab shutting its kernels down, their children exiting
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


# --------------------------------------------------------------------------------------------- results


@dataclass
class Report:
    """Checks passed and failed, printed as they happen; a failure names the notebook and cell."""

    passed: int = 0
    failures: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        if ok:
            self.passed += 1
            print(f"  ok    {what}", flush=True)
        else:
            self.failures.append(f"{what}: {detail}" if detail else what)
            print(f"  FAIL  {what}{': ' + detail if detail else ''}", flush=True)
        return ok


# --------------------------------------------------------------------------------------------- Chromium


def _is_executable_binary(path: Path) -> bool:
    """A real browser binary, not the shell script Debian puts on PATH (it prints noise and adds flags)."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return os.access(path, os.X_OK) and head in (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


def find_chromium() -> Path | None:
    """The Chromium to drive: $CHROMIUM, else a packaged real binary, else a binary found on PATH."""
    if os.environ.get("CHROMIUM"):
        path = Path(os.environ["CHROMIUM"])
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise SystemExit(f"$CHROMIUM={path} is not an executable file")
        return path
    for candidate in CHROMIUM_CANDIDATES:
        if _is_executable_binary(Path(candidate)):
            return Path(candidate)
    for name in CHROMIUM_ON_PATH:
        found = shutil.which(name)
        if found and _is_executable_binary(Path(found).resolve()):
            return Path(found).resolve()
    return None


# --------------------------------------------------------------------------------------------- processes


def _become_subreaper() -> None:
    """Orphans of what we start (kernels whose server died, Chromium helpers) are re-parented to us, so
    the final check sees every process below us (Linux only; elsewhere direct descendants are checked)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _alive_descendants() -> list[psutil.Process]:
    alive = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _write_settings(settings: Path) -> None:
    """JupyterLab user settings for the run: no autosave (Run All must not write the notebooks), no news."""
    files = {
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
    }
    for name, content in files.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(content))


@dataclass
class Lab:
    url: str
    token: str
    port: int
    log: Path

    def api(self, method: str, path: str) -> object:
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """End every session (and its kernel), so notebooks do not pile up kernels on a 2-core machine."""
        for session in self.api("GET", "/api/sessions") or []:  # type: ignore[union-attr]
            with contextlib.suppress(urllib.error.URLError):
                self.api("DELETE", f"/api/sessions/{session['id']}")


@contextlib.contextmanager
def jupyter_lab(root: Path, scratch: Path, report: Report) -> Iterator[Lab]:
    """JupyterLab as `make lab` starts it (root_dir=notebooks), on 127.0.0.1, a free port and a token.

    Its configuration, settings, workspaces, runtime files and checkpoints live in `scratch`, so neither
    the learner's Jupyter configuration nor this run changes anything outside it. Always stopped on exit.
    """
    token, port = secrets.token_hex(24), _free_port()
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(scratch / "config"),
        JUPYTER_DATA_DIR=str(scratch / "data"),
        JUPYTER_RUNTIME_DIR=str(scratch / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(scratch / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(scratch / "workspaces"),
        IPYTHONDIR=str(scratch / "ipython"),
    )
    _write_settings(scratch / "settings")
    # It must exist: jupyter_server puts checkpoints in the system's temporary folder
    # (/tmp/jupyter_checkpoints, left behind) when the parent of its checkpoint folder is not writable.
    (scratch / "checkpoints").mkdir(parents=True, exist_ok=True)
    command = [
        str(LAB),
        "lab",
        f"--ServerApp.root_dir={root}",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--FileCheckpoints.root_dir={scratch / 'checkpoints'}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: read the notebook model's state
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = scratch / "jupyterlab.log"
    with log.open("wb") as out:
        server = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    lab = Lab(url=f"http://127.0.0.1:{port}", token=token, port=port, log=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {server.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError):
                lab.api("GET", "/api/status")
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not answer in {START_TIMEOUT:.0f} s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield lab
    finally:
        _stop(server, port, report)


def _stop(server: subprocess.Popen, port: int, report: Report) -> None:
    """SIGTERM JupyterLab (it shuts its kernels down), wait, kill whatever is left, then check."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=STOP_GRACE)
    deadline = time.monotonic() + STOP_GRACE
    while _alive_descendants() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.25)
    left = _alive_descendants()
    names = []
    for proc in left:
        with contextlib.suppress(psutil.Error):
            names.append(f"pid {proc.pid}: {' '.join(proc.cmdline())[:160]}")
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=5)
    _reap()
    report.check(not left, "no process left after stopping JupyterLab and Chromium", "; ".join(names))
    report.check(not _listening(port), f"nothing listens on 127.0.0.1:{port} any more")


# --------------------------------------------------------------------------------------------- the page

# Everything read from the page comes from one function: per cell, what the model holds and what is shown.
STATE_JS = r"""
(path) => {
  const panel = Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.context && w.context.path === path);
  const WIDGET = 'application/vnd.jupyter.widget-view+json';
  const cells = panel.content.widgets.map((cell, index) => {
    const model = cell.model;
    const source = model.sharedModel.getSource();
    const info = {index, type: model.type, source, hidden: cell.inputHidden, outputs: [], shown: []};
    info.placeholder = !!cell.node.querySelector(':scope > .jp-Cell-inputWrapper .jp-InputPlaceholder');
    const editor = cell.node.querySelector(':scope > .jp-Cell-inputWrapper .jp-InputArea');
    info.editorVisible = !!editor && editor.offsetParent !== null;
    if (model.type !== 'code') return info;
    info.executionCount = model.executionCount;
    info.prompt = (cell.node.querySelector('.jp-InputPrompt') || {}).textContent || '';
    for (const out of model.outputs.toJSON()) {
      const data = out.data || {};
      info.outputs.push({type: out.output_type, name: out.name || '', widget: WIDGET in data,
                         plain: String(data['text/plain'] || ''), text: String(out.text || ''),
                         image: 'image/png' in data});
    }
    for (const child of cell.outputArea.node.querySelectorAll(':scope > .jp-OutputArea-child')) {
      const out = child.querySelector('.jp-OutputArea-output');
      const labels = Array.from(child.querySelectorAll('.widget-label')).filter(l => l.offsetParent !== null)
        .filter(l => l.scrollWidth > l.clientWidth + 1).map(l => l.textContent);
      info.shown.push({mime: out ? out.dataset.mimeType || '' : '', text: out ? out.textContent.slice(0, 400) : '',
        widget: !!child.querySelector('.jupyter-widgets'),
        progress: child.querySelectorAll('.widget-hprogress, .widget-vprogress').length,
        controls: child.querySelectorAll('input, button, select, .noUi-handle').length,
        interact: !!child.querySelector('.widget-interact'),
        images: child.querySelectorAll('img').length, cutLabels: labels});
    }
    return info;
  });
  const tab = document.querySelector('.lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current');
  return {path: panel.context.path, dirty: panel.context.model.dirty,
          tabDirty: !!tab && tab.classList.contains('jp-mod-dirty'),
          kernel: panel.sessionContext.kernelDisplayStatus,
          dialog: (document.querySelector('.jp-Dialog') || {}).innerText || '', cells};
}
"""

# Records, while cells run, which cells ever showed a progress widget (tqdm bars with leave=False vanish).
WATCH_PROGRESS_JS = r"""
(path) => {
  const panel = Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.context && w.context.path === path);
  window.__progressCells = new Set();
  const note = () => panel.content.widgets.forEach((cell, i) => {
    if (cell.node.querySelector('.jp-OutputArea .widget-hprogress')) window.__progressCells.add(i);
  });
  window.__progressObserver = new MutationObserver(note);
  window.__progressObserver.observe(panel.content.node, {childList: true, subtree: true});
}
"""

# Scrolls through every cell: out-of-view cells may not be rendered yet (JupyterLab renders them lazily).
VISIT_CELLS_JS = r"""
async (path) => {
  const panel = Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.context && w.context.path === path);
  for (let i = 0; i < panel.content.widgets.length; i++) {
    await panel.content.scrollToItem(i, 'start');
  }
  await new Promise(resolve => setTimeout(resolve, 300));
  await panel.content.scrollToItem(0, 'start');
  return true;
}
"""

# Polled (Playwright does not await a polled function's promise): the notebook is open, its kernel idle.
PANEL_READY_JS = r"""
(path) => {
  const app = window.jupyterapp;
  if (!app) return false;
  const panel = Array.from(app.shell.widgets('main')).find(w => w.context && w.context.path === path);
  return !!panel && panel.context.isReady && !!panel.sessionContext.session &&
    !!panel.sessionContext.session.kernel && panel.sessionContext.kernelDisplayStatus === 'idle';
}
"""

# Awaited once the kernel is idle: its info reply (which carries the language_info JupyterLab stores).
KERNEL_INFO_JS = r"""
async (path) => {
  const panel = Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.context && w.context.path === path);
  await panel.sessionContext.ready;
  await panel.sessionContext.session.kernel.info;
  return true;
}
"""

# Run All as the learner's menu does it, on this notebook (the command acts on the active notebook).
RUN_ALL_JS = r"""
async (path) => {
  const app = window.jupyterapp;
  const panel = Array.from(app.shell.widgets('main')).find(w => w.context && w.context.path === path);
  app.shell.activateById(panel.id);
  await app.commands.execute('notebook:run-all-cells');
}
"""

RUN_FINISHED_JS = r"""
(path) => {
  const panel = Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.context && w.context.path === path);
  if (panel.sessionContext.kernelDisplayStatus !== 'idle') return false;
  return panel.content.widgets.every(c => c.model.type !== 'code' || (c.model.executionCount !== null &&
    !((c.node.querySelector('.jp-InputPrompt') || {}).textContent || '').includes('*')));
}
"""


def _cells_with_error(state: dict) -> list[int]:
    """Code cells showing an error or stderr output (not those that must raise, by nbval's marker)."""
    bad = []
    for cell in state["cells"]:
        if cell["type"] != "code" or "NBVAL_RAISES_EXCEPTION" in cell["source"]:
            continue
        shown = any(
            s["mime"] in ("application/vnd.jupyter.stderr", "application/vnd.jupyter.error") for s in cell["shown"]
        )
        stored = any(o["type"] == "error" or o["name"] == "stderr" for o in cell["outputs"])
        if shown or stored or any("Error displaying widget" in s["text"] for s in cell["shown"]):
            bad.append(cell["index"])
    return bad


def _is_solution(cell: dict) -> bool:
    return cell["type"] == "code" and cell["source"].lstrip().startswith("# Solution")


def _verdictless_checkers(state: dict) -> list[int]:
    """Checker cells (they call checks.something(...)) that do not show a Correct/Not yet verdict."""
    return [
        c["index"]
        for c in state["cells"]
        if c["type"] == "code"
        and CHECKER_CALL.search(c["source"])
        and not any(VERDICT.search(s["text"]) for s in c["shown"])
    ]


def _check_rendering(report: Report, name: str, state: dict) -> None:
    """Every stored output is shown, images included, and no widget is shown as its text fallback."""
    missing = [c["index"] for c in state["cells"] if c["type"] == "code" and len(c["shown"]) != len(c["outputs"])]
    report.check(not missing, f"{name}: every stored output is rendered", f"cells {missing}")
    stored_images = sum(o["image"] for c in state["cells"] for o in c["outputs"])
    shown_images = sum(s["images"] for c in state["cells"] for s in c["shown"])
    report.check(
        shown_images >= stored_images, f"{name}: {stored_images} stored plots shown", f"{shown_images} img elements"
    )
    as_text = [
        c["index"]
        for c in state["cells"]
        for o, s in zip(c["outputs"], c["shown"], strict=False)
        if o["widget"] and not s["widget"] and s["text"].strip()  # a closed bar (leave=False) shows nothing
    ]
    report.check(not as_text, f"{name}: no widget output shown as stale text", f"cells {as_text}")


def _check_images_load(report: Report, name: str, page) -> None:
    """Each plot decodes to a real image (scrolled into view first: off-screen cells may render lazily)."""
    images = page.locator(".jp-OutputArea-output img")
    broken = []
    for i in range(images.count()):
        image = images.nth(i)
        image.scroll_into_view_if_needed(timeout=10_000)
        ok = image.evaluate("img => img.decode().then(() => img.naturalWidth > 0, () => false)")
        if not ok:
            broken.append(i)
    report.check(not broken, f"{name}: every plot decodes to an image", f"images {broken} of {images.count()}")


RUN_CELL_JS = r"""
async ([path, index]) => {
  const app = window.jupyterapp;
  const panel = Array.from(app.shell.widgets('main')).find(w => w.context && w.context.path === path);
  app.shell.activateById(panel.id);
  panel.content.activeCellIndex = index;
  await app.commands.execute('notebook:run-cell');
}
"""

STEPPER = re.compile(r"diagrams\.stepper\(")


def _stepper_image(page, cell):
    return cell.locator(".jp-OutputArea-output .jupyter-widgets img").first


def check_pictures_and_asides(report: Report, name: str, page, path: Path) -> None:
    """Issue 38 as a learner sees it: every diagram a markdown cell shows loads; every "Under the hood"
    aside is collapsed until its summary is clicked, then shows its text; an animated diagram's stepper,
    once its cell runs, changes the picture when its slider moves."""
    cells = json.loads(path.read_text())["cells"]
    markdown = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    wanted = markdown.count("](figures/")
    pictures = page.locator(".jp-RenderedMarkdown img[src*='figures/']")
    broken = []
    for i in range(pictures.count()):
        picture = pictures.nth(i)
        picture.scroll_into_view_if_needed(timeout=10_000)
        if not picture.evaluate("img => img.decode().then(() => img.naturalWidth > 0, () => false)"):
            broken.append(picture.get_attribute("src"))
    report.check(
        pictures.count() == wanted and not broken,
        f"{name}: {wanted} diagrams shown, each loads",
        f"{pictures.count()} shown, broken: {broken}",
    )
    asides = page.locator(".jp-RenderedMarkdown details")
    report.check(asides.count() == markdown.count("<details"), f"{name}: {asides.count()} asides rendered as <details>")
    if asides.count():
        aside = asides.first
        aside.scroll_into_view_if_needed(timeout=10_000)
        body = aside.locator(":scope > :not(summary)").first
        closed = not aside.evaluate("d => d.open") and not body.is_visible()
        aside.locator("summary").click()
        page.wait_for_timeout(300)
        opened = aside.evaluate("d => d.open") and body.is_visible() and bool(body.inner_text().strip())
        report.check(closed and opened, f"{name}: an aside is collapsed, and one click on its summary shows its text")
        aside.locator("summary").click()
    for index in [i for i, c in enumerate(cells) if c["cell_type"] == "code" and STEPPER.search("".join(c["source"]))]:
        cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
        page.evaluate(RUN_CELL_JS, [name, index])
        image = _stepper_image(page, cell)
        image.wait_for(timeout=INTERACT_TIMEOUT * 1000)
        first = image.get_attribute("src")
        cell.locator(".noUi-handle, .widget-slider input, [role=slider]").first.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_timeout(1500)
        report.check(
            image.get_attribute("src") != first, f"{name}: cell {index}'s stepper changes the picture when stepped"
        )


def check_opened(report: Report, name: str, page) -> dict:
    """What a learner sees on opening the notebook, before running anything."""
    time.sleep(1.0)  # the kernel's language_info reaches the model right after its info reply
    page.evaluate(VISIT_CELLS_JS, name)
    state = page.evaluate(STATE_JS, name)
    report.check(not state["dialog"], f"{name}: no dialog on opening", state["dialog"][:200])
    report.check(
        not state["dirty"] and not state["tabDirty"],
        f"{name}: no unsaved-changes dot on a freshly opened notebook",
        f"model dirty={state['dirty']}, tab dot={state['tabDirty']}",
    )
    solutions = [c for c in state["cells"] if _is_solution(c)]
    open_solutions = [
        c["index"] for c in solutions if not (c["hidden"] and c["placeholder"] and not c["editorVisible"])
    ]
    report.check(
        bool(solutions) and not open_solutions,
        f"{name}: all {len(solutions)} solution cells are collapsed",
        f"open: cells {open_solutions}",
    )
    _check_rendering(report, name, state)
    _check_images_load(report, name, page)
    errors = _cells_with_error(state)
    report.check(not errors, f"{name}: no error or stderr output shown", f"cells {errors}")
    verdictless = _verdictless_checkers(state)
    report.check(not verdictless, f"{name}: checker cells show their stored verdicts", f"cells {verdictless}")
    return state


def _output_signature(locator) -> str:
    """A digest of what an interact widget's output area shows (text and image data), to see it change."""
    content = locator.evaluate(
        "el => { const out = el.querySelector('.widget-output') || el;"
        " return out.textContent + Array.from(out.querySelectorAll('img')).map(i => i.src).join('|'); }"
    )
    return hashlib.sha256(content.encode()).hexdigest()


def _wait_run_finished(page, name: str, timeout: float) -> None:
    page.wait_for_function(RUN_FINISHED_JS, arg=name, timeout=timeout * 1000, polling=500)


KERNEL_IDLE_JS = r"""
(path) => Array.from(window.jupyterapp.shell.widgets('main'))
  .find(w => w.context && w.context.path === path).sessionContext.kernelDisplayStatus === 'idle'
"""


# An interact widget's output shows a result: a plot (01's sweeps) or text (10's calculator table), and no
# progress bar ("40% 2/5 [...]", as tqdm's widget reads): a bar means the experiment is still running. The
# kernel's idle status cannot say so alone: a probe of clean run g's failure logged 01's kernel as idle at
# every poll of a whole first press (in the page, and in the server's /api/kernels too) while the bar went
# from 0/5 to 4/5, and busy through the second press; so a pause of 1 s between two bar updates ended the
# wait early, and the check that follows then saw the sweep's plot arrive.
SHOWS_RESULT_JS = (
    "el => { const out = el.querySelector('.widget-output'); if (!out) return false;"
    " const text = out.textContent; if (/\\d+%[\\s\u2007]*\\d+\\/\\d+/.test(text)) return false;"
    " return out.querySelector('img') !== null || text.trim().length > 0; }"
)


def _press_and_wait(page, name: str, widget, button, before: str) -> tuple[bool, float]:
    """Press an interact_manual run button; wait for a result that differs from `before`, with an idle kernel
    and an output that stayed the same for a second. Returns whether that happened, and the seconds it took.

    Idle alone is not enough: the kernel's status can read idle while the experiment runs (see
    `SHOWS_RESULT_JS`), so an output that still shows a progress bar is not a result."""
    started = time.monotonic()
    button.click()
    deadline = started + INTERACT_TIMEOUT
    changed, last, stable_since = False, before, time.monotonic()
    while time.monotonic() < deadline:
        page.wait_for_timeout(250)
        signature = _output_signature(widget)
        if signature != last:
            last, stable_since = signature, time.monotonic()
        changed = signature != before and widget.evaluate(SHOWS_RESULT_JS)
        if changed and page.evaluate(KERNEL_IDLE_JS, name) and time.monotonic() - stable_since >= 1.0:
            break
    return changed, time.monotonic() - started


def check_interact(report: Report, name: str, page) -> None:
    """In each interact_manual widget: pressing the run button runs the experiment and shows a plot; a
    changed control alone changes nothing; pressing the button again re-runs it and changes the output."""
    widgets = page.locator(".jp-OutputArea-output .widget-interact")
    for i in range(widgets.count()):
        widget = widgets.nth(i)
        button = widget.locator("button", has_text=re.compile("Run Interact"))
        if button.count() == 0:
            continue  # a live `interact`: no run button to press
        widget.scroll_into_view_if_needed()
        changed, seconds = _press_and_wait(page, name, widget, button.first, _output_signature(widget))
        report.check(
            changed,
            f"{name}: interact widget {i}: its run button runs the experiment and shows its result ({seconds:.1f} s)",
        )
        first = _output_signature(widget)
        handles = widget.locator(".noUi-handle")
        readouts = widget.locator(".widget-readout")
        before = readouts.all_text_contents()
        handles.nth(handles.count() - 1).focus()
        page.keyboard.press("ArrowLeft")
        page.wait_for_timeout(2000)
        report.check(readouts.all_text_contents() != before, f"{name}: interact widget {i}: a slider moves by keyboard")
        report.check(
            _output_signature(widget) == first and page.evaluate(KERNEL_IDLE_JS, name),
            f"{name}: interact widget {i}: changing a control alone does not re-run the experiment",
        )
        changed, seconds = _press_and_wait(page, name, widget, button.first, first)
        report.check(
            changed,
            f"{name}: interact widget {i}: pressed again, it re-runs and the result changes ({seconds:.1f} s)",
        )


def check_after_run_all(report: Report, name: str, page) -> None:
    """Run All, wait for an idle kernel, then check widgets, bars, verdicts and errors."""
    page.evaluate(WATCH_PROGRESS_JS, name)
    started = time.monotonic()
    page.evaluate(RUN_ALL_JS, name)
    page.wait_for_timeout(1000)
    try:
        _wait_run_finished(page, name, RUN_ALL_TIMEOUT)
    except Exception as error:  # Playwright's TimeoutError, or a stop on an error that leaves cells unrun
        state = page.evaluate(STATE_JS, name)
        report.check(
            False, f"{name}: Run All finished", f"{type(error).__name__}; error cells {_cells_with_error(state)}"
        )
        return
    report.check(True, f"{name}: Run All finished with an idle kernel in {time.monotonic() - started:.0f} s")
    progress_cells = set(page.evaluate("() => Array.from(window.__progressCells)"))
    page.evaluate("() => window.__progressObserver.disconnect()")
    page.evaluate(VISIT_CELLS_JS, name)
    state = page.evaluate(STATE_JS, name)
    errors = _cells_with_error(state)
    report.check(not errors, f"{name}: no error or stderr output after Run All", f"cells {errors}")
    _check_rendering(report, name, state)
    bar_cells = sorted(
        c["index"] for c in state["cells"] for o in c["outputs"] if o["widget"] and re.search(r"\d+%\|", o["plain"])
    )
    text_bars = [
        c["index"]
        for c in state["cells"]
        for s in c["shown"]
        if s["mime"] != WIDGET_MIME and re.search(r"\d+%\|", s["text"])
    ]
    report.check(not text_bars, f"{name}: no progress bar printed as text", f"cells {text_bars}")
    # 01 and 04 must show bars; another notebook run for its widgets (10's calculator) may have none
    wants_bars = name in RUN_ALWAYS or bool(bar_cells)
    report.check(
        set(bar_cells) <= progress_cells and (bool(progress_cells) or not wants_bars),
        f"{name}: tqdm bars render as progress widgets (cells {sorted(progress_cells)})",
        f"bars in cells {bar_cells} never shown as a progress widget",
    )
    lifeless = [
        c["index"]
        for c in state["cells"]
        for o, s in zip(c["outputs"], c["shown"], strict=False)
        if o["widget"] and not re.search(r"\d+%\|", o["plain"]) and s["controls"] == 0 and not s["progress"]
    ]
    report.check(not lifeless, f"{name}: every widget renders as a control", f"cells {lifeless}")
    cut = [(c["index"], label) for c in state["cells"] for s in c["shown"] for label in s["cutLabels"]]
    report.check(not cut, f"{name}: no widget label is cut off", f"{cut}")
    verdictless = _verdictless_checkers(state)
    report.check(not verdictless, f"{name}: every checker cell prints a verdict", f"cells {verdictless}")
    check_interact(report, name, page)
    errors = _cells_with_error(page.evaluate(STATE_JS, name))
    report.check(not errors, f"{name}: no error or stderr output after using the widgets", f"cells {errors}")


def _screenshot(page, path: Path, selector: str | None) -> None:
    """A screenshot of the viewport, scrolled to the first element matching `selector` (if any)."""
    if selector and page.locator(selector).count():
        page.locator(selector).first.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
    page.screenshot(path=str(path))


def check_notebook(report: Report, lab: Lab, context, path: Path, run_all: bool) -> None:
    """Open one notebook in a fresh page, check it, run it if asked, save screenshots; close its kernel."""
    name = path.name
    print(f"{name}:", flush=True)
    stem = path.stem
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    failures_before = len(report.failures)
    try:
        page.goto(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}", timeout=PAGE_TIMEOUT * 1000)
        page.wait_for_function(PANEL_READY_JS, arg=name, timeout=PAGE_TIMEOUT * 1000, polling=500)
        page.evaluate(KERNEL_INFO_JS, name)
        check_opened(report, name, page)
        _screenshot(page, SCREENSHOTS / f"{stem}-opened.png", ".jp-InputPlaceholder")
        check_pictures_and_asides(report, name, page, path)
        _screenshot(page, SCREENSHOTS / f"{stem}-pictures.png", ".jp-RenderedMarkdown img[src*='figures/']")
        if run_all:
            check_after_run_all(report, name, page)
            _screenshot(page, SCREENSHOTS / f"{stem}-after-run-all.png", ".jp-OutputArea-output .jupyter-widgets")
    except Exception as error:  # a check that could not even run is a failure of this notebook
        report.check(False, f"{name}: browser session", f"{type(error).__name__}: {str(error)[:500]}")
    finally:
        if len(report.failures) > failures_before:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(SCREENSHOTS / f"{stem}-failure.png"))
            (SCREENSHOTS / f"{stem}-console.log").write_text("\n".join(console) + "\n")
            print(f"  see {SCREENSHOTS / (stem + '-failure.png')} and {stem}-console.log", flush=True)
        with contextlib.suppress(Exception):
            page.close()
        with contextlib.suppress(Exception):
            lab.shutdown_kernels()


def _wants_run_all(path: Path) -> bool:
    if path.name in RUN_ALWAYS:
        return True
    cells = json.loads(path.read_text())["cells"]
    return any(
        WIDGET_SOURCE.search("".join(c.get("source", "")))
        or any(WIDGET_MIME in o.get("data", {}) for o in c.get("outputs", []))
        for c in cells
        if c.get("cell_type") == "code"
    )


def _digests(paths: list[Path]) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/NN_*.ipynb")
    parser.add_argument("--open-only", action="store_true", help="skip Run All (opening checks only)")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    for path in paths:
        if not path.is_file() or path.suffix != ".ipynb":
            parser.error(f"not a notebook: {path}")
    if len({p.parent for p in paths}) != 1:
        parser.error("the notebooks must be in one folder (it becomes JupyterLab's root_dir)")
    chromium = find_chromium()
    if chromium is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("Playwright is missing: .venv/bin/python -m pip install -r requirements-browser.txt", file=sys.stderr)
        return 2
    _become_subreaper()
    SCREENSHOTS.mkdir(exist_ok=True)
    for old in SCREENSHOTS.glob("*"):
        old.unlink()
    report = Report()
    before = _digests(paths)
    started = time.monotonic()
    print(f"Chromium: {chromium}; notebooks: {', '.join(p.name for p in paths)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="lab-check-") as scratch:
        try:
            with jupyter_lab(paths[0].parent, Path(scratch), report) as lab, sync_playwright() as playwright:
                context = playwright.chromium.launch_persistent_context(
                    str(Path(scratch) / "chromium-profile"),
                    executable_path=str(chromium),
                    headless=True,
                    args=CHROMIUM_FLAGS,
                    viewport={"width": 1400, "height": 1000},
                )
                try:
                    for path in paths:
                        check_notebook(report, lab, context, path, run_all=_wants_run_all(path) and not args.open_only)
                finally:
                    context.close()
        except Exception as error:
            report.check(False, "JupyterLab and Chromium started", f"{type(error).__name__}: {error}")
        finally:
            if report.failures:
                with contextlib.suppress(OSError):
                    shutil.copy(Path(scratch) / "jupyterlab.log", SCREENSHOTS / "jupyterlab.log")
    changed = [p.name for p, digest in _digests(paths).items() if before[p] != digest]
    report.check(not changed, "no notebook file was written by the run", ", ".join(changed))
    print(f"screenshots: {SCREENSHOTS}", flush=True)
    print(f"browser check took {time.monotonic() - started:.0f} s", flush=True)
    print(f"{report.passed} passed, {len(report.failures)} failed", flush=True)
    for failure in report.failures:
        print(f"FAILED {failure}", flush=True)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
