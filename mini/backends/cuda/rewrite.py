"""Turn CUDA C++ into C++ the emulator header understands.

Two CUDA constructs are not C++ and cannot be macros, so the source is rewritten
before the host compiler sees it (line numbers stay the same: every rewritten span keeps
its newlines, so compiler errors and sanitizer reports point at the student's lines):

- the launch ``kernel<<<grid, block[, shared[, stream]]>>>(args);`` becomes
  ``::mini_cuda::launch(::mini_cuda::LaunchConfig(grid, block, ...), "kernel", "names",
  __LINE__, [](auto&... a) { kernel(a...); }, args);``: the lambda lets C++ deduce a
  template kernel's arguments exactly as nvcc does;
- ``__shared__ float tile[16][16];`` becomes ``auto& tile =
  ::mini_cuda::shared<float[16][16]>(1, "tile", __LINE__);`` (a reference into the
  current block's shared memory), and ``extern __shared__ float s[];`` becomes
  ``float* s = ::mini_cuda::dynamic_shared<float>();``.

Also: ``__noinline__`` becomes ``__attribute__((noinline))`` (a macro of that name breaks
the standard library headers), and ``__device__`` variables outside functions are placed
in the module's device-variable section.

The scanner knows comments, string and character literals (raw strings too), so text
inside them is never rewritten.
"""
from __future__ import annotations

import re

__all__ = ["rewrite_cuda", "RewriteError", "code_mask"]


class RewriteError(ValueError):
    """A CUDA construct the emulator's rewriter cannot handle; ``line`` is 1-based."""

    def __init__(self, line: int, message: str):
        self.line = line
        super().__init__(f"line {line}: {message}")


def code_mask(src: str) -> list[bool]:
    """For each character of ``src``: True if it is code (not a comment or literal)."""
    n = len(src)
    mask = [True] * n
    i = 0
    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                mask[k] = False
            i = j
        elif c == "/" and i + 1 < n and src[i + 1] == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                mask[k] = False
            i = j
        elif c == "R" and i + 1 < n and src[i + 1] == '"' and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', src[i:])
            if not m:
                i += 1
                continue
            end = src.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            for k in range(i, j):
                mask[k] = False
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                if src[j] == "\\":
                    j += 1
                elif src[j] == "\n":
                    break
                j += 1
            j = min(n, j + 1)
            if c == "'" and i > 0 and src[i - 1].isalnum() and j - i > 3:
                # a digit separator (1'000'000), not a character literal
                i += 1
                continue
            for k in range(i, j):
                mask[k] = False
            i = j
        else:
            i += 1
    return mask


_IDENT = re.compile(r"[A-Za-z_]\w*")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}


def _line_of(src: str, pos: int) -> int:
    return src.count("\n", 0, pos) + 1


def _match_forward(src: str, mask, i: int) -> int:
    """Index just past the bracket that closes the one at ``i``."""
    stack = [_OPEN[src[i]]]
    j = i + 1
    while j < len(src) and stack:
        c = src[j]
        if mask[j]:
            if c in _OPEN:
                stack.append(_OPEN[c])
            elif c in _CLOSE:
                if c != stack[-1]:
                    raise RewriteError(_line_of(src, j), f"unbalanced {c!r}: expected {stack[-1]!r} first")
                stack.pop()
        j += 1
    if stack:
        raise RewriteError(_line_of(src, i), f"{src[i]!r} is never closed")
    return j


def _split_top(text: str) -> list[str]:
    """Split at commas outside (), [], {} (text is code without literals containing commas)."""
    mask = code_mask(text)
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if not mask[i]:
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _c_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append(" ")
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.append(f"\\x{ord(ch):02x}\"\"")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


_CAST = re.compile(r"^\(\s*(?:const\s+)?[A-Za-z_][\w:<>,\s]*\*+\s*\)\s*")
_CXX_CAST = re.compile(r"^(?:static|reinterpret|const)_cast\s*<[^>]*>\s*\((.*)\)$", re.S)


def _arg_name(arg: str) -> str:
    """The name reports use for a kernel argument: its expression without a pointer cast
    (``(float*)d_out`` -> ``d_out``)."""
    a = " ".join(arg.split())
    m = _CXX_CAST.match(a)
    if m:
        a = m.group(1).strip()
    return _CAST.sub("", a)


