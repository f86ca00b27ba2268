"""What in a student's code touches the grading machinery: an analysis of its syntax tree, for the ``review`` status.

The check records are built in the student's kernel (``autograder/kernel/checks.py``), so code there can always lie
about its own values: reach the check helpers' module or IPython's display and record whatever it likes,
rebind a helper, rewrite ``checks.py`` and let a restarted kernel import it. None of that needs anything an
exercise on tensors needs. :func:`findings` reads a cell's code as Python (IPython's own transformer turns
magics and shell escapes into the calls they are) and reports each construct that could do it:

- imports of the grading machinery (``checks``, ``autograder``, ``nbgrader``, IPython and Jupyter's modules)
  and of modules that reach into the interpreter, other code or the system (``builtins``, ``gc``,
  ``inspect``, ``ctypes``, ``importlib``, ``sys`` beyond a few facts, ``subprocess``, threads, pickling...);
- names that reach the same (``get_ipython``, ``display``, ``exec``, ``eval``, ``compile``, ``__import__``,
  ``globals``, ``locals``, ``vars``, ``setattr``, ``delattr``, ``getattr`` of a computed name, the history
  ``In``/``Out``/``_ih``...), dunder attributes other than a few harmless ones (``__dict__``,
  ``__globals__``, ``__class__``, ``__subclasses__``...), frame attributes (``f_globals``, ``tb_frame``...);
- rebinding a name the notebook's locked cells define (the check helpers, ``DEVICE``, ``torch``), other than
  importing the module it already names, and setting or deleting an attribute or item of a module
  (``torch.equal = ...``, ``checks.check_equal = ...``, ``os.environ[...] = ...``);
- private attributes of a module (``torch._C``), torch's override machinery (``__torch_function__``,
  ``__torch_dispatch__``, ``torch.overrides``, modes, ``as_subclass``, ``torch.Tensor`` subclasses), and
  special methods that make an object answer for others (``__eq__``, ``__bool__``, ``__del__``, ``__getattr__``...);
- writes to files (``open`` in a mode that writes, ``pathlib``'s ``write_*``, ``os``'s file functions,
  ``torch.save``, ``savefig``...), and any magic or shell escape but ``%timeit``/``%time``/``%matplotlib``.

Code that cannot be parsed is reported too. What this cannot see is code it never reads (a student's own
module imported from beside the notebook is not there when graded; data files are not code) and a construct
no list here names: it is a net for a person to read behind, not a proof.
"""

from __future__ import annotations

import ast
import functools
import re

from IPython.core.inputtransformer2 import TransformerManager

MODULES = frozenset(
    {
        "checks", "autograder", "nbgrader", "IPython", "ipykernel", "jupyter_client", "jupyter_core", "nbformat",
        "nbclient", "zmq", "traitlets", "builtins", "gc", "inspect", "ctypes", "importlib", "imp", "runpy", "marshal",
        "pickle", "dill", "cloudpickle", "code", "codeop", "traceback", "threading", "_thread", "multiprocessing",
        "concurrent", "asyncio", "subprocess", "signal", "atexit", "site", "sysconfig", "socket", "shutil", "pty",
        "faulthandler", "weakref", "sitecustomize", "usercustomize",
    }
)
"""Top-level modules whose import is reported."""

NAMES = frozenset(
    {
        "get_ipython", "display", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "setattr",
        "delattr", "breakpoint", "exit", "quit", "In", "Out", "_ih", "_oh", "_dh", "_i", "_ii", "_iii", "__builtins__",
        "__builtin__", "__loader__", "__spec__", "__file__",
    }
)
"""Names whose use is reported."""

SAFE_DUNDERS = frozenset({"__name__", "__doc__", "__init__", "__qualname__", "__module__", "__version__",
                          "__len__", "__array_interface__", "__cuda_array_interface__", "__main__"})
"""Dunder attributes that reach nothing of the machinery."""

DEFINED_DUNDERS = frozenset(
    {
        "__torch_function__", "__torch_dispatch__", "__del__", "__getattr__", "__getattribute__", "__setattr__",
        "__delattr__", "__instancecheck__", "__subclasscheck__", "__init_subclass__", "__set_name__", "__eq__",
        "__ne__", "__bool__", "__array__", "__array_function__", "__array_ufunc__", "__array_wrap__",
        "__array_finalize__", "__index__", "__float__", "__int__",
    }
)
"""Special methods whose definition is reported: they make an object steer the code that looks at it."""

ATTRIBUTES = frozenset(
    {
        "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "tb_frame", "tb_next", "gi_frame", "cr_frame",
        "ag_frame", "co_code", "overrides", "library", "as_subclass", "TorchFunctionMode", "TorchDispatchMode",
        "write_text", "write_bytes", "touch", "unlink", "symlink_to", "hardlink_to", "chmod", "rmdir", "save",
        "savez", "savez_compressed", "savetxt", "savefig", "tofile", "FunctionType", "CodeType", "ModuleType",
        "MethodType",
    }
)
"""Attributes whose use is reported (frames, torch's overrides, file writes, built code, the environment)."""

