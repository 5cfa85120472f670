"""Sphinx configuration of the mmvit5 docs (Markdown pages through myst-parser, as OpenMMLab).

Build: ``sphinx-build -W -b html docs/en docs/en/_build/html`` (tests/test_docs.py does, with
warnings as errors; .readthedocs.yaml publishes it the same way). The landing page, index.md,
includes the README's overview and configs table rather than copying them.
"""
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, REPO)  # the API page documents this checkout's mmvit5

project = 'mmvit5'
copyright = '2026, mmvit5 contributors'
author = 'mmvit5 contributors'
version = release = open(os.path.join(REPO, 'mmvit5', 'version.py')).read().split("'")[1]

extensions = ['myst_parser', 'sphinx.ext.autodoc', 'sphinx.ext.napoleon', 'sphinx.ext.viewcode',
              'sphinx_copybutton']
source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown'}
exclude_patterns = ['_build']
myst_heading_anchors = 3  # [text](page.md#a-heading) links, checked at build time
napoleon_google_docstring = True  # the code's docstrings use `Args:` / `Returns:` sections
napoleon_numpy_docstring = False
autodoc_member_order = 'bysource'
autodoc_typehints = 'description'
# an undocumented override (forward) shows nothing rather than nn.Module's "Define the
# computation performed at every call" boilerplate
autodoc_inherit_docstrings = False
# the copy button leaves out prompts and the output of interactive examples
copybutton_prompt_text = r'>>> |\.\.\. |\$ '
copybutton_prompt_is_regexp = True
html_theme = 'sphinx_rtd_theme'
html_static_path = ['_static']
html_css_files = ['css/mmvit5.css']  # wide tables and code scroll in their box
# "Edit on GitHub" on every page (the theme's source link); the landing page's "Cite, licence,
# issues" section (from the README) links the repository and its issues
REPOSITORY = 'https://github.com/mmvit5/mmvit5'
html_context = dict(display_github=True, github_user=REPOSITORY.split('/')[-2],
                    github_repo=REPOSITORY.split('/')[-1], github_version='main',
                    conf_py_path='/docs/en/')