def _kernel_start(src: str, mask, end: int) -> int:
    """Start of the kernel expression that ends just before ``end`` (the ``<<<``)."""
    i = end
    while i > 0 and src[i - 1].isspace():
        i -= 1
    while True:
        if i > 0 and src[i - 1] == ">" and mask[i - 1]:   # template arguments
            depth = 0
            j = i - 1
            while j >= 0:
                if mask[j]:
                    if src[j] == ">":
                        depth += 1
                    elif src[j] == "<":
                        depth -= 1
                        if depth == 0:
                            break
                j -= 1
            if j < 0:
                raise RewriteError(_line_of(src, end), "cannot find the kernel before <<<")
            i = j
            while i > 0 and src[i - 1].isspace():
                i -= 1
        j = i
        while j > 0 and (src[j - 1].isalnum() or src[j - 1] == "_"):
            j -= 1
        if j == i:
            raise RewriteError(_line_of(src, end), "cannot find the kernel name before <<<")
        i = j
        k = i
        while k > 0 and src[k - 1].isspace():
            k -= 1
        if k >= 2 and src[k - 2:k] == "::":
            i = k - 2
            while i > 0 and src[i - 1].isspace():
                i -= 1
            if i == 0 or not (src[i - 1].isalnum() or src[i - 1] in "_>"):
                return k - 2          # a leading :: (global namespace)
            continue
        return i


def _rewrite_launches(src: str) -> str:
    out = []
    pos = 0
    while True:
        mask = None
        i = src.find("<<<", pos)
        while i >= 0:
            mask = mask or code_mask(src)
            if mask[i]:
                break
            i = src.find("<<<", i + 3)
        if i < 0:
            out.append(src[pos:])
            return "".join(out)
        line = _line_of(src, i)
        start = _kernel_start(src, mask, i)
        kernel = src[start:i].strip()
        # the configuration, up to >>> outside brackets
        j, depth = i + 3, 0
        while j < len(src):
            if mask[j]:
                c = src[j]
                if c in _OPEN:
                    depth += 1
                elif c in _CLOSE:
                    depth -= 1
                elif depth == 0 and src.startswith(">>>", j):
                    break
            j += 1
        else:
            raise RewriteError(line, "<<< without a matching >>>")
        config = src[i + 3:j]
        k = j + 3
        while k < len(src) and src[k].isspace():
            k += 1
        if k >= len(src) or src[k] != "(":
            raise RewriteError(line, f"expected the kernel's arguments in parentheses after >>> of {kernel}")
        close = _match_forward(src, mask, k)
        args = src[k + 1:close - 1]
        cfg_parts = _split_top(config)
        if not 2 <= len(cfg_parts) <= 4 or any(not p for p in cfg_parts):
            raise RewriteError(line, f"<<<{config.strip()}>>>: a launch takes grid and block, optionally "
                                     "shared-memory bytes and a stream")
        arg_parts = [a for a in _split_top(args)] if args.strip() else []
        names = "\x1f".join(_arg_name(a) for a in arg_parts)
        call_args = (", " + args) if args.strip() else ""
        replacement = (f"::mini_cuda::launch(::mini_cuda::LaunchConfig({config}), {_c_string(kernel)}, "
                       f"{_c_string(names)}, __LINE__, [](auto&... mini_cuda_arg) {{ {kernel}(mini_cuda_arg...); }}"
                       f"{call_args})")
        replacement = replacement.replace("\n", " ")
        newlines = src.count("\n", start, close)
        out.append(src[pos:start])
        out.append(replacement + "\n" * newlines)
        pos = close


_DECL_END = re.compile(r";")


def _scopes(src: str, mask) -> list[bool]:
    """For each position: True when it is inside a function body (not at namespace or
    class scope)."""
    inside = [False] * len(src)
    stack: list[bool] = []      # per open brace: does it open (a block inside) a function?
    last_sep = -1               # the last ; { or } of code
    for i, c in enumerate(src):
        if mask[i] and c in "{};":
            if c == "{":
                if stack and stack[-1]:
                    stack.append(True)
                else:
                    head = src[last_sep + 1:i]
                    not_code = re.search(r'\bnamespace\b|\bextern\s*"C"\s*$|'
                                         r'\b(struct|class|union|enum)\b[^()]*$|=\s*$', head)
                    stack.append(not not_code)
            elif c == "}" and stack:
                stack.pop()
            last_sep = i
        inside[i] = bool(stack) and stack[-1]
    return inside


_SHARED = re.compile(r"\b__shared__\b")
_ALIGN = re.compile(r"\b(?:__align__|alignas)\s*\(\s*([^()]*)\s*\)")
_DECLARATOR = re.compile(r"^(?P<type>.*?)(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\[\]]*\]\s*)*)$", re.S)


