"""Sphinx configuration of the course's website: `make site` (see README, "The course as a website").

Sources are the repository itself (README.md as the landing page, every notebooks/NN_*.ipynb in course
order, CHEATSHEET.md, INSTRUCTORS.md and site/setup.md), read as they are: the extension `course_site`
does at build time what the files leave to JupyterLab (collapsed solutions, the links between chapters,
the learner edition). Nothing is executed: the pages show the outputs the notebooks store.
"""

import os
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parent
sys.path.insert(0, str(SITE / "_ext"))
sys.path.insert(0, str(SITE.parent))  # helpers.student's learner edition

project = "PyTorch multiprocessing, an interactive course"
author = "the course's authors"
copyright = "the course's authors"
language = "en"

extensions = ["myst_nb", "course_site"]

root_doc = "README"
# "full" (default) or "learner": the learner edition has no solutions at all, and no instructors' guide.
course_edition = os.environ.get("SITE_EDITION", "full")
include_patterns = ["README.md", "CHEATSHEET.md", "INSTRUCTORS.md", "notebooks/[0-9][0-9]_*.ipynb", "site/*.md"]
if course_edition == "learner":
    include_patterns.remove("INSTRUCTORS.md")
exclude_patterns = ["build", ".venv", "student", "**/.ipynb_checkpoints"]

# The outputs the notebooks store are what the site shows; no kernel is started while building.
nb_execution_mode = "off"
nb_merge_streams = True
nb_output_stderr = "show"
myst_enable_extensions = ["colon_fence"]  # no dollarmath: MathJax would come from a CDN
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]


html_theme = "sphinx_book_theme"
html_title = "PyTorch multiprocessing"
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
}

# Headings get JupyterLab's anchors too (the cheat sheet's links were written for JupyterLab).
myst_heading_slug_func = "course_site.jupyterlab_anchor"
# A solution cell is collapsed (tag hide-input, added at build time) behind this prompt.
nb_code_prompt_show = "Show the solution"
nb_code_prompt_hide = "Hide the solution"

html_static_path = ["_static"]
# Section hits for a query's words (Sphinx lists a section only when the query is most of its title).
html_js_files = [("section_search.js", {"defer": "defer"})]
html_css_files = ["course.css"]
# The theme reads its colour mode from here; left empty, it logs a console error on the first page.
html_context = {"default_mode": "light"}
# Browsers ask for a favicon on the first page; without one that is a 404 in the console.
html_favicon = "_static/favicon.svg"
