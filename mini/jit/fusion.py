"""Fusion: one C++ kernel for each chain of elementwise ops in a graph.

Run one by one, a chain of k elementwise ops on N elements of b bytes reads and writes
memory k times: 2·k·N·b bytes.  One kernel that computes the whole chain for element i
before moving on keeps the intermediate values in registers: it reads its inputs once and
writes one result, 2·N·b bytes for a chain with one input, and it is one call instead of k.

- :func:`find_chains` (exercise ``01.find_chains``) finds the chains in a graph;
- :func:`kernel_body` (exercise ``01.kernel_body``) writes the C++ that computes one chain
  for element ``i``;
- :func:`kernel_source` wraps that body in a complete extension (a loop over the elements,
  parallel with OpenMP, and the CPython glue), :func:`build_kernel` compiles it with
  :func:`mini.utils.cpp_extension.load_inline`, and :func:`fuse` returns a new graph in
  which each chain is one node.

Generated kernels are compiled without pybind11 (``load_inline(..., pybind11=False)``, a
fraction of a second instead of several) and with ``-ffp-contract=off``, so that ``a * b + c``
rounds twice, as eager mode's two kernels do: a fused chain of additions, subtractions,
multiplications, divisions and maxima gives the same bits as eager.
"""
from __future__ import annotations

import math

import numpy as np

from mini.exercises import exercise
from mini.jit.graph import VIEW_OPS, Graph, Node, Ref, map_refs, refs_in

__all__ = ["ELEMENTWISE_OPS", "CPP_OPS", "CTYPES", "cpp_number", "find_chains", "kernel_body",
           "kernel_source", "load_kernel", "build_kernel", "fuse", "traffic", "FusedKernel",
           "FusionError", "vector_math"]

#: The C++ expression of each elementwise op that a fused kernel can compute, with its
#: operands as {0} and {1} (each operand is a variable name or a constant).  They compute
#: what mini's cpu kernels compute, bit for bit for the exactly rounded ones (maximum and
#: relu keep NaN, as numpy does, and relu(-0.0) is +0.0), and they have no branches, so the
#: loop around them vectorises (`|` where `||` would branch).
CPP_OPS = {
    "Add": "{0} + {1}",
    "Sub": "{0} - {1}",
    "Mul": "{0} * {1}",
    "Div": "{0} / {1}",
    "Maximum": "((({0} > {1}) | ({0} != {0})) ? {0} : {1})",
    "Neg": "-{0}",
    "Exp": "std::exp({0})",
    "Log": "std::log({0})",
    "Sqrt": "std::sqrt({0})",
    "Sin": "std::sin({0})",
    "Cos": "std::cos({0})",
    "Tanh": "std::tanh({0})",
    "Abs": "std::abs({0})",
    "Relu": "({0} <= 0 ? 0 : {0})",
    "Sigmoid": "mini_sigmoid({0})",
}
#: The ops a chain may contain.
ELEMENTWISE_OPS = frozenset(CPP_OPS)
#: The C++ type of each dtype a kernel computes in.
CTYPES = {"float32": "float", "float64": "double"}


class FusionError(ValueError):
    """A chain cannot be fused as given (the message names the chain and the reason)."""


