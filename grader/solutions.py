"""Solution regions: in mini's references, in the course notebooks, and the student copy of mini.

A solution region is the block of lines between ``### BEGIN SOLUTION`` and
``### END SOLUTION`` (the markers nbgrader uses):

- in mini, inside a function decorated ``@exercise("NN.name")``: the reference;
- in a notebook, inside the code cell that contains ``@implement("NN.name")``: the
  instructor's solution, which must be the same code (``mini-course sync-solutions``
  rewrites the notebooks from mini; ``--check`` only compares).

:func:`strip_package` makes the student copy of mini for a release of chapter N: regions
of chapter N become ``raise ExerciseNotImplemented("NN.name")``, regions of later chapters
``raise ExerciseNotImplemented("NN.name", future=True)``, earlier chapters keep their
references (catch-up references).  The stand-ins registered as ``fallback=`` of chapter N's
slots (numpy doing the work while a chapter is unreleased) are stubbed too, and the
``fallback=`` itself dropped; so are the fast paths registered with ``@fast_path`` for
chapter N's slots (they run only where the reference runs, which a release of chapter N
never does): the release of a chapter ships no working answer to it.

C++ and CUDA files of mini (``*.cu``, ``*.cuh``, ``*.cpp``, ``*.h``...) may hold regions
too, between the lines ``// BEGIN SOLUTION NN.name`` and ``// END SOLUTION``: code of mini's
own (a device kernel) that would give exercise ``NN.name`` away.  The student copy of a
release of chapter N drops the regions of chapters >= N, leaving one comment line; each
region must be self-contained (whole functions), so that the file still compiles, and the
code around it must not need it (:func:`cpp_regions` lists them).
"""
from __future__ import annotations

import ast
import re
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BEGIN", "END", "Region", "scan_file", "scan_source", "reference_regions", "notebook_regions",
    "strip_package", "strip_source", "sync_notebook", "region_lines", "normalize",
    "CppRegion", "scan_cpp_source", "cpp_regions", "strip_cpp_source", "CPP_SUFFIXES",
]

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
_IMPLEMENT = re.compile(r"""@\s*(?:[\w.]+\.)?implement\(\s*(["'])(\d\d\.[A-Za-z0-9_]+)\1""")
_SLOT = re.compile(r"^\d\d\.[A-Za-z0-9_]+$")


@dataclass(frozen=True)
class Region:
    """A solution region in a Python file: ``begin``/``end`` are the 0-based line indexes
    of the marker lines, ``indent`` the marker's indentation."""
    slot_id: str
    path: Path
    begin: int
    end: int
    indent: str
    text: str  # dedented lines between the markers


def normalize(text: str) -> str:
    """Compare regions modulo indentation and trailing whitespace."""
    lines = [line.rstrip() for line in textwrap.dedent(text).splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)


def _slot_of_decorator(dec: ast.expr) -> str | None:
    if not isinstance(dec, ast.Call):
        return None
    f = dec.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    if name != "exercise" or not dec.args:
        return None
    a = dec.args[0]
    if isinstance(a, ast.Constant) and isinstance(a.value, str):
        return a.value
    return None


def _markers(lines: list[str], lo: int, hi: int, where: str) -> list[tuple[int, int]]:
    """Pairs of (begin, end) marker line indexes within lines[lo:hi]."""
    pairs, begin = [], None
    for i in range(lo, hi):
        s = lines[i].strip()
        if s == BEGIN:
            if begin is not None:
                raise ValueError(f"{where}: nested {BEGIN} at line {i + 1}")
            begin = i
        elif s == END:
            if begin is None:
                raise ValueError(f"{where}: {END} without {BEGIN} at line {i + 1}")
            pairs.append((begin, i))
            begin = None
    if begin is not None:
        raise ValueError(f"{where}: {BEGIN} at line {begin + 1} is never closed")
    return pairs


def region_lines(lines: list[str], begin: int, end: int) -> str:
    return textwrap.dedent("".join(lines[begin + 1:end]))


def scan_file(path: str | Path) -> list[Region]:
    """The solution regions of the ``@exercise`` functions in one Python file."""
    return scan_source(Path(path).read_text(), Path(path))