PUBLIC_PRIVATE_MODULES = frozenset({"torch.utils._pytree"})
"""Private modules in name only: PyTorch's pytree helpers, which reach nothing of the machinery."""

TENSOR_METHODS = frozenset(
    {
        "detach", "cpu", "cuda", "to", "numpy", "tolist", "item", "clone", "contiguous", "data_ptr", "stride",
        "numel", "element_size", "storage_offset", "untyped_storage", "equal", "eq", "ne",
        "allclose", "isclose", "is_contiguous", "resolve_conj", "resolve_neg", "float", "double",
    }
)
"""Methods the checks and tests call on the objects they check: setting one on an object makes it answer for itself."""

SYS_FACTS = frozenset({"version", "version_info", "platform", "float_info", "int_info", "maxsize", "byteorder",
                       "getsizeof", "float_repr_style", "getrecursionlimit"})
"""``sys`` attributes that only read a fact about the interpreter."""

OS_READS = frozenset(
    {"path", "getenv", "getcwd", "listdir", "cpu_count", "sep", "linesep", "name", "fspath", "environ"}
)
"""``os`` attributes that only read (``os.environ`` only through :data:`ENVIRON_READS`)."""

ENVIRON_READS = frozenset({"get", "items", "keys", "values", "copy"})
"""Methods of ``os.environ`` that only read."""

DUNDER = re.compile(r"^__\w+__$")

SAFE_MAGICS = frozenset({"timeit", "time", "matplotlib"})
"""IPython magics that only time or show code (the code they run is read too)."""

RECORD_TEXT = re.compile(r"vnd\.pytorch-tensors-course|checks\.py")
"""String constants that name the check records' MIME type or the helpers' file."""


def findings(source: str, *, protected: dict[str, str | None]) -> list[str]:
    """What in one code cell touches the grading machinery, each as ``line N: what ('code')``.

    Args:
        source: the cell's source, IPython syntax allowed.
        protected: names the notebook's locked cells bind, each with the module it is bound to by an import
            (``{"np": "numpy", "check_close": None}``); rebinding one is reported, unless by importing that module.

    Returns:
        One line per finding, in source order; an empty list when the code touches nothing.
    """
    return list(_findings(source, tuple(sorted(protected.items()))))


@functools.lru_cache(maxsize=4096)
def _findings(source: str, protected: tuple[tuple[str, str | None], ...]) -> tuple[str, ...]:
    """:func:`findings`, once per source (a batch's notebooks share most of their cells)."""
    try:
        python = _python(source)
        tree = ast.parse(python)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        return (f"cannot be parsed as Python ({type(error).__name__}), so it cannot be checked",)
    visitor = _Visitor(python, dict(protected))
    try:
        visitor.visit(tree)
    except RecursionError:
        return ("nested too deeply to be checked",)
    return tuple(f"line {line}: {what}" for line, what in sorted(visitor.found, key=lambda item: item[0]))


def _python(source: str) -> str:
    """A cell's code as the Python IPython runs: the source itself when it parses, else IPython's transform of
    it (magics and shell escapes become the calls they are)."""
    try:
        ast.parse(source)
    except SyntaxError:
        return TransformerManager().transform_cell(source)
    return source