@exercise("01.find_chains")
def find_chains(graph):
    """The chains of ``graph`` that one fused kernel can compute, as a list of chains, each
    a list of node indices in increasing order; every chain has at least 2 nodes and no node
    is in two chains.

    A chain ``[c0, c1, ..., ck]`` (not necessarily neighbours in ``graph.nodes``) is such
    that

    - every node is elementwise (``node.op in ELEMENTWISE_OPS``) on float32 or float64, and
      its result and every tensor argument have the shape and dtype of ``c0``'s result (no
      broadcasting); its other arguments are Python numbers (ints or floats);
    - each node after ``c0`` reads the result of the node before it;
    - the result of each node but the last is read by exactly one node, the next one in
      the chain, and is not in ``graph.outputs``: nothing else needs it, so it never has to
      be stored in memory.

    Chains are as long as these rules allow: walk the nodes in order, start a chain at each
    elementwise node that is in no chain yet, and extend it while the rules hold.
    ``graph.users()`` maps each Ref to the indices of the nodes that read it.
    """
    ### BEGIN SOLUTION
    users = graph.users()
    outputs = set(graph.outputs)

    def fits(i, kind):
        node = graph.nodes[i]
        if node.op not in ELEMENTWISE_OPS or node.meta is None or node.kwargs:
            return False
        if (node.meta.shape, node.meta.dtype) != kind or kind[1] not in ("float32", "float64"):
            return False
        for a in node.args:
            if isinstance(a, Ref):
                m = graph.meta(a)
                if m is None or (m.shape, m.dtype) != kind:
                    return False
            elif type(a) not in (int, float):
                return False
        return True

    chains, taken = [], set()
    for i, node in enumerate(graph.nodes):
        if i in taken or node.meta is None:
            continue
        kind = (node.meta.shape, node.meta.dtype)
        if not fits(i, kind):
            continue
        chain = [i]
        while True:
            last = Ref("node", chain[-1])
            readers = users.get(last, [])
            if last in outputs or len(readers) != 1:
                break
            j = readers[0]
            if j in taken or not fits(j, kind):
                break
            chain.append(j)
        if len(chain) >= 2:
            chains.append(chain)
            taken.update(chain)
    return chains
    ### END SOLUTION


@exercise("01.kernel_body")
def kernel_body(graph, chain):
    """The C++ statements that compute the chain ``chain`` of ``graph`` (node indices, as
    :func:`find_chains` returns them) for one element ``i``.  Returns ``(body, inputs)``.

    - ``inputs``: the Refs of the values the chain reads from outside itself (graph inputs,
      captured tensors, results of nodes not in the chain), each listed once, in the order
      the chain first reads them.  The kernel receives them as the arrays ``in0``, ``in1``,
      ... (``const T*``, where ``T`` is ``float`` for float32 and ``double`` for float64)
      and writes its result to ``out`` (``T*``).
    - ``body``: C++ statements for element ``i``.  Compute each node of the chain in order,
      with ``CPP_OPS[node.op]`` giving its expression; write Python numbers as constants of
      type ``T`` (a float32 chain computes ``x * 0.1`` as ``x * float(0.1)``, as eager does;
      ``cpp_number(0.1)`` writes the number as C++ reads it back exactly);
      end with one statement that stores the last node's value in ``out[i]``.  ``out`` may
      be the very buffer of an input (mini reuses the buffer of a value that is not needed
      after this kernel), so read ``out`` never, and read every input before that store.
    """
    ### BEGIN SOLUTION
    ctype = CTYPES[graph.nodes[chain[0]].meta.dtype]
    inputs, names, lines = [], {}, []

    def operand(a):
        if not isinstance(a, Ref):
            return f"static_cast<{ctype}>({cpp_number(a)})"
        if a not in names:
            k = len(inputs)
            inputs.append(a)
            names[a] = f"a{k}"
            lines.append(f"const {ctype} a{k} = in{k}[i];")
        return names[a]

    for i in chain:
        node = graph.nodes[i]
        expr = CPP_OPS[node.op].format(*[operand(a) for a in node.args])
        lines.append(f"const {ctype} v{i} = {expr};")
        names[Ref("node", i)] = f"v{i}"
    lines.append(f"out[i] = v{chain[-1]};")
    return "\n".join(lines), inputs
    ### END SOLUTION


def cpp_number(x) -> str:
    """A Python number as a C++ double literal that reads back exactly (``0.1`` -> ``0.1``,
    ``2`` -> ``2.0``, infinities and NaN by name)."""
    x = float(x)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    return repr(x)


# --------------------------------------------------------------------------- building