def scan_source(source: str, path: Path) -> list[Region]:
    """:func:`scan_file` on source text (``path`` is used in messages and results)."""
    if "exercise" not in source:
        return []
    tree = ast.parse(source, filename=str(path))
    lines = source.splitlines(keepends=True)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        slots = [s for s in map(_slot_of_decorator, node.decorator_list) if s]
        if not slots:
            continue
        slot_id = slots[0]
        where = f"{path}: {node.name} (@exercise({slot_id!r}))"
        hi = node.end_lineno  # the AST extent stops at the last statement: take trailing comments
        while hi < len(lines) and (not lines[hi].strip() or lines[hi].lstrip().startswith("#")):
            hi += 1
        pairs = _markers(lines, node.lineno - 1, hi, where)
        if not pairs:  # a stub (e.g. in a student copy): no reference here
            continue
        if len(pairs) != 1:
            raise ValueError(f"{where}: expected one {BEGIN}/{END} region, found {len(pairs)}")
        b, e = pairs[0]
        indent = lines[b][: len(lines[b]) - len(lines[b].lstrip())]
        out.append(Region(slot_id, path, b, e, indent, region_lines(lines, b, e)))
    return sorted(out, key=lambda r: r.begin)


def _python_files(package_dir: Path):
    for p in sorted(package_dir.rglob("*.py")):
        if "__pycache__" not in p.parts:
            yield p


def _all_regions(package_dir: str | Path) -> list[Region]:
    regions, seen = [], {}
    for p in _python_files(Path(package_dir)):
        for r in scan_file(p):
            if r.slot_id in seen:
                raise ValueError(f"exercise {r.slot_id} has two references: {seen[r.slot_id]} and {p}")
            seen[r.slot_id] = p
            regions.append(r)
    return regions


def reference_regions(package_dir: str | Path) -> dict[str, tuple[Path, str]]:
    """``{slot_id: (path, dedented region text)}`` for every ``@exercise`` function in
    ``package_dir/**/*.py`` (``package_dir`` is the ``mini`` folder)."""
    return {r.slot_id: (r.path, r.text) for r in sorted(_all_regions(package_dir), key=lambda r: r.slot_id)}


# --------------------------------------------------------------------------- notebooks

def _cell_regions(source: str, where: str) -> list[tuple[str, int, int, str]]:
    """[(slot_id, begin, end, indent)] for the @implement functions of one cell's source."""
    lines = source.splitlines(keepends=True)
    slots = [(i, m.group(2)) for i, line in enumerate(lines)
             for m in [_IMPLEMENT.search(line)] if m and not line.lstrip().startswith("#")]
    if not slots:
        return []
    pairs = _markers(lines, 0, len(lines), where)
    out = []
    for k, (line_no, slot_id) in enumerate(slots):
        nxt = slots[k + 1][0] if k + 1 < len(slots) else len(lines)
        mine = [(b, e) for b, e in pairs if line_no < b < nxt]
        if len(mine) != 1:
            raise ValueError(f"{where}: @implement({slot_id!r}) needs exactly one "
                             f"{BEGIN}/{END} region after it, found {len(mine)}")
        b, e = mine[0]
        out.append((slot_id, b, e, lines[b][: len(lines[b]) - len(lines[b].lstrip())]))
    return out


def notebook_regions(nb_path: str | Path) -> dict[str, str]:
    """``{slot_id: dedented region text}`` for each code cell with ``@implement("NN.name")``."""
    import nbformat

    nb = nbformat.read(str(nb_path), as_version=4)
    out: dict[str, str] = {}
    for idx, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        where = f"{nb_path}: cell {idx}"
        lines = cell.source.splitlines(keepends=True)
        for slot_id, b, e, _ in _cell_regions(cell.source, where):
            if slot_id in out:
                raise ValueError(f"{nb_path}: two cells implement {slot_id}")
            out[slot_id] = region_lines(lines, b, e)
    return out


def _reindent(text: str, indent: str) -> list[str]:
    out = []
    for line in normalize(text).splitlines():
        out.append((indent + line if line.strip() else "") + "\n")
    return out


