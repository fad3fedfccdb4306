"""Binding plain functions of a CUDA module with ctypes instead of pybind11.

Most CUDA modules of the course export *launchers*: host functions that take device
pointers and sizes as plain numbers (``std::uintptr_t``, ``int``, ``float``) and return a
CUDA error code.  Binding those needs none of pybind11, whose headers alone cost about five
seconds of compiling per module (a kernel on its own compiles in half a second).  So when
every function named in ``functions=`` takes and returns only plain numbers, and the
sources never mention pybind11, the module is built without pybind11: each function gets
an ``extern "C"`` *thunk* that calls it, catches any C++ exception and hands it back as an
error code plus message, and Python calls the thunks through ctypes.

The Python functions behave like pybind11's: positional arguments only, ints checked
against the C++ type's range (a ``TypeError`` names the parameter), a C++ exception becomes
``RuntimeError`` (``std::invalid_argument``: ``ValueError``, ``std::out_of_range``:
``IndexError``) with the exception's message, and the GIL stays held during the call (as
pybind11 holds it: the emulator's runtime is not meant to run launches from two threads).
"""
from __future__ import annotations

import ctypes
import operator
import re
import types
from dataclasses import dataclass

__all__ = ["Signature", "plain_signatures", "thunks", "load_module", "THUNK_PREFIX"]

THUNK_PREFIX = "mini_plain_call_"

# C++ spelling (const and std:: removed, spaces collapsed) -> (ctypes type, kind, bits)
_TYPES = {
    "bool": (ctypes.c_bool, "bool", 1),
    "char": (ctypes.c_char, None, 8),   # not plain: a char is rarely a number
    "short": (ctypes.c_short, "int", 16), "unsigned short": (ctypes.c_ushort, "uint", 16),
    "int": (ctypes.c_int, "int", 32), "signed": (ctypes.c_int, "int", 32),
    "signed int": (ctypes.c_int, "int", 32), "unsigned": (ctypes.c_uint, "uint", 32),
    "unsigned int": (ctypes.c_uint, "uint", 32),
    "long": (ctypes.c_long, "int", 8 * ctypes.sizeof(ctypes.c_long)),
    "long int": (ctypes.c_long, "int", 8 * ctypes.sizeof(ctypes.c_long)),
    "unsigned long": (ctypes.c_ulong, "uint", 8 * ctypes.sizeof(ctypes.c_ulong)),
    "long long": (ctypes.c_longlong, "int", 64), "long long int": (ctypes.c_longlong, "int", 64),
    "unsigned long long": (ctypes.c_ulonglong, "uint", 64),
    "int8_t": (ctypes.c_int8, "int", 8), "uint8_t": (ctypes.c_uint8, "uint", 8),
    "int16_t": (ctypes.c_int16, "int", 16), "uint16_t": (ctypes.c_uint16, "uint", 16),
    "int32_t": (ctypes.c_int32, "int", 32), "uint32_t": (ctypes.c_uint32, "uint", 32),
    "int64_t": (ctypes.c_int64, "int", 64), "uint64_t": (ctypes.c_uint64, "uint", 64),
    "size_t": (ctypes.c_size_t, "uint", 8 * ctypes.sizeof(ctypes.c_size_t)),
    "ptrdiff_t": (ctypes.c_ssize_t, "int", 8 * ctypes.sizeof(ctypes.c_ssize_t)),
    "intptr_t": (ctypes.c_ssize_t, "int", 8 * ctypes.sizeof(ctypes.c_void_p)),
    "uintptr_t": (ctypes.c_size_t, "uint", 8 * ctypes.sizeof(ctypes.c_void_p)),
    "float": (ctypes.c_float, "float", 32), "double": (ctypes.c_double, "float", 64),
    "cudaError_t": (ctypes.c_int, "int", 32),
}


@dataclass(frozen=True)
class Signature:
    name: str
    result: str               # normalised C++ type, or "void"
    params: tuple             # ((normalised type, parameter name or ""), ...)

    def cpp(self) -> str:
        return f"{self.result} {self.name}({', '.join(' '.join(p).strip() for p in self.params)})"