class _Visitor(ast.NodeVisitor):
    def __init__(self, source: str, protected: dict[str, str | None]) -> None:
        self.source, self.protected = source, protected
        self.modules = {name for name, module in protected.items() if module is not None}
        self.found: list[tuple[int, str]] = []

    def report(self, node: ast.AST, what: str) -> None:
        code = (ast.get_source_segment(self.source, node) or "").strip().splitlines()
        self.found.append((getattr(node, "lineno", 0), f"{what} ({code[0][:80]!r})" if code else what))

    # ------------------------------------------------------------------ imports and bindings

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imported(node, alias.name, alias.asname or alias.name.split(".")[0], alias.name, is_module=True)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.report(node, "imports from beside the notebook")
        for alias in node.names:
            full = f"{module}.{alias.name}"
            bound = alias.asname or alias.name
            self.imported(node, module, bound, full, is_module=module.split(".")[0] in ("torch", "numpy", "os", "sys"))
            if module.split(".")[0] in ("sys", "os") and alias.name not in SYS_FACTS | OS_READS:
                self.report(node, f"imports {full}")
            if alias.name in NAMES | ATTRIBUTES or alias.name.startswith("_"):
                self.report(node, f"imports {full}")
        self.generic_visit(node)

    def imported(self, node: ast.AST, module: str, bound: str, full: str, *, is_module: bool) -> None:
        """An import of ``full`` (from ``module``) bound to ``bound``; ``is_module``: what it binds may be a module."""
        if module.split(".")[0] in MODULES:
            self.report(node, f"imports the module {module.split('.')[0]}")
        elif any(part.startswith("_") for part in module.split(".")) and module not in PUBLIC_PRIVATE_MODULES:
            self.report(node, f"imports a private module ({module})")
        if bound in self.protected and self.protected[bound] != full:
            self.report(node, f"rebinds {bound}, which the notebook defines")
        if is_module or self.protected.get(bound) == full:
            self.modules.add(bound)

    def bound(self, node: ast.AST, name: str) -> None:
        if name in self.protected:
            self.report(node, f"rebinds {name}, which the notebook defines")

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self.bound(node, node.id)
        elif node.id in NAMES or (node.id.startswith("__") and node.id not in SAFE_DUNDERS):
            self.report(node, f"uses {node.id}")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.bound(node, node.name)
        if node.name in DEFINED_DUNDERS:
            self.report(node, f"defines {node.name}")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.bound(node, node.name)
        for base in node.bases:
            if _dotted(base).split(".")[-1] in ("Tensor", "ndarray", "TorchFunctionMode", "TorchDispatchMode"):
                self.report(base, f"subclasses {_dotted(base)}")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        for name in node.names:
            self.bound(node, name)

    visit_Nonlocal = visit_Global

    # ------------------------------------------------------------------ attributes and items of modules

    def visit_Attribute(self, node: ast.Attribute) -> None:
        root, attribute = _root(node), node.attr
        if isinstance(node.ctx, (ast.Store, ast.Del)) and root in self.modules:
            self.report(node, f"sets or deletes an attribute of the module {root}")
        if attribute.startswith("__") and attribute not in SAFE_DUNDERS:
            self.report(node, f"uses the attribute {attribute}")
        elif attribute in ATTRIBUTES:
            self.report(node, f"uses the attribute {attribute}")
        elif isinstance(node.ctx, ast.Store) and attribute in TENSOR_METHODS:
            self.report(node, f"sets the method {attribute} on an object")
        elif attribute.startswith("_") and root in self.modules and _dotted(node) not in PUBLIC_PRIVATE_MODULES:
            self.report(node, f"uses a private attribute of the module {root}")
        elif root == "sys" and isinstance(node.value, ast.Name) and attribute not in SYS_FACTS:
            self.report(node, f"uses sys.{attribute}")
        elif root == "os" and isinstance(node.value, ast.Name) and attribute not in OS_READS:
            self.report(node, f"uses os.{attribute}")
        elif _dotted(node.value) == "os.environ" and attribute not in ENVIRON_READS:
            self.report(node, f"uses os.environ.{attribute}")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and _root(node) in self.modules:
            self.report(node, f"sets or deletes an item of the module {_root(node)}")
        self.generic_visit(node)

    # ------------------------------------------------------------------ calls and constants

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        magic = name.endswith(("get_ipython.run_line_magic", "get_ipython.run_cell_magic"))
        if magic and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in SAFE_MAGICS:
            for argument in node.args[1:]:
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    for finding in findings(argument.value, protected=self.protected):  # the code it times
                        self.found.append((node.lineno, f"in %{node.args[0].value}: {finding}"))
            return
        if name.split(".")[-1] == "getattr" and not (len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
            self.report(node, "gets an attribute by a computed name")
        if name.split(".")[-1] == "open" and _writes(node):
            self.report(node, "opens a file for writing")
        if name == "type" and len(node.args) == 3:
            self.report(node, "builds a class with type()")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str):
            return
        if RECORD_TEXT.search(node.value):
            self.report(node, "names the check records or checks.py")
        elif node.value in NAMES | MODULES or (DUNDER.match(node.value) and node.value not in SAFE_DUNDERS):
            self.report(node, f"names {node.value} in a string")


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of attributes on a name (calls in it as ``f``, e.g. ``get_ipython.run_line_magic``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def _root(node: ast.AST) -> str:
    """The name at the root of a chain of attributes and items (``torch`` for ``torch.Tensor.add``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _writes(call: ast.Call) -> bool:
    """Whether an ``open`` call's mode (second argument or ``mode=``) may write: anything but a constant of r, b, t."""
    modes = [*call.args[1:2], *(keyword.value for keyword in call.keywords if keyword.arg == "mode")]
    if not modes:
        return False
    mode = modes[0]
    return not (isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) <= set("rbt"))


def protected_names(sources: list[str]) -> dict[str, str | None]:
    """The names the given code (the notebook's locked cells) binds at top level, with the module an import
    binds each to (``import numpy as np``: ``{"np": "numpy"}``; ``from checks import check_close``:
    ``{"check_close": "checks.check_close"}``; an assignment or definition: ``None``)."""
    names: dict[str, str | None] = {}
    for source in sources:
        try:
            tree = ast.parse(_python(source))
        except SyntaxError:
            continue
        for statement in tree.body:
            if isinstance(statement, ast.Import):
                names.update({alias.asname or alias.name.split(".")[0]: alias.name for alias in statement.names})
            elif isinstance(statement, ast.ImportFrom):
                module = statement.module
                names.update({alias.asname or alias.name: f"{module}.{alias.name}" for alias in statement.names})
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[statement.name] = None
            elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                for target in targets:
                    names.update({n.id: None for n in ast.walk(target) if isinstance(n, ast.Name)})
    return names