# With glibc's vector math library (libmvec: x86-64 Linux, GCC), the loop's calls to exp, log,
# sin, cos and tanh become calls to their SIMD versions, four floats at a time, about as
# accurate as the scalar ones (tanhf: 1 ulp).  The declarations below tell the compiler
# those versions exist; nothing else about the loop changes.
_VECTOR_MATH = """\
#ifdef MINI_VECTOR_MATH
extern "C" {
#define MINI_SIMD __attribute__((__simd__("notinbranch")))
float expf(float) MINI_SIMD; double exp(double) MINI_SIMD;
float logf(float) MINI_SIMD; double log(double) MINI_SIMD;
float sinf(float) MINI_SIMD; double sin(double) MINI_SIMD;
float cosf(float) MINI_SIMD; double cos(double) MINI_SIMD;
float tanhf(float) MINI_SIMD; double tanh(double) MINI_SIMD;
}
#endif
template <typename T> static inline T mini_sigmoid(T x) {   // stable: exp of -|x| only
    const T e = std::exp(-std::abs(x));
    return (x >= 0 ? T(1) : e) / (T(1) + e);
}
"""


def vector_math() -> bool:
    """Whether generated kernels can use libmvec (see above)."""
    if _VECTOR_MATH_OK:
        return _VECTOR_MATH_OK[0]
    import ctypes.util
    import platform
    import sys
    from mini.utils.cpp_extension import _compiler_id, compiler
    ok = False
    try:
        ok = (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
              and ctypes.util.find_library("mvec") is not None
              and "clang" not in _compiler_id(compiler()).lower())
    except Exception:  # noqa: BLE001 - no compiler: nothing will be built anyway
        ok = False
    _VECTOR_MATH_OK.append(ok)
    return ok


_VECTOR_MATH_OK: list = []


def kernel_source(body: str, n_inputs: int, ctype: str) -> str:
    """A complete CPython extension (for ``load_inline(..., pybind11=False)``) whose
    function ``kernel(in0, ..., in{n-1}, out)`` runs ``body`` for every element ``i`` of
    ``out`` (C-contiguous arrays of ``ctype``, all of the same length), vectorised, and in
    parallel with OpenMP for large arrays."""
    # no __restrict: `out` may be the buffer of an input (a donated one); `omp simd` is what
    # lets the loop vectorise (element i reads its inputs, then writes out[i])
    ins = ", ".join(f"const {ctype}* in{k}" for k in range(n_inputs))
    params = (ins + ", " if ins else "") + f"{ctype}* out, int64_t n"
    call = ", ".join([f"(const {ctype}*)views[{k}].buf" for k in range(n_inputs)]
                     + [f"({ctype}*)views[{n_inputs}].buf", "n"])
    indented = "\n".join("            " + line for line in body.splitlines())
    return _VECTOR_MATH + f"""\
static void loop({params}) {{
    if (n > 65536) {{        // large: threads, each on a vectorised chunk
        #pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; ++i) {{
{indented}
        }}
    }} else {{               // small: one thread, vectorised (an if() clause would not be)
        #pragma omp simd
        for (int64_t i = 0; i < n; ++i) {{
{indented}
        }}
    }}
}}

static void release(Py_buffer* views, int count) {{
    for (int k = 0; k < count; ++k) PyBuffer_Release(&views[k]);
}}

static PyObject* kernel(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {{
    const int count = {n_inputs + 1};
    if (nargs != count) {{
        PyErr_Format(PyExc_TypeError, "fused kernel: expected %d arrays (inputs, then out), "
                     "got %zd", count, nargs);
        return NULL;
    }}
    Py_buffer views[{n_inputs + 1}];
    for (int k = 0; k < count; ++k) {{
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (k == count - 1 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(args[k], &views[k], flags) != 0) {{ release(views, k); return NULL; }}
        if (views[k].itemsize != (Py_ssize_t)sizeof({ctype}) || views[k].len != views[0].len) {{
            release(views, k + 1);
            PyErr_Format(PyExc_ValueError, "fused kernel: array %d has %zd bytes of %zd-byte "
                         "items; expected %zd bytes of {ctype}", k, views[k].len,
                         views[k].itemsize, views[0].len);
            return NULL;
        }}
    }}
    const int64_t n = (int64_t)(views[count - 1].len / (Py_ssize_t)sizeof({ctype}));
    Py_BEGIN_ALLOW_THREADS
    loop({call});
    Py_END_ALLOW_THREADS
    release(views, count);
    Py_RETURN_NONE;
}}

static PyMethodDef methods[] = {{
    {{"kernel", (PyCFunction)(void (*)(void))kernel, METH_FASTCALL, "a fused elementwise kernel"}},
    {{NULL, NULL, 0, NULL}}}};
static struct PyModuleDef definition = {{PyModuleDef_HEAD_INIT, MINI_MODULE_NAME, NULL, -1, methods}};
PyMODINIT_FUNC MINI_MODULE_INIT(void) {{ return PyModule_Create(&definition); }}
"""


