"""Signatures of the C extension's types and functions, from its stub
(frametrace/_tracer.pyi): CPython gives C methods no signature to show, and
the stub is where their types are written once."""
import ast
import pathlib

import frametrace
from frametrace import _tracer


def _signatures(stub):
    """{"Class.method" or "function": (args, returns)} from a .pyi file."""
    found = {}

    def walk(body, prefix):
        for node in body:
            if isinstance(node, ast.ClassDef):
                walk(node.body, prefix + node.name + ".")
            elif isinstance(node, ast.FunctionDef):
                if any(isinstance(d, ast.Name) and d.id in ("property", "overload")
                       for d in node.decorator_list):
                    continue
                args = ast.unparse(node.args)
                if prefix and args.split(",")[0].strip() in ("self", "cls"):
                    args = ", ".join(a.strip() for a in args.split(",")[1:])
                returns = ast.unparse(node.returns) if node.returns else None
                found[prefix + node.name] = (f"({args})", returns)

    walk(ast.parse(stub.read_text()).body, "")
    return found


def setup(app):
    stub = pathlib.Path(frametrace.__file__).with_name("_tracer.pyi")
    sigs = _signatures(stub)

    def signature(app, what, name, obj, options, sig, returns):
        if not name.startswith("frametrace."):
            return None
        key = name[len("frametrace."):]
        owner = key.split(".")[0]
        # Only what the package re-exports from the extension itself.
        if getattr(frametrace, owner, None) is not getattr(_tracer, owner, object()):
            return None
        if what == "class":
            for init in ("__init__", "__new__"):
                if f"{key}.{init}" in sigs:
                    return sigs[f"{key}.{init}"][0], None
            return None
        return sigs.get(key)

    app.connect("autodoc-process-signature", signature)
    return {"parallel_read_safe": True}