def sync_notebook(nb_path: str | Path, references: dict[str, tuple[Path, str]],
                  write: bool = True) -> list[str]:
    """Make each ``@implement`` cell's solution region equal to mini's reference.
    Returns the slot ids that differed (unknown slots are reported as
    ``"<slot>: no reference in mini"``); writes the notebook only when something changed
    and ``write`` is true."""
    import nbformat

    nb = nbformat.read(str(nb_path), as_version=4)
    changed: list[str] = []
    for idx, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines(keepends=True)
        regions = _cell_regions(cell.source, f"{nb_path}: cell {idx}")
        for slot_id, b, e, indent in reversed(regions):
            if slot_id not in references:
                changed.append(f"{slot_id}: no reference in mini")
                continue
            ref = references[slot_id][1]
            if normalize(region_lines(lines, b, e)) == normalize(ref):
                continue
            changed.append(slot_id)
            lines[b + 1:e] = _reindent(ref, indent)
        new = "".join(lines)
        if new != cell.source:
            cell.source = new.rstrip("\n") if not cell.source.endswith("\n") else new
    if changed and write:
        nbformat.write(nb, str(nb_path))
    return sorted(changed)


# --------------------------------------------------------------------------- student copy

def _stub(slot_id: str, indent: str, future: bool) -> str:
    extra = ", future=True" if future else ""
    return f'{indent}raise ExerciseNotImplemented("{slot_id}"{extra})\n'


def _import_line_index(tree: ast.Module) -> int:
    """0-based line index before which an import can go (after docstring and __future__)."""
    body = tree.body
    i = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        i = 1
    while i < len(body) and isinstance(body[i], ast.ImportFrom) and body[i].module == "__future__":
        i += 1
    if i < len(body):
        node = body[i]
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return first - 1
    return body[-1].end_lineno if body else 0