class FusedKernel:
    """The kernel of a fused node: ``kernel(*inputs) -> out`` for numpy arrays of one shape
    (in kernel form: flat when contiguous, see :mod:`mini.jit.lowering`); the result is flat.
    ``donate``: the position of an input whose buffer the result may overwrite (None: a new
    buffer); ``source`` and ``body``: the generated C++; ``contiguous``: every input is
    contiguous (known from the trace: the guards keep the layouts)."""

    def __init__(self, module, shape, dtype, n_inputs, donate, body, source, ops,
                 contiguous: bool = False):
        self._call = module.kernel
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = math.prod(self.shape)
        self.n_inputs, self.donate = n_inputs, donate
        self.body, self.source, self.ops = body, source, tuple(ops)
        self.contiguous = contiguous
        self.__name__ = "fused_" + "_".join(o.lower() for o in ops)
        self.allocates = 0 if donate is not None else self.size * self.dtype.itemsize
        if contiguous:                 # what mini's generated replay pastes instead of a call
            args = ", ".join(f"{{a{k}}}" for k in range(n_inputs))
            call = "{call}(" + (args + ", " if args else "") + "{out})"
            if donate is not None:
                self.inline = ("{out} = {a%d}; " % donate + call, {"call": self._call}, {})
            else:
                self.inline = ("{out} = {empty}(%d, {dt}); " % self.size + call,
                               {"call": self._call, "empty": np.empty, "dt": self.dtype}, {})

    def __call__(self, *arrays):
        if not self.contiguous:
            arrays = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays]
        if self.donate is not None:
            out = arrays[self.donate]
        else:
            from mini.jit.lowering import _alloc
            out = _alloc(self.size, self.dtype, self.allocates)
        self._call(*arrays, out)
        return out

    def __repr__(self):
        return f"<fused kernel {'+'.join(self.ops)}: {self.n_inputs} inputs>"


def load_kernel(source: str, name: str = "mini_fused", build_directory=None):
    """Compile and load a kernel made by :func:`kernel_source` (cached by source)."""
    from mini.utils.cpp_extension import load_inline
    # no FMAs (the bits of eager mode); no errno or FP traps to honour (the loop vectorises)
    cflags = ["-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math"] + host_flags()
    ldflags = []
    if vector_math():
        cflags.append("-DMINI_VECTOR_MATH")
        ldflags.append("-lmvec")
    return load_inline(name, source, extra_cflags=cflags, extra_ldflags=ldflags, pybind11=False,
                       build_directory=build_directory)


