"""benchmarks/components.py: every ViT-5 variant is built, exported to ONNX and timed in
eager and ONNX Runtime, in alternation, and the report gives each part's cost."""
import math

import pytest
import torch

from benchmarks.components import FULL, component_times, select_components
from benchmarks.core import Setup
from benchmarks.report import components_tables, save_components_plot
from mmvit5.models import ViT5

pytestmark = pytest.mark.slow  # times components, eager and ONNX


def tiny(**switches):
    return ViT5(arch=dict(embed_dim=64, depth=1, num_heads=2), img_size=32, **switches)


def test_component_costs_in_eager_and_onnx_runtime(tmp_path):
    components = select_components('rope,registers')
    # the two switches that change the token sequence and the attention inputs
    assert [c.key for c in components] == [FULL.key, 'rope', 'registers']
    setup = Setup(torch.device('cpu'), torch.float32, batch=1, warmup=0, repeats=1)
    results = component_times('tiny', components, sizes=[32, 48], train_sizes=[32], rounds=2,
                              setup=setup, build=tiny)

    assert [(r.input, r.runtime) for r in results] == [
        ('32x32', 'eager forward'), ('32x32', 'ORT forward'), ('32x32', 'eager train step'),
        ('48x48', 'eager forward'), ('48x48', 'ORT forward')]
    for times in results:
        assert not times.note, times.note
        assert set(times.latencies_ms) == {c.key for c in components}
        for component in components[1:]:
            cost = times.cost(component.key)
            assert len(cost) == 2 and all(math.isfinite(c) and c > -1 for c in cost)

    report = components_tables(results, components)
    assert '| tiny | no RoPE | ' in report and '| tiny | registers (4) | ' in report
    assert '48x48 ORT forward' in report and 'n/a' not in report
    plot = tmp_path / 'components.png'
    save_components_plot(results, components, str(plot))
    assert plot.stat().st_size > 0