def _normalise(text: str) -> str | None:
    """The plain type ``text`` names (``const std::size_t`` -> ``size_t``), or None."""
    t = re.sub(r"\b(const|volatile|static|inline|extern|register|__host__|__forceinline__)\b", " ", text)
    t = re.sub(r"\bstd\s*::\s*", "", t)
    t = " ".join(t.split())
    if t == "void":
        return t
    info = _TYPES.get(t)
    return t if info is not None and info[1] is not None else None


def _strip_comments(src: str) -> str:
    from mini.backends.cuda.rewrite import code_mask
    mask = code_mask(src)
    return "".join(c if keep or c == "\n" else " " for c, keep in zip(src, mask))


def _definition(code: str, name: str) -> Signature | None:
    """The signature of the first definition of function ``name`` in ``code`` (comments
    and literals blanked), if it is plain; None otherwise (or when there is none)."""
    found = None
    for m in re.finditer(rf"(?<![\w:.>]){re.escape(name)}\s*\(", code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        if depth:
            continue
        rest = code[i:].lstrip()
        if rest.startswith("noexcept"):
            rest = rest[len("noexcept"):].lstrip()
        if not rest.startswith("{"):
            continue          # a call or a declaration
        # the return type: back from the name to the previous ; } { or preprocessor line
        start = m.start()
        j = start
        while j > 0 and code[j - 1] not in ";{}\n#":
            j -= 1
        head = code[j:start]
        # a return type may continue from the previous line ("static int\nlaunch(...)")
        k = j
        while k > 0 and code[k - 1] == "\n" and code[:k - 1].rstrip()[-1:] not in (";", "{", "}", ""):
            prev = code[:k - 1].rfind("\n") + 1
            if code[prev:k - 1].lstrip().startswith("#"):
                break
            head = code[prev:k - 1] + " " + head
            k = prev
        if found is not None:
            return None                       # overloads: leave it to pybind11
        result = _normalise(head)
        params_text = code[m.end():i - 1].strip()
        if result is None or "=" in params_text or "..." in params_text:
            return None
        params = []
        if params_text and params_text != "void":
            for p in params_text.split(","):
                words = p.split()
                if not words:
                    return None
                # the last word is the parameter's name unless it is part of the type
                typ = _normalise(p)
                pname = ""
                if typ is None and len(words) > 1:
                    typ = _normalise(" ".join(words[:-1]))
                    pname = words[-1]
                if typ is None or typ == "void" or not re.fullmatch(r"[A-Za-z_]\w*|", pname):
                    return None
                params.append((typ, pname))
        found = Signature(name, result, tuple(params))
    return found


def plain_signatures(sources, functions) -> dict[str, Signature] | None:
    """``{name: Signature}`` when every function in ``functions`` is defined in
    ``sources`` (strings of C++/CUDA) with plain-number parameters and result and the
    sources do not use pybind11; None when a pybind11 binding is needed."""
    code = "\n".join(_strip_comments(s) for s in sources)
    if re.search(r"\bpy\s*::|pybind11|PyObject", code) or not functions:
        return None
    out = {}
    for name in functions:
        sig = _definition(code, name)
        if sig is None:
            return None
        out[name] = sig
    return out


def thunks(signatures: dict[str, Signature]) -> str:
    """C++ source of the ``extern "C"`` thunks (to append after the sources)."""
    out = ["#include <cstdio>", "#include <exception>", "#include <stdexcept>", ""]
    for sig in signatures.values():
        args = [f"{t} a{i}" for i, (t, _) in enumerate(sig.params)]
        call = f"{sig.name}({', '.join(f'a{i}' for i in range(len(sig.params)))})"
        res = "void* mini_result" if sig.result == "void" else f"{sig.result}* mini_result"
        body = f"{call};" if sig.result == "void" else f"*mini_result = {call};"
        out.append(
            f'extern "C" __attribute__((visibility("default"))) int {THUNK_PREFIX}{sig.name}('
            + ", ".join(args + [res, "char* mini_error", "int mini_error_size"]) + ") {\n"
            f"    try {{ {body} return 0; }}\n"
            "    catch (const std::invalid_argument& e) { std::snprintf(mini_error, mini_error_size, \"%s\", e.what()); return 2; }\n"
            "    catch (const std::out_of_range& e) { std::snprintf(mini_error, mini_error_size, \"%s\", e.what()); return 3; }\n"
            "    catch (const std::exception& e) { std::snprintf(mini_error, mini_error_size, \"%s\", e.what()); return 1; }\n"
            "    catch (...) { std::snprintf(mini_error, mini_error_size, \"%s\", \"an unknown C++ exception\"); return 1; }\n"
            "}\n")
    return "\n".join(out)


_ERRORS = {1: RuntimeError, 2: ValueError, 3: IndexError}


def _converter(typ: str, fname: str, index: int, pname: str):
    ctype, kind, bits = _TYPES[typ]
    label = f"{fname}(): argument {index + 1} ({typ} {pname})".replace(" )", ")")
    if kind in ("int", "uint"):
        lo, hi = (0, 2 ** bits - 1) if kind == "uint" else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)

        def convert(v):
            if isinstance(v, bool) or isinstance(v, float):
                raise TypeError(f"{label} must be an int, got {type(v).__name__} {v!r}")
            try:
                i = operator.index(v)
            except TypeError:
                raise TypeError(f"{label} must be an int, got {type(v).__name__}") from None
            if not lo <= i <= hi:
                raise TypeError(f"{label}: {i} does not fit in a C++ {typ} ({lo} to {hi})")
            return i
    elif kind == "float":
        def convert(v):
            if isinstance(v, (str, bytes)) or not hasattr(v, "__float__"):
                raise TypeError(f"{label} must be a number, got {type(v).__name__}")
            return float(v)
    else:
        def convert(v):
            if not isinstance(v, (bool, int)) and type(v).__name__ != "bool_":
                raise TypeError(f"{label} must be a bool, got {type(v).__name__}")
            return bool(v)
    return ctype, convert


