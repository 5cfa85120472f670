from .config import (
    SCOPES,
    add_runner_args,
    amp_for_device,
    build_runner,
    check_config,
    config_from_args,
    enable_amp,
    enable_resume,
    load_config,
)
from .widths import check_widths, shrink_model, sync_widths, width_mismatches

__all__ = ['SCOPES', 'add_runner_args', 'amp_for_device', 'build_runner', 'check_config',
           'check_widths', 'config_from_args', 'enable_amp', 'enable_resume', 'load_config',
           'shrink_model', 'sync_widths', 'width_mismatches']