def _binds_name(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return True
    return False


def _fallbacks_of(tree: ast.Module, chapter: int) -> list[tuple[ast.Call, str, ast.expr]]:
    """``(decorator call, slot, fallback expression)`` of the ``@exercise`` decorators of
    chapter ``chapter`` that name a ``fallback=``."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for dec in node.decorator_list:
            slot = _slot_of_decorator(dec)
            if slot and int(slot[:2]) == chapter:
                for kw in dec.keywords:
                    if kw.arg == "fallback":
                        out.append((dec, slot, kw.value))
    return out


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """``{local name: module}`` for ``from pkg import mod as name`` / ``import pkg.mod as name``."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    return out


def _fallback_targets(package_dir: Path, chapter: int) -> dict[Path, dict[str, str]]:
    """``{file: {function name: slot}}``: the functions registered as fallbacks of chapter
    ``chapter``'s slots anywhere in the package at ``package_dir``."""
    out: dict[Path, dict[str, str]] = {}
    pkg = package_dir.name
    for p in _python_files(package_dir):
        source = p.read_text()
        if "fallback" not in source:
            continue
        tree = ast.parse(source, filename=str(p))
        aliases = _import_aliases(tree)
        for _, slot, expr in _fallbacks_of(tree, chapter):
            if isinstance(expr, ast.Name):
                out.setdefault(p, {})[expr.id] = slot
            elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
                module = aliases.get(expr.value.id, "")
                parts = module.split(".")
                if parts and parts[0] == pkg:
                    target = package_dir.joinpath(*parts[1:]).with_suffix(".py")
                    if not target.exists():
                        target = package_dir.joinpath(*parts[1:], "__init__.py")
                    out.setdefault(target, {})[expr.attr] = slot
            else:
                raise ValueError(f"{p}: fallback of {slot} must be a function name or "
                                 f"module.function, got {ast.dump(expr)}")
    return out


def fallback_functions(package_dir: str | Path, chapter: int) -> dict[str, list[str]]:
    """``{slot: ["mini.module:function", ...]}``: the functions the package at ``package_dir``
    registers as ``fallback=`` of chapter ``chapter``'s slots."""
    package_dir = Path(package_dir)
    out: dict[str, list[str]] = {}
    for path, names in _fallback_targets(package_dir, chapter).items():
        rel = path.relative_to(package_dir).with_suffix("")
        parts = [package_dir.name] + [p for p in rel.parts if p != "__init__"]
        for name, slot in names.items():
            out.setdefault(slot, []).append(f"{'.'.join(parts)}:{name}")
    return out


def _decorator_name(dec: ast.expr) -> str | None:
    if not isinstance(dec, ast.Call):
        return None
    f = dec.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _str_tuple(node: ast.expr | None) -> tuple[str, ...]:
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return ()


def _ops_built_on(package_dir: Path, chapter: int) -> set[str]:
    """Names of the ops marked ``@has_fast_path(name, slots=(...))`` with a slot of chapter
    ``chapter`` among their slots (their fast paths compute that chapter's answers too)."""
    out = set()
    for p in _python_files(package_dir):
        source = p.read_text()
        if "has_fast_path" not in source:
            continue
        for node in ast.walk(ast.parse(source, filename=str(p))):
            for dec in getattr(node, "decorator_list", []):
                if _decorator_name(dec) == "has_fast_path" and dec.args and \
                        isinstance(dec.args[0], ast.Constant):
                    slots = next((_str_tuple(k.value) for k in dec.keywords if k.arg == "slots"), ())
                    if any(_SLOT.match(x) and int(x[:2]) == chapter for x in slots):
                        out.add(dec.args[0].value)
    return out


def _fast_paths_of(tree: ast.Module, chapter: int, ops: set[str] = frozenset()) -> dict[str, tuple[str, list]]:
    """``{function name: (slot, decorator nodes)}`` for the top-level functions decorated
    ``@fast_path(target, ...)`` where the target is a slot of chapter ``chapter`` or an op
    built on one (``ops``), or whose ``also=`` names such a slot."""
    out = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for dec in node.decorator_list:
            if _decorator_name(dec) != "fast_path" or not dec.args:
                continue
            a = dec.args[0]
            if not (isinstance(a, ast.Constant) and isinstance(a.value, str)):
                continue
            also = next((_str_tuple(k.value) for k in dec.keywords if k.arg == "also"), ())
            ours = [x for x in (a.value,) + also if _SLOT.match(x) and int(x[:2]) == chapter]
            if ours or a.value in ops:
                out.setdefault(node.name, (ours[0] if ours else f"{chapter:02d}.{a.value}", []))[1].append(dec)
    return out


def _strip_fast_paths(source: str, path: str, chapter: int, ops: set[str]) -> str:
    """``source`` without the fast paths of chapter ``chapter``'s slots (and of the ops
    built on them): their decorators removed (nothing registers them) and their bodies
    stubbed (nothing to call)."""
    tree = ast.parse(source, filename=path)
    found = _fast_paths_of(tree, chapter, ops)
    if not found:
        return source
    lines = source.splitlines(keepends=True)
    decorators = sorted((d for _, decs in found.values() for d in decs),
                        key=lambda d: d.lineno, reverse=True)
    for dec in decorators:   # the decorator's own lines, "@" included
        del lines[dec.lineno - 1:dec.end_lineno]
    return _stub_functions("".join(lines), path, {name: slot for name, (slot, _) in found.items()})


def _drop_fallbacks(source: str, path: str, chapter: int) -> str:
    """``source`` with ``fallback=...`` removed from chapter ``chapter``'s ``@exercise``."""
    tree = ast.parse(source, filename=path)
    found = _fallbacks_of(tree, chapter)
    if not found:
        return source
    lines = source.splitlines(keepends=True)
    for dec, slot, _ in sorted(found, key=lambda f: (f[0].lineno, f[0].col_offset), reverse=True):
        if dec.lineno != dec.end_lineno:
            raise ValueError(f"{path}:{dec.lineno}: write @exercise({slot!r}, fallback=...) on one line")
        line = lines[dec.lineno - 1]
        lines[dec.lineno - 1] = (line[:dec.col_offset] + ast.unparse(ast.Call(
            func=dec.func, args=dec.args, keywords=[k for k in dec.keywords if k.arg != "fallback"]))
            + line[dec.end_col_offset:])
    return "".join(lines)


def _stub_functions(source: str, path: str, names: dict[str, str]) -> str:
    """``source`` with the bodies of the top-level functions ``names`` (``{name: slot}``)
    replaced by ``raise ExerciseNotImplemented(slot)`` (their docstrings kept)."""
    tree = ast.parse(source, filename=path)
    lines = source.splitlines(keepends=True)
    todo = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name in names]
    missing = set(names) - {n.name for n in todo}
    if missing:
        raise ValueError(f"{path}: no top-level function(s) {sorted(missing)} to stub")
    for node in sorted(todo, key=lambda n: n.lineno, reverse=True):
        body = node.body
        first = body[0]
        keep_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None),
                                                               ast.Constant) and isinstance(first.value.value, str)
        start = (body[1].lineno if keep_doc and len(body) > 1 else None) if keep_doc else first.lineno
        indent = " " * (first.col_offset)
        stub = f'{indent}raise ExerciseNotImplemented("{names[node.name]}")\n'
        if start is None:  # only a docstring
            lines.insert(node.end_lineno, stub)
            continue
        lines[start - 1:node.end_lineno] = [stub]
    new = "".join(lines)
    if not _binds_name(ast.parse(new), "ExerciseNotImplemented"):
        at = _import_line_index(ast.parse(new))
        out = new.splitlines(keepends=True)
        out.insert(at, "from mini.exercises import ExerciseNotImplemented\n")
        new = "".join(out)
    return new