def _function(lib, sig: Signature, doc: str):
    thunk = getattr(lib, THUNK_PREFIX + sig.name)
    converters = [_converter(t, sig.name, i, p) for i, (t, p) in enumerate(sig.params)]
    result_type = None if sig.result == "void" else _TYPES[sig.result][0]
    thunk.argtypes = ([c for c, _ in converters]
                      + [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int])
    thunk.restype = ctypes.c_int
    n = len(converters)

    def call(*args, **kwargs):
        if kwargs or len(args) != n:
            raise TypeError(f"{sig.name}(): takes {n} positional argument{'s' if n != 1 else ''} "
                            f"({sig.cpp()}), got {len(args)}"
                            + (f" and keywords {sorted(kwargs)}" if kwargs else ""))
        values = [conv(a) for (_, conv), a in zip(converters, args)]
        result = result_type() if result_type is not None else None
        err = ctypes.create_string_buffer(1024)
        code = thunk(*values, ctypes.byref(result) if result is not None else None, err, len(err))
        if code:
            raise _ERRORS.get(code, RuntimeError)(err.value.decode("utf-8", "replace"))
        return None if result is None else result.value

    call.__name__ = call.__qualname__ = sig.name
    call.__doc__ = (doc + "\n\n" if doc else "") + f"{sig.cpp()}  (bound with ctypes)"
    return call


def load_module(modname: str, path, signatures: dict[str, Signature], docs: dict[str, str]) -> types.ModuleType:
    """Load the shared library at ``path`` and return a module whose functions call the
    thunks of ``signatures``."""
    lib = ctypes.PyDLL(str(path), mode=getattr(ctypes, "RTLD_LOCAL", 0))
    mod = types.ModuleType(modname, f"CUDA extension {modname} (plain functions, bound with ctypes)")
    mod.__file__ = str(path)
    mod._library = lib
    for name, sig in signatures.items():
        setattr(mod, name, _function(lib, sig, docs.get(name, "")))
    return mod
