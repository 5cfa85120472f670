"""Every Mask2Former and depth recipe names the published figure it is measured against (its
``anchor`` dict), and the docs page's anchor table and the README's results table quote the
same figure for it, with the recipe's own result "not yet measured" until a run is recorded."""
import glob
import os.path as osp

import pytest
from mmengine.config import Config

from benchmarks.results import ANCHORS, NOT_MEASURED, load_runs
from conftest import REPO

PAGES = {'mask2former': 'mask2former.md', 'depth': 'depth.md'}
RECIPES = sorted(osp.basename(p) for p in glob.glob(osp.join(REPO, 'configs', 'vit5*.py'))
                 if any(key in p for key in PAGES))


def page_for(name: str) -> str:
    page = next(page for key, page in PAGES.items() if key in name)
    with open(osp.join(REPO, 'docs', 'en', 'user_guides', page)) as f:
        return f.read()


def test_every_recipe_is_found():
    # ADE20K / COCO instance / COCO panoptic Mask2Former and NYU depth, B and L each
    assert len(RECIPES) == 8, RECIPES


@pytest.mark.parametrize('name', RECIPES)
def test_anchor_in_config_docs_and_results_table(name):
    anchor = Config.fromfile(osp.join(REPO, 'configs', name)).get('anchor')
    assert anchor is not None, f'{name} has no `anchor` dict (issue 24: each config carries one)'
    assert set(anchor) == {'model', 'metric', 'value', 'source'}, anchor
    value = str(anchor['value'])

    # the docs page: a row of the anchor table that names this config and quotes the figure
    rows = [line for line in page_for(name).splitlines()
            if line.startswith('|') and f'`{name}`' in line]
    assert any(value in row for row in rows), (name, value, rows)

    # the README / results table: a published row with the same figure
    assert any(value in a.published for a in ANCHORS if a.config is None), (name, value)

    # "not yet measured" in the docs only while no run of the recipe is recorded
    runs = load_runs(osp.join(REPO, 'results', 'runs.json'))
    measured = any(run.config == name for run in runs)
    assert any(NOT_MEASURED in row for row in rows) != measured, (name, rows)