def strip_source(source: str, path: str, chapter: int) -> tuple[str, list[str]]:
    """Replace the regions of chapters >= ``chapter`` in one module's source.
    Returns the new source and the stubbed slot ids."""
    tmp = Path(path)
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source, filename=path)
    regions = scan_source(source, tmp)
    stubbed = []
    for r in sorted(regions, key=lambda r: r.begin, reverse=True):
        ch = int(r.slot_id[:2])
        if ch < chapter:
            continue
        lines[r.begin:r.end + 1] = [_stub(r.slot_id, r.indent, future=ch > chapter)]
        stubbed.append(r.slot_id)
    if stubbed and not _binds_name(tree, "ExerciseNotImplemented"):
        at = _import_line_index(tree)
        lines.insert(at, "from mini.exercises import ExerciseNotImplemented\n")
    return "".join(lines), sorted(stubbed)


def strip_package(src_dir: str | Path, dst_dir: str | Path, chapter: int) -> list[str]:
    """Copy the ``mini`` package at ``src_dir`` to ``dst_dir`` (which must not exist or be
    empty), skipping ``__pycache__`` and ``*.pyc`` (built ``*.so``/``*.pyd`` extensions are
    kept), with the solution regions of chapter ``chapter`` and later replaced by stubs, and
    ``_release.py`` holding ``CHAPTER = chapter``.  Returns the stubbed slot ids."""
    src, dst = Path(src_dir), Path(dst_dir)
    if not (src / "__init__.py").exists():
        raise FileNotFoundError(f"{src} is not a Python package (no __init__.py)")
    if dst.exists() and any(dst.iterdir()):
        raise FileExistsError(f"{dst} exists and is not empty")
    cpp_regions(src)    # every C++ solution region names an exercise of the package
    shutil.copytree(src, dst, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "_release.py"))
    stubbed: list[str] = []
    targets = _fallback_targets(dst, int(chapter))
    ops = _ops_built_on(dst, int(chapter))
    for p in _python_files(dst):
        source = p.read_text()
        new = source
        if p in targets:
            new = _stub_functions(new, str(p), targets[p])
        if "fallback" in new:
            new = _drop_fallbacks(new, str(p), int(chapter))
        if "fast_path" in new:
            new = _strip_fast_paths(new, str(p), int(chapter), ops)
        if BEGIN in new:
            new, slots = strip_source(new, str(p), int(chapter))
            stubbed += slots
        if new != source:
            p.write_text(new)
    stubbed = sorted(set(stubbed) | set(_strip_cpp_files(dst, int(chapter))))
    (dst / "_release.py").write_text(
        '"""Written by mini-course: the chapter this copy of mini was released for."""\n'
        f"CHAPTER = {int(chapter)}\n")
    return sorted(stubbed)


def is_slot_id(text: str) -> bool:
    return bool(_SLOT.match(text))


# --------------------------------------------------------------------------- C++ / CUDA

