"""The review flag from an analysis of the code: each way to reach the grading machinery is found, in several
spellings, and no honest sample of any assignment is flagged."""

import nbformat
import pytest

from autograder.course import ROOT, Course, read_notebook
from autograder.kernel.machinery import findings, protected_names
from autograder.authoring.samples import samples
from autograder.pipeline.structure import normalise

SETUP = '''import numpy as np
import torch
import matplotlib.pyplot as plt

from checks import check_close, check_equal, default_device

DEVICE = default_device()
'''
PROTECTED = protected_names([SETUP])

TOUCHES = {
    "imports of the machinery": [
        "import checks",
        "from checks import records",
        "import IPython.display as d",
        "from nbgrader.utils import determine_grade",
        "import autograder.pipeline.verdict",
        "from . import checks",
        "import importlib\nimportlib.import_module('x')",
        "import builtins",
        "import gc",
        "import ctypes",
        "import inspect",
        "import threading",
        "from sys import modules",
        "from torch._C import TensorBase",
    ],
    "names that reach the kernel or build code": [
        "get_ipython().events.register('pre_run_cell', print)",
        "display({'text/plain': ''}, raw=True)",
        "exec('x = 1')",
        "eval('1 + 1')",
        "compile('x', 'f', 'exec')",
        "__import__('che' + 'cks')",
        "globals()['check_' + 'equal'] = print",
        "vars()['x'] = 1",
        "setattr(torch, 'equal', print)",
        "getattr(torch, 'eq' + 'ual')",
        "print(In[-1])",
        "print(_ih)",
        "__builtins__.print = None",
        "type('T', (torch.Tensor,), {})",
        "f = 'get_ipython'",
    ],
    "rebinding helpers and patching modules": [
        "check_equal = print",
        "def check_close(*args, **kwargs):\n    pass",
        "DEVICE = 'meta'",
        "for check_equal in [print]:\n    pass",
        "import numpy as check_close",
        "import numpy.linalg as np",
        "def f():\n    global check_equal\n    check_equal = print",
        "torch.equal = lambda a, b: True",
        "torch.Tensor.tolist = lambda self: []",
        "np.testing.assert_allclose = print",
        "del torch.allclose",
        "import os\nos.environ['COURSE_DEVICE'] = 'meta'",
        "import os\nos.environ.update(COURSE_DEVICE='meta')",
        "result.detach = lambda: right",
    ],
    "frames and interpreter internals": [
        "import sys\nsys._getframe(1).f_globals['check_equal'] = print",
        "import sys\nsys.modules['checks'].records.clear()",
        "import sys\nsys.settrace(print)",
        "f = check_equal.__globals__",
        "().__class__.__base__.__subclasses__()",
        "x = error.__traceback__.tb_frame.f_back",
        "torch._C._set_grad_enabled(True)",
        "torch.overrides.TorchFunctionMode().__enter__()",
        "class T(torch.Tensor):\n    pass",
        "class M:\n    def __torch_function__(self, *args):\n        pass",
        "class E:\n    def __eq__(self, other):\n        return True",
        "x = torch.zeros(2).as_subclass(object)",
    ],
    "writes to files beside the notebook": [
        "open('checks.py', 'w').write('')",
        "open('checks.py', mode='a')",
        "with open('checks.py', 'r+') as f:\n    pass",
        "open(name, mode)",
        "import pathlib\npathlib.Path('checks.py').write_text('')",
        "from pathlib import Path\nPath('c').write_bytes(b'')",
        "import os\nos.remove('checks.py')",
        "import shutil",
        "torch.save(x, 'checks.py')",
        "np.save('x', x)",
        "s = 'checks.py'",
    ],
    "magics, shell escapes and unparsable code": [
        "%history",
        "!rm checks.py",
        "%timeit exec('x = 1')",
        "%%capture\nx = 1",
        "def one_hot(:",
    ],
}
CASES = [(kind, code) for kind, codes in TOUCHES.items() for code in codes]

HONEST = [
    "import numpy as np\nimport torch\nimport math",
    "import torch.nn.functional as F\nfrom torch import nn",
    "import os\ndevice = os.environ.get('COURSE_DEVICE', 'cpu')",
    "from torch.utils._pytree import tree_map",
    "with open('data.txt') as f:\n    text = f.read()",
    "%timeit torch.zeros(3)",
    "%matplotlib inline",
    "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.size = 3",
    "w.grad = None\nw.requires_grad_(True)\nw.data = w.data - 0.1",
    "check_equal(one_hot(labels, 3), expected, label='mine')",
    "print(type(x).__name__, x.__array_interface__['data'][0])",
    "if __name__ == '__main__':\n    pass",
    "getattr(torch, 'float32')",
    "name = 'x'.replace('x', 'y')",
]


@pytest.mark.parametrize(("kind", "code"), CASES, ids=[f"{kind}: {code[:40]}" for kind, code in CASES])
def test_code_that_touches_the_machinery_is_found(kind, code):
    assert findings(code, protected=PROTECTED) != []


@pytest.mark.parametrize("code", HONEST, ids=[code[:40] for code in HONEST])
def test_honest_code_is_not_flagged(code):
    assert findings(code, protected=PROTECTED) == []


def test_a_finding_names_its_line_and_quotes_the_code():
    found = findings("x = 1\nimport checks", protected=PROTECTED)
    assert found == ["line 2: imports the module checks ('import checks')"]


def test_the_notebooks_own_names_are_protected_with_the_modules_they_name():
    assert PROTECTED["np"] == "numpy" and PROTECTED["check_close"] == "checks.check_close"
    assert PROTECTED["DEVICE"] is None


def test_every_sample_of_every_assignment_is_flagged_exactly_when_it_must_be():
    """Honest samples (the reference, wrong answers, valid alternatives) are not flagged; every sample whose
    expected status is ``review`` is."""
    course = Course(ROOT)
    wrong = []
    for assignment_id in course.assignment_ids():
        release = read_notebook(course.release_notebook(assignment_id))
        for sample in samples(course, assignment_id):
            review = normalise(nbformat.writes(sample.notebook).encode(), release=release).review
            if bool(review) != (sample.expected_status == "review"):
                wrong.append((assignment_id, sample.student_id, review[:3]))
    assert wrong == []