def host_flags() -> list:
    """``-march=native`` where the compiler takes it: a JIT compiles for the machine it runs
    on (AVX-512 vector math where there is AVX-512).  The CPU's features are in the flags
    too (``-DMINI_HOST_CPU=...``), so a build cache shared by machines with other CPUs never
    hands one a binary it cannot run."""
    if _HOST_FLAGS:
        return list(_HOST_FLAGS[0])
    import hashlib
    import os
    import platform
    import shlex
    import subprocess
    from mini.utils.cpp_extension import compiler
    flags: list = []
    try:
        r = subprocess.run(shlex.split(compiler()) + ["-march=native", "-x", "c++", "-c", "-",
                                                      "-o", os.devnull],
                           input="int f() { return 0; }\n", capture_output=True, text=True,
                           timeout=60)
        if r.returncode == 0:
            cpu = platform.processor() + platform.machine()
            try:
                with open("/proc/cpuinfo") as f:
                    cpu += "".join(line for line in f if line.startswith(("flags", "model name")))
            except OSError:
                pass
            flags = ["-march=native", f"-DMINI_HOST_CPU={hashlib.sha256(cpu.encode()).hexdigest()[:12]}"]
    except (OSError, subprocess.SubprocessError, RuntimeError):
        flags = []
    _HOST_FLAGS.append(flags)
    return list(flags)


_HOST_FLAGS: list = []


def build_kernel(graph: Graph, chain: list, donate: Ref | None = None, name: str | None = None,
                 build_directory=None, fresh: bool = False) -> tuple[FusedKernel, list]:
    """Generate (``01.kernel_body``), compile and load the kernel of one chain; returns the
    kernel and the Refs of its inputs.  ``fresh``: really compile, even when this source was
    built before (to measure the compile time)."""
    body, inputs = kernel_body(graph, chain)
    meta = graph.nodes[chain[-1]].meta
    ops = [graph.nodes[i].op for i in chain]
    source = kernel_source(body, len(inputs), CTYPES[meta.dtype])
    if fresh:
        import time
        source += f"// built at {time.time_ns()}\n"   # another source: no cached build
    module = load_kernel(source, name or "mini_fused_" + "_".join(o.lower() for o in ops)[:60],
                         build_directory)
    from mini.jit.lowering import _contiguous
    position = None if donate is None or donate not in inputs else inputs.index(donate)
    contiguous = all(graph.meta(r) is not None and _contiguous(graph.meta(r)) for r in inputs)
    return FusedKernel(module, meta.shape, meta.dtype, len(inputs), position, body, source,
                       ops, contiguous), list(inputs)


# --------------------------------------------------------------------------- the pass

def fuse(graph: Graph, build_directory=None, fresh: bool = False) -> Graph:
    """A new graph in which each chain of :func:`find_chains` is one node running its fused
    kernel (``node.op`` is "Fused(Mul,Add,...)"); the other nodes keep their kernels.
    Raises :class:`FusionError` for a chain that breaks the rules (so a wrong chain never
    computes a wrong value).  ``fresh``: compile every kernel again (to time a compile)."""
    chains = find_chains(graph)
    _validate(graph, chains)
    last_of = {c[-1]: c for c in chains}
    inside = {i for c in chains for i in c[:-1]}
    new = Graph()
    new.inputs, new.captured, new.captured_meta = list(graph.inputs), graph.captured, \
        list(graph.captured_meta)
    moved: dict = {}

    def remap(r: Ref) -> Ref:
        return moved.get(r, r) if r.kind == "node" else r

    users = graph.users()
    for i, node in enumerate(graph.nodes):
        if i in inside:
            continue
        if i in last_of:
            chain = last_of[i]
            donor = _donor(graph, chain, users)
            kernel, inputs = build_kernel(graph, chain, donor, build_directory=build_directory,
                                          fresh=fresh)
            fused = Node("Fused(" + ",".join(graph.nodes[j].op for j in chain) + ")", None,
                         tuple(remap(r) for r in inputs), {}, node.meta, kernel=kernel)
            fused.chain = list(chain)
            new.nodes.append(fused)
        else:
            copy = Node(node.op, node.target, map_refs(node.args, remap),
                        map_refs(node.kwargs, remap), node.meta, node.value, node.kernel)
            new.nodes.append(copy)
        moved[Ref("node", i)] = Ref("node", len(new.nodes) - 1)
    new.outputs = [remap(r) for r in graph.outputs]
    return new