#: Files of mini that may hold C++ solution regions.
CPP_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp")
_CPP_BEGIN = re.compile(r"^(?P<indent>\s*)//\s*BEGIN SOLUTION(?:\s+(?P<slot>\S+))?\s*$")
_CPP_END = re.compile(r"^\s*//\s*END SOLUTION\s*$")


@dataclass(frozen=True)
class CppRegion:
    """A solution region in a C++/CUDA file: ``begin``/``end`` are the 0-based line
    indexes of its marker lines; ``text`` the lines between them."""
    slot_id: str
    path: Path
    begin: int
    end: int
    indent: str
    text: str


def scan_cpp_source(source: str, path: Path) -> list[CppRegion]:
    """The ``// BEGIN SOLUTION NN.name`` ... ``// END SOLUTION`` regions of one C++ file."""
    lines = source.splitlines(keepends=True)
    out, begin = [], None
    for i, line in enumerate(lines):
        m = _CPP_BEGIN.match(line.rstrip("\n"))
        if m:
            if begin is not None:
                raise ValueError(f"{path}: nested // BEGIN SOLUTION at line {i + 1}")
            slot = m.group("slot") or ""
            if not _SLOT.match(slot):
                raise ValueError(f"{path}:{i + 1}: a C++ solution region names its exercise: "
                                 f"// BEGIN SOLUTION NN.name (got {line.strip()!r})")
            begin = (i, slot, m.group("indent"))
        elif _CPP_END.match(line.rstrip("\n")):
            if begin is None:
                raise ValueError(f"{path}: // END SOLUTION without // BEGIN SOLUTION at line {i + 1}")
            b, slot, indent = begin
            out.append(CppRegion(slot, path, b, i, indent, "".join(lines[b + 1:i])))
            begin = None
    if begin is not None:
        raise ValueError(f"{path}: // BEGIN SOLUTION at line {begin[0] + 1} is never closed")
    return out


def _cpp_files(package_dir: Path):
    for p in sorted(package_dir.rglob("*")):
        if p.suffix in CPP_SUFFIXES and p.is_file() and "__pycache__" not in p.parts:
            yield p


def cpp_regions(package_dir: str | Path) -> list[CppRegion]:
    """Every C++ solution region of the package at ``package_dir``; each must name a slot
    that has a reference in the package's Python files."""
    package_dir = Path(package_dir)
    slots = None
    out = []
    for p in _cpp_files(package_dir):
        text = p.read_text()
        if "BEGIN SOLUTION" not in text:
            continue
        regions = scan_cpp_source(text, p)
        if regions and slots is None:
            slots = {r.slot_id for r in _all_regions(package_dir)}
        for r in regions:
            if r.slot_id not in slots:
                raise ValueError(f"{p}:{r.begin + 1}: // BEGIN SOLUTION {r.slot_id} names no exercise "
                                 f"of mini (no @exercise({r.slot_id!r}) with a reference)")
        out += regions
    return out


def strip_cpp_source(source: str, path: str, chapter: int) -> tuple[str, list[str]]:
    """Replace the C++ regions of chapters >= ``chapter`` by one comment line each.
    Returns the new source and the slots whose regions went."""
    lines = source.splitlines(keepends=True)
    gone = []
    for r in sorted(scan_cpp_source(source, Path(path)), key=lambda r: r.begin, reverse=True):
        ch = int(r.slot_id[:2])
        if ch < chapter:
            continue
        lines[r.begin:r.end + 1] = [
            f"{r.indent}// ({r.slot_id}: mini's code here would give away this exercise of chapter "
            f"{r.slot_id[:2]}; it arrives with that chapter's solutions)\n"]
        gone.append(r.slot_id)
    return "".join(lines), sorted(set(gone))


def _strip_cpp_files(package_dir: Path, chapter: int) -> list[str]:
    """Strip the C++ regions of chapters >= ``chapter`` in the copy at ``package_dir``
    (validated on the original by :func:`strip_package`)."""
    gone: list[str] = []
    for p in _cpp_files(package_dir):
        text = p.read_text()
        if "BEGIN SOLUTION" not in text:
            continue
        new, slots = strip_cpp_source(text, str(p), chapter)
        if slots:
            p.write_text(new)
            gone += slots
    return gone
