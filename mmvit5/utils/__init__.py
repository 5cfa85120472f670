from .config import (SCOPES, add_runner_args, build_runner, check_config, config_from_args,
                     enable_amp, enable_resume, load_config)

__all__ = ['SCOPES', 'add_runner_args', 'build_runner', 'check_config', 'config_from_args',
           'enable_amp', 'enable_resume', 'load_config']
