"""The course's explanatory pictures, drawn by code so they can be regenerated, restyled and reviewed.

Each chapter's pictures live in a module of their own (`ch00.py`, `ch01.py`, ...; `course.py` has the
README's), as functions registered
with `@figure` (a still picture, stored as SVG) or `@animation` (a picture in steps, stored as an animated
GIF for the website and stepped through with `stepper` in JupyterLab, where motion is the lesson). The
stored files in `notebooks/figures/` are what markdown cells show, so a notebook and the website show them
without running anything; `python -m helpers.diagrams` redraws them and tests/test_diagrams.py checks
that every stored file is what the code draws now.

Not imported by `helpers/__init__.py`: only the notebooks' stepper cells and the tools need matplotlib.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FIGURES_DIR = Path(__file__).resolve().parent.parent.parent / "notebooks" / "figures"
GIF_MS_PER_STEP = 1400  # long enough to read a step's caption on the website

__all__ = ["Diagram", "figure", "animation", "registry", "render", "write", "stale", "stepper", "FIGURES_DIR"]


@dataclass(frozen=True)
class Diagram:
    """One registered picture. `steps` is 0 for a still picture, else the number of frames."""

    name: str
    alt: str
    draw: Callable
    steps: int = 0

    @property
    def filename(self) -> str:
        return f"{self.name}.{'gif' if self.steps else 'svg'}"


_REGISTRY: dict[str, Diagram] = {}


def _register(diagram: Diagram) -> None:
    if not diagram.name or not diagram.name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"name must be letters, digits, '-' or '_', got {diagram.name!r}")
    if not diagram.alt.strip():
        raise ValueError(f"diagram {diagram.name!r} needs alt text (what the picture shows, for a screen reader)")
    existing = _REGISTRY.get(diagram.name)
    if existing is not None and existing.draw.__qualname__ != diagram.draw.__qualname__:
        raise ValueError(f"two diagrams are named {diagram.name!r}")
    _REGISTRY[diagram.name] = diagram


def figure(name: str, alt: str) -> Callable[[Callable], Callable]:
    """Register a function that takes no argument and returns a matplotlib Figure."""

    def register(draw: Callable) -> Callable:
        _register(Diagram(name, alt, draw))
        return draw

    return register


def animation(name: str, alt: str, steps: int) -> Callable[[Callable], Callable]:
    """Register a function that takes a step (0 .. steps - 1) and returns that step's Figure."""
    if not isinstance(steps, int) or steps < 2:
        raise ValueError(f"an animation needs steps >= 2 (an int), got {steps!r}")

    def register(draw: Callable) -> Callable:
        _register(Diagram(name, alt, draw, steps))
        return draw

    return register


def registry() -> dict[str, Diagram]:
    """Every diagram of every chapter module, by name (importing the modules registers them)."""
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("ch") or info.name == "course":
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(sorted(_REGISTRY.items()))


def _svg(fig) -> bytes:
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "course", "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return buf.getvalue()


def frame_png(diagram: Diagram, step: int) -> bytes:
    """One step of an animation as PNG bytes (what the stepper and the GIF show)."""
    if not 0 <= step < diagram.steps:
        raise ValueError(f"step must be in 0..{diagram.steps - 1} for {diagram.name!r}, got {step!r}")
    fig = diagram.draw(step)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _gif(diagram: Diagram) -> bytes:
    from PIL import Image

    frames = [Image.open(io.BytesIO(frame_png(diagram, s))).convert("RGB") for s in range(diagram.steps)]
    # One palette for all frames, so a colour does not flicker between steps.
    palette = frames[0].quantize(colors=255, method=Image.Quantize.MEDIANCUT)
    frames = [f.quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=GIF_MS_PER_STEP, loop=0)
    return buf.getvalue()


def render(diagram: Diagram) -> bytes:
    """The bytes of the stored file: SVG for a still picture, GIF for an animation."""
    return _gif(diagram) if diagram.steps else _svg(diagram.draw())


def _select(names: list[str] | None) -> list[Diagram]:
    known = registry()
    if names is None:
        return list(known.values())
    unknown = [n for n in names if not any(n == d or d.startswith(f"{n}-") for d in known)]
    if unknown:
        raise ValueError(f"no diagram or chapter prefix {unknown}; known diagrams: {', '.join(known)}")
    return [d for key, d in known.items() if any(n == key or key.startswith(f"{n}-") for n in names)]


def write(names: list[str] | None = None, folder: Path = FIGURES_DIR) -> list[Path]:
    """Draw the diagrams named (a name, or a chapter prefix such as '05'; all when None) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for diagram in _select(names):
        path = folder / diagram.filename
        path.write_bytes(render(diagram))
        written.append(path)
    return written


def stale(folder: Path = FIGURES_DIR) -> list[str]:
    """The diagrams whose stored file is missing or differs from what the code draws now."""
    return [d.name for d in registry().values() if not (folder / d.filename).is_file()
            or (folder / d.filename).read_bytes() != render(d)]  # fmt: skip


def stepper(name: str):
    """Step through an animated diagram in JupyterLab: a play button and a slider over its frames."""
    import ipywidgets as widgets

    if not isinstance(name, str):
        raise TypeError(f"name must be a diagram's name (str), got {type(name).__name__}")
    diagram = registry().get(name)
    if diagram is None or not diagram.steps:
        animated = [d.name for d in registry().values() if d.steps]
        raise ValueError(f"name must be one of the animated diagrams {animated}, got {name!r}")
    frames = [frame_png(diagram, s) for s in range(diagram.steps)]
    image = widgets.Image(value=frames[0], format="png", layout=widgets.Layout(max_width="100%"))
    play = widgets.Play(value=0, min=0, max=diagram.steps - 1, interval=GIF_MS_PER_STEP, description="play")
    slider = widgets.IntSlider(value=0, min=0, max=diagram.steps - 1, description="step")
    widgets.jslink((play, "value"), (slider, "value"))
    slider.observe(lambda change: setattr(image, "value", frames[change["new"]]), names="value")
    return widgets.VBox([widgets.HBox([play, slider]), image])