def _rewrite_shared(src: str) -> str:
    decl_id = 0
    while True:
        mask = code_mask(src)
        m = None
        for cand in _SHARED.finditer(src):
            if mask[cand.start()]:
                m = cand
                break
        if m is None:
            return src
        line = _line_of(src, m.start())
        # the whole declaration: from the previous ; { } to the next ; (outside brackets)
        s = m.start()
        while s > 0 and not (mask[s - 1] and src[s - 1] in ";{}"):
            s -= 1
        # keep a preprocessor line or label before the declaration out of it
        nl = src.rfind("\n", s, m.start())
        if nl >= 0 and src[s:nl].strip().startswith("#"):
            s = nl + 1
        e = m.end()
        depth = 0
        while e < len(src):
            if mask[e]:
                if src[e] in _OPEN:
                    depth += 1
                elif src[e] in _CLOSE:
                    depth -= 1
                elif src[e] == ";" and depth == 0:
                    break
            e += 1
        else:
            raise RewriteError(line, "__shared__ declaration without a closing ;")
        # comments and layout before the declaration stay; its leading code words
        # (extern, static, __align__) become part of the declaration
        lead = src[s:m.start()]
        lead_code = "".join(ch if mask[s + k] else " " for k, ch in enumerate(lead))
        lead_kept = "".join(ch if (not mask[s + k] or ch.isspace()) else " " for k, ch in enumerate(lead))
        body = "".join(ch if mask[m.end() + k] else " " for k, ch in enumerate(src[m.end():e]))
        decl = " ".join((lead_code + " " + body).split())
        newlines = src.count("\n", m.start(), e)
        extern = bool(re.search(r"\bextern\b", decl))
        decl = re.sub(r"\b(extern|static)\b", " ", decl)
        align = None
        am = _ALIGN.search(decl)
        if am:
            align = am.group(1)
            decl = _ALIGN.sub(" ", decl)
        if "=" in decl:
            raise RewriteError(line, "a __shared__ variable cannot have an initializer (CUDA forbids it): "
                                     "assign it in the kernel, then __syncthreads()")
        declarators = _split_top(decl)
        first = _DECLARATOR.match(declarators[0])
        if not first or not first.group("type").strip():
            raise RewriteError(line, f"cannot read the __shared__ declaration {decl!r}")
        base_type = " ".join(first.group("type").split())
        parts = [(first.group("name"), first.group("dims"))]
        for d in declarators[1:]:
            dm = re.match(r"^(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\[\]]*\]\s*)*)$", d)
            if not dm:
                raise RewriteError(line, f"cannot read the __shared__ declarator {d!r}: declare one "
                                         "variable per line")
            parts.append((dm.group("name"), dm.group("dims")))
        in_function = _scopes(src, mask)[m.start()]
        stmts = []
        for name, dims in parts:
            dims = "".join(dims.split())
            if extern:
                if not dims.startswith("[]"):
                    raise RewriteError(line, f"extern __shared__ {name} must be an unsized array, "
                                             f"like extern __shared__ float {name}[];")
                elem = base_type + dims[2:]
                if in_function:
                    stmts.append(f"{elem}* const {name} = ::mini_cuda::dynamic_shared<{elem}>();")
                else:
                    stmts.append(f"static const ::mini_cuda::DynamicSharedAtNamespaceScope<{elem}> {name}{{}};")
            else:
                decl_id += 1
                typ = f"{base_type}{dims}"
                al = f"({align})" if align else "0"
                if in_function:
                    stmts.append(f"auto& {name} = ::mini_cuda::shared<{typ}>({decl_id}, {_c_string(name)}, "
                                 f"__LINE__, {al});")
                else:
                    stmts.append(f"static const ::mini_cuda::SharedAtNamespaceScope<{typ}> {name}"
                                 f"{{{decl_id}, {_c_string(name)}, __LINE__, {al}}};")
        src = src[:s] + lead_kept + " ".join(stmts) + "\n" * newlines + src[e + 1:]


_DEVICE_VAR = re.compile(r"\b__device__\b")


def _rewrite_device_variables(src: str) -> str:
    mask = code_mask(src)
    inside = None
    out, pos = [], 0
    for m in _DEVICE_VAR.finditer(src):
        if not mask[m.start()]:
            continue
        # the declaration up to ; or { (outside brackets)
        e, depth = m.end(), 0
        while e < len(src):
            if mask[e]:
                c = src[e]
                if c in "([":
                    depth += 1
                elif c in ")]":
                    depth -= 1
                elif depth == 0 and c in ";{":
                    break
            e += 1
        head = src[m.end():e]
        before_init = head.split("=", 1)[0]
        if "(" in before_init or e >= len(src) or src[e] != ";":
            continue   # a function
        inside = inside or _scopes(src, mask)
        if inside[m.start()]:
            continue
        out.append(src[pos:m.start()])
        out.append("MINI_CUDA_DEVICE_VARIABLE")
        pos = m.end()
    out.append(src[pos:])
    return "".join(out)


def _rewrite_noinline(src: str) -> str:
    mask = code_mask(src)
    out, pos = [], 0
    for m in re.finditer(r"\b__noinline__\b", src):
        if mask[m.start()]:
            out.append(src[pos:m.start()])
            out.append("__attribute__((noinline))")
            pos = m.end()
    out.append(src[pos:])
    return "".join(out)


def rewrite_cuda(src: str) -> str:
    """The emulator's version of the CUDA source ``src`` (same number of lines)."""
    src = _rewrite_noinline(src)
    src = _rewrite_device_variables(src)
    src = _rewrite_shared(src)
    src = _rewrite_launches(src)
    return src
