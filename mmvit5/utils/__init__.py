"""What the runtime and the tools share: config checks, own-data preparation, schedules.

Each name is imported from its module on first use (PEP 562), so that ``import mmvit5`` (which
needs :mod:`.after_import` only) does not import mmengine's runner, mmdet or PIL through
:mod:`.config` or :mod:`.custom_data`.
"""
import importlib

_MODULES = {
    'OwnData': 'custom_data',
    'SCOPES': 'config',
    'amp_for_device': 'config',
    'build_runner': 'config',
    'check_coco_categories': 'coco_checks',
    'check_config': 'config',
    'check_masks': 'custom_data',
    'check_pretrained': 'pretrained',
    'check_widths': 'widths',
    'coco_classes': 'custom_data',
    'coco_summary': 'coco_checks',
    'config_from_args': 'config',
    'distinct_palette': 'palette',
    'enable_amp': 'config',
    'enable_resume': 'config',
    'fit_schedule': 'schedule',
    'load_config': 'config',
    'pretrained_checkpoints': 'pretrained',
    'read_class_file': 'custom_data',
    'read_coco_splits': 'custom_data',
    'set_num_classes': 'custom_data',
    'shrink_model': 'widths',
    'sync_widths': 'widths',
    'usable_palette': 'palette',
    'use_coco_data': 'custom_data',
    'use_seg_folder': 'custom_data',
    'width_mismatches': 'widths',
}
__all__ = sorted(_MODULES)


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    value = getattr(importlib.import_module(f'.{_MODULES[name]}', __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_MODULES))
