"""mmvit5: ViT-5 as an OpenMMLab backbone for detection and segmentation."""
import os
import re

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

from _mmvit5_hook import PTH_LINE, PTH_NAME

here = os.path.dirname(os.path.abspath(__file__))


EXTRAS = ('tests', 'benchmark', 'deploy', 'docs', 'hf')


def read_requirements(name: str) -> list:
    """The requirement lines of ``requirements/<name>.txt``.

    torch/torchvision are installed by tools/install.sh in a fixed order (mmcv must match the
    installed torch, and GPU users bring their own CUDA build), so they are checked by
    tools/check_env.py but not resolved by pip here.
    """
    names = []
    with open(os.path.join(here, 'requirements', f'{name}.txt')) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if line and not re.match(r'^(torch|torchvision|mmcv)\b', line):
                names.append(line)
    return names


class BuildWithPth(build_py):
    """Ship ``mmvit5-mmcv-ext.pth`` at the wheel's root, i.e. in site-packages.

    Editable installs take no build outputs beyond the package path; ``tools/install.sh``
    writes the file for them (``python _mmvit5_hook.py``).
    """

    def run(self):
        super().run()
        self.mkpath(self.build_lib)
        with open(os.path.join(self.build_lib, PTH_NAME), 'w') as f:
            f.write(PTH_LINE)

    def get_outputs(self, *args, **kwargs):
        return super().get_outputs(*args, **kwargs) + [os.path.join(self.build_lib, PTH_NAME)]


def read_version():
    with open(os.path.join(here, 'mmvit5', 'version.py')) as f:
        return re.search(r"__version__ = '([^']+)'", f.read()).group(1)


setup(
    name='mmvit5',
    version=read_version(),
    description='ViT-5 backbone, pyramid neck and configs for mmdet / mmseg / mmpretrain',
    long_description=open(os.path.join(here, 'README.md')).read(),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    url='https://github.com/mmvit5/mmvit5',
    project_urls={'Issues': 'https://github.com/mmvit5/mmvit5/issues'},
    packages=find_packages(include=['mmvit5', 'mmvit5.*']),
    py_modules=['_mmvit5_hook'],
    cmdclass={'build_py': BuildWithPth},
    python_requires='>=3.9',
    install_requires=read_requirements('runtime'),
    # pip install -e .[benchmark]: what a tool needs beyond the runtime; `all` is every extra
    extras_require={**{name: read_requirements(name) for name in EXTRAS},
                    'all': sorted({req for name in EXTRAS for req in read_requirements(name)})},
)