def _validate(graph: Graph, chains) -> None:
    """The rules of find_chains, checked again before anything is compiled."""
    users = graph.users()
    outputs = set(graph.outputs)
    seen: set = set()
    for chain in chains:
        what = f"01.find_chains returned the chain {list(chain)}"
        if not isinstance(chain, (list, tuple)) or len(chain) < 2 \
                or any(type(i) is not int or not 0 <= i < len(graph.nodes) for i in chain):
            raise FusionError(f"{what}: a chain is a list of at least 2 node indices")
        if list(chain) != sorted(set(chain)) or seen & set(chain):
            raise FusionError(f"{what}: indices must increase and no node may be in two chains")
        seen |= set(chain)
        first = graph.nodes[chain[0]].meta
        for j in chain:
            node = graph.nodes[j]
            if node.op not in ELEMENTWISE_OPS or node.meta is None:
                raise FusionError(f"{what}: node {j} ({node.op}) is not an elementwise op a "
                                  f"kernel can compute (a reduction, a view, a guard...)")
            if (node.meta.shape, node.meta.dtype) != (first.shape, first.dtype):
                raise FusionError(f"{what}: node {j} makes {node.meta!r}, the chain {first!r}")
            for a in refs_in(node.args):
                m = graph.meta(a)
                if m is None or (m.shape, m.dtype) != (first.shape, first.dtype):
                    raise FusionError(f"{what}: node {j} reads {a!r} of another shape or dtype "
                                      f"(a broadcast), which a one-index kernel cannot read")
        for j, k in zip(chain, chain[1:]):
            r = Ref("node", j)
            if r in outputs or users.get(r, []) != [k]:
                raise FusionError(f"{what}: the result of node {j} is needed outside the chain "
                                  f"(read by nodes {users.get(r, [])}"
                                  f"{', and returned' if r in outputs else ''})")
        for m in range(chain[0] + 1, chain[-1]):
            if m not in chain and graph.nodes[m].inplace:
                raise FusionError(f"{what}: node {m} ({graph.nodes[m].op}) writes in place "
                                  f"between the chain's nodes")


def _donor(graph: Graph, chain: list, users: dict) -> Ref | None:
    """An input of the chain whose buffer the kernel may overwrite: a fresh result of an
    elementwise node (no view of it exists), of the output's shape and dtype, not returned,
    and read by no node after this chain."""
    meta = graph.nodes[chain[-1]].meta
    outputs = set(graph.outputs)
    for a in _chain_inputs(graph, chain):
        if a.kind != "node" or a in outputs:
            continue
        producer = graph.nodes[a.index]
        if producer.op not in ELEMENTWISE_OPS and not producer.op.startswith("Fused("):
            continue
        if producer.meta is None or (producer.meta.shape, producer.meta.dtype) != \
                (meta.shape, meta.dtype):
            continue
        readers = users.get(a, [])
        if any(r > chain[-1] for r in readers) or any(graph.nodes[r].op in VIEW_OPS or
                                                      graph.nodes[r].inplace for r in readers):
            continue
        return a
    return None


def _chain_inputs(graph: Graph, chain: list) -> list:
    members = {Ref("node", i) for i in chain}
    out = []
    for i in chain:
        for a in refs_in(graph.nodes[i].args):
            if a not in members and a not in out:
                out.append(a)
    return out


# --------------------------------------------------------------------------- traffic

def traffic(graph: Graph) -> dict:
    """Bytes each node's kernel reads and writes, added up over the graph (from the tensors'
    shapes and dtypes): ``{"read": ..., "written": ..., "kernels": ...}``.  A view moves no
    bytes; a guard reads its input."""
    read = written = kernels = 0
    for node in graph.nodes:
        if node.op in VIEW_OPS:
            continue
        kernels += 1
        for a in dict.fromkeys(refs_in((node.args, node.kwargs))):
            m = graph.meta(a)
            if m is not None:
                read += math.prod(m.shape) * np.dtype(m.dtype).itemsize
        if node.meta is not None:
            written += math.prod(node.meta.shape) * np.dtype(node.meta.dtype).itemsize
    return {"read": read, "written": written, "total": read + written, "kernels": kernels}
