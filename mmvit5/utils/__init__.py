from .coco_checks import check_coco_categories, coco_summary
from .config import (
    SCOPES,
    amp_for_device,
    build_runner,
    check_config,
    config_from_args,
    enable_amp,
    enable_resume,
    load_config,
)
from .custom_data import (
    OwnData,
    check_masks,
    coco_classes,
    read_class_file,
    read_coco_splits,
    set_num_classes,
    use_coco_data,
    use_seg_folder,
)
from .palette import distinct_palette, usable_palette
from .pretrained import check_pretrained, pretrained_checkpoints
from .schedule import fit_schedule
from .widths import check_widths, shrink_model, sync_widths, width_mismatches

__all__ = ['OwnData', 'SCOPES', 'amp_for_device', 'build_runner', 'check_coco_categories',
           'check_config', 'check_masks', 'check_pretrained', 'check_widths', 'coco_classes',
           'coco_summary', 'config_from_args', 'distinct_palette', 'enable_amp', 'enable_resume',
           'fit_schedule', 'load_config', 'pretrained_checkpoints', 'read_class_file',
           'read_coco_splits', 'set_num_classes', 'shrink_model', 'sync_widths',
           'usable_palette', 'use_coco_data', 'use_seg_folder', 'width_mismatches']
