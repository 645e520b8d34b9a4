"""The .pyi stub of the native module matches the built module, name for name."""

import ast
import inspect
from pathlib import Path

import agentgym
from agentgym import _envserver

STUB = Path(agentgym.__file__).with_name("_envserver.pyi")


def _stub_tree():
    return ast.parse(STUB.read_text())


def _public(names):
    return {
        n for n in names if not n.startswith("_") or n in ("__init__", "__len__", "__version__")
    }


def _runtime_classes():
    """The stub's classes of the module, each with its stub members, those of its stub-only
    bases (private classes such as ``_SessionPool``, absent at runtime) included."""
    classes = {n.name: n for n in _stub_tree().body if isinstance(n, ast.ClassDef)}

    def members(node):
        found = {}
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                found.update(members(classes[base.id]))
        found.update({f.name: f for f in node.body if isinstance(f, ast.FunctionDef)})
        return found

    return {name: members(node) for name, node in classes.items() if not name.startswith("_")}


def test_stub_ships_with_py_typed():
    assert STUB.exists()
    assert STUB.with_name("py.typed").exists()


def test_module_level_names_match():
    tree = _stub_tree()
    stub_names = set(_runtime_classes())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            stub_names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            stub_names.add(node.target.id)
    runtime = _public(n for n in dir(_envserver) if not n.startswith("__") or n == "__version__")
    assert stub_names == runtime


def test_class_members_and_parameters_match():
    for class_name, stub_members in _runtime_classes().items():
        cls = getattr(_envserver, class_name)
        runtime_members = _public(n for n in vars(cls) if not n.startswith("__") or n == "__len__")
        runtime_members.add("__init__")
        assert set(stub_members) == runtime_members, class_name
        for name, fn in stub_members.items():
            if name == "__init__" or any(
                isinstance(d, ast.Name) and d.id in ("property", "staticmethod")
                for d in fn.decorator_list
            ):
                continue
            stub_params = [a.arg for a in fn.args.args + fn.args.kwonlyargs if a.arg != "self"]
            sig = inspect.signature(getattr(cls, name))
            runtime_params = [p for p in sig.parameters if p != "self"]
            assert stub_params == runtime_params, f"{class_name}.{name}"


def test_constructor_parameters_match():
    for class_name, stub_members in _runtime_classes().items():
        init = stub_members["__init__"]
        stub_params = [a.arg for a in init.args.args + init.args.kwonlyargs if a.arg != "self"]
        runtime = inspect.signature(getattr(_envserver, class_name))
        assert stub_params == list(runtime.parameters), class_name
