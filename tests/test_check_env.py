"""tools/check_env.py: the supported torch range and what it tells a user outside it."""
import check_env


def write(tmp_path, text):
    path = tmp_path / 'requirements.txt'
    path.write_text(text)
    return check_env.requirements(str(path))


def test_ranges_and_pins_are_read(tmp_path):
    reqs = write(tmp_path, '# comment\ntorch>=2.6,<2.15\nmmengine==0.10.7\nregex\n')
    assert reqs == {'torch': [('>=', '2.6'), ('<', '2.15')], 'mmengine': [('==', '0.10.7')]}
    assert check_env.satisfies('2.14.1+cu130', reqs['torch'])
    assert check_env.satisfies('2.6.0', reqs['torch'])
    assert not check_env.satisfies('2.5.1', reqs['torch'])
    assert not check_env.satisfies('2.15.0', reqs['torch'])


def test_installed_torch_outside_the_range_is_refused_with_the_fix(tmp_path):
    reqs = write(tmp_path, 'torch>=99.0,<100\ntorchvision>=0.21,<0.30\n')
    problems = check_env.torch_problems(reqs)
    assert len(problems) == 1
    assert 'outside the supported range >=99.0,<100' in problems[0]
    assert 'pip install torch==2.14.1 torchvision==0.29.1' in problems[0]
    assert check_env.torch_problems(write(tmp_path, 'torch>=2.6,<2.15\n'
                                                    'torchvision>=0.21,<0.30\n')) == []
