"""Notes that belong in an mmengine run's log and nowhere else."""
import logging

from mmengine.logging import MMLogger, print_log

# the logger of a plain Python program: silent unless its user configures logging
logger = logging.getLogger('mmvit5')


def in_runner() -> bool:
    """Whether an mmengine Runner (or a tool that logs as one) has made its logger in this
    process: it names it after the run, where mmengine's own default one is ``'mmengine'``."""
    return any(name != 'mmengine' for name in MMLogger._instance_dict)


def log_in_run(message: str) -> None:
    """``message`` at INFO in the current mmengine run's log; outside one (timm, plain
    torch) to the standard ``mmvit5`` logger, so that a script prints no mmengine line it did
    not ask for (``logging.basicConfig(level=logging.INFO)`` shows them)."""
    if in_runner():
        print_log(message, logger='current')
    else:
        logger.info(message)
