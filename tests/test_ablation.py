"""configs/ablations/ and the toy ablation study (benchmarks/ablation.py,
tools/ablation_study.py)."""
import json

import pytest
from mmengine.config import Config
from mmengine.registry import DefaultScope, init_default_scope

from benchmarks.ablation import (
    SWITCHES,
    ablation_configs,
    markdown_table,
    summarize,
    switch_override,
    variant_override,
)
from conftest import REPO, config, run_tool, tool

RECIPES = {'vit5_maskrcnn_coco': 'mmdet', 'vit5_upernet_ade20k': 'mmseg'}


@pytest.mark.parametrize('recipe', sorted(RECIPES))
def test_every_ablation_config_sets_one_switch_that_builds(recipe):
    scope = RECIPES[recipe]
    configs = ablation_configs(f'{REPO}/configs', recipe)
    # the same variants for both recipes, every switch covered
    assert set(configs) == set(ablation_configs(f'{REPO}/configs', 'vit5_upernet_ade20k'))
    recipe_cfg = Config.fromfile(config(f'{recipe}.py'))
    registry = __import__(f'{scope}.registry', fromlist=['MODELS']).MODELS
    init_default_scope(scope)
    switched = set()
    for name, path in configs.items():
        cfg = Config.fromfile(path)
        assert cfg.model.neck == recipe_cfg.model.neck, name  # the rest is the recipe's
        override = switch_override(cfg, recipe_cfg, path)
        assert len(override) == 1, (name, override)
        switched |= set(override)
        # what the override changes is the backbone (the recipes build in test_configs.py); a
        # narrow one keeps the build cheap
        cfg.model.backbone.update(arch=dict(embed_dim=64, depth=12, num_heads=2), init_cfg=None)
        with DefaultScope.overwrite_default_scope(scope):
            backbone = registry.build(cfg.model.backbone)
        assert backbone.switches() == override, name
    assert switched == set(SWITCHES)


def test_summary_is_mean_and_spread_against_the_baseline():
    results = {name: dict(override=override,
                          runs=[dict(seed=s, mIoU=v) for s, v in enumerate(values)])
               for name, override, values in (('baseline', {}, [40.0, 44.0, 42.0]),
                                              ('no-rope', dict(use_rope=False), [30.0, 31.0]))}
    summary = summarize(results, 'mIoU')
    assert summary['baseline']['mean'] == 42.0 and summary['baseline']['std'] == 2.0
    assert summary['no-rope']['delta'] == -11.5
    assert summary['no-rope']['delta_se'] == pytest.approx((0.5 / 2 + 4 / 3)**0.5)
    table = markdown_table(results, summary, 'mIoU')
    assert '| baseline | (released) | 42.0 ± 2.0 | 40.0 - 44.0 | 40.0 / 44.0 / 42.0 | - | - |' \
        in table
    # paired by seed: 30 - 40 and 31 - 44
    assert summary['no-rope']['paired']['mean'] == -11.5 and summary['no-rope']['ahead'] == 0
    assert '| no-rope | use_rope=False | 30.5 ± 0.7 | 30.0 - 31.0 | 30.0 / 31.0 | -11.5 ± 1.3 | ' \
        '-11.5 ± 2.1 (0/2) |' in table


@pytest.mark.parametrize('recipe', sorted(RECIPES))
def test_plain_vit_switches_every_addition_of_vit5_off(recipe):
    """ViT-5 against a plain ViT: the union of five ablation configs, read back from them."""
    override = variant_override('plain-vit', ablation_configs(f'{REPO}/configs', recipe),
                                Config.fromfile(config(f'{recipe}.py')))
    assert override == dict(norm='ln', num_registers=0, use_rope=False,
                            layer_scale_init_value=None, qk_norm=False)


def test_study_tool_trains_a_variant_and_writes_the_table(tmp_path):
    out = tmp_path / 'study'
    log = run_tool(tool('ablation_study.py') + [
        '--variants', 'reg8', '--seeds', '3', '--iters', '2', '--train-images', '4',
        '--val-images', '2', '--jobs', '2', '--out', str(out)], cwd=tmp_path)
    data = json.loads((out / 'results.json').read_text())
    assert list(data['results']) == ['baseline', 'reg8']
    assert data['results']['reg8']['override'] == {'num_registers': 8}
    for result in data['results'].values():
        assert [run['seed'] for run in result['runs']] == [3]
        assert 0 <= result['runs'][0]['mIoU'] <= 100
    assert '| reg8 | num_registers=8 |' in (out / 'results.md').read_text()
    assert '| reg8 | num_registers=8 |' in log
    # run again: every run is read back from its work dir, none trained again
    again = run_tool(tool('ablation_study.py') + [
        '--variants', 'reg8', '--seeds', '3', '--iters', '2', '--train-images', '4',
        '--val-images', '2', '--jobs', '2', '--out', str(out)], cwd=tmp_path)
    assert again.count('finished before') == 2
    assert json.loads((out / 'results.json').read_text())['results'] == data['results']
    with pytest.raises(AssertionError, match=r"unknown variants \['reg7'\]"):
        run_tool(tool('ablation_study.py') + ['--variants', 'reg7', '--out', str(out)],
                 cwd=tmp_path)
