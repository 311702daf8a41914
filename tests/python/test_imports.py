"""The imports inside the attn package run one way: no module imports another
that imports it back, at module level or inside a function (a lazy import is
still a dependency). Read from the sources' syntax trees, so nothing is
imported and no framework is needed. Also: every option normalizer lives in
attn._keywords and nowhere else."""
import ast
import os

import attn

PACKAGE = os.path.dirname(attn.__file__)


def _modules() -> dict:
    """{'attn.x.y': path} for every module of the package; the compiled
    extension (attn._C: a .so, or its .pyi stub in the sources) has path None."""
    found = {}
    for root, _, files in os.walk(PACKAGE):
        for f in files:
            stem, ext = f.split(".", 1)[0], os.path.splitext(f)[1]
            if ext not in (".py", ".so", ".pyd", ".pyi"):
                continue
            rel = os.path.relpath(os.path.join(root, stem), os.path.dirname(PACKAGE)).replace(os.sep, ".")
            name = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
            if ext == ".py":
                found[name] = os.path.join(root, f)
            else:
                found.setdefault(name, None)
    return found


def _imports(name: str, path: str, modules: dict) -> set:
    """The attn modules `name` imports anywhere in its file (a name imported
    from a package that is not a submodule is the package's __init__)."""
    is_package = path.endswith("__init__.py")
    package = name if is_package else name.rsplit(".", 1)[0]

    def absolute(module: str, level: int) -> str:
        if level == 0:
            return module
        base = package.split(".")
        base = base[: len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    out = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node.module or "", node.level)
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in modules else base)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
            target = node.args[0].value  # importlib.import_module(".torch", __name__): attn's lazy attn.torch
            level = len(target) - len(target.lstrip("."))
            out.add(absolute(target.lstrip("."), level) if level else target)
    return {m for m in out if m in modules and m != name}


def _graph() -> dict:
    modules = _modules()
    return {name: _imports(name, path, modules) if path else set() for name, path in modules.items()}


def test_the_walk_sees_the_known_imports():
    g = _graph()
    assert {"attn._torch_attention", "attn.layer", "attn.rotary"} <= g["attn.torch"]
    assert "attn._torch_attention" in g["attn.layer"]
    assert "attn.torch" in g["attn"]  # attn.__getattr__ imports it on first use
    assert "attn" in g["attn.cp"]  # the fallback's local calls are attn.forward / attn.backward


def test_no_import_cycle():
    g = _graph()
    state: dict = {}  # 1: on the current path, 2: done
    path: list = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(g[m]):
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_layer_never_imports_attn_torch():
    g = _graph()
    for m in ("attn.layer", "attn._torch_attention", "attn.rotary", "attn.cp", "attn._keywords"):
        assert "attn.torch" not in g[m], m


def test_option_normalizers_live_in_keywords():
    # The spellings a normalizer needs (TE's mask names, the window pair's
    # message) appear in attn._keywords only.
    for name, path in _modules().items():
        if path is None:
            continue
        text = open(path).read()
        for marker in ('"causal_bottom_right_padding"', "window must be a pair", "mask must be a string"):
            assert (marker in text) == (name == "attn._keywords"), (name, marker)


def test_build_info_says_what_the_build_holds():
    info = attn.build_info()
    assert info["version"] == attn.__version__
    assert info["commit"] and isinstance(info["commit"], str)
    assert info["cuda_toolkit"].count(".") == 1  # "13.0"
    assert "reference" in info["backends"]
    # cuDNN's version exactly where the cudnn backend is compiled in.
    in_build = dict(attn._C.backends())
    assert (info["cudnn"] is not None) == in_build.get("cudnn", False)
