from .config import SCOPES, check_config, enable_amp, enable_resume, load_config

__all__ = ['SCOPES', 'check_config', 'enable_amp', 'enable_resume', 'load_config']
