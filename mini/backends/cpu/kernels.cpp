// mini.backends._cpu: the primitive kernels of mini's cpu backend.
//
// Every kernel works on flat, 1-D, C-contiguous numpy buffers of float32 or float64
// (one template per dtype) and writes into an `out` buffer that the caller allocated.
// Arguments are checked before any memory is touched: a wrong dtype, mixed dtypes, a
// non-contiguous or read-only buffer, sizes that do not match, or a stride pattern that
// would reach outside `src` raise TypeError / ValueError naming the kernel and the
// problem.  No kernel ever reads or writes out of bounds.
//
// Loops run under OpenMP only above PARALLEL_THRESHOLD elements, so small arrays do not
// pay for starting a thread team.  Built without OpenMP (MINI_NO_OPENMP, e.g. Apple
// clang), the same code runs on one thread.

#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#ifndef MINI_NO_OPENMP
#include <omp.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define MINI_HAVE_ATFORK 1
#endif

namespace py = pybind11;

namespace {

constexpr int64_t kParallelThreshold = 32768;  // elements (or multiply-adds for matmul)

// ---------------------------------------------------------------------------------------
// Threads

// GNU OpenMP is not fork-safe: a child forked after the parent ran a parallel region
// hangs in its first one (e.g. a DataLoader worker started with fork).  So a forked child
// runs every kernel on one thread, as PyTorch does.
bool g_forked_child = false;
void mark_forked_child() { g_forked_child = true; }

inline int max_threads() {
#ifndef MINI_NO_OPENMP
    return g_forked_child ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}

inline bool go_parallel(int64_t work) {
#ifndef MINI_NO_OPENMP
    return work >= kParallelThreshold && !g_forked_child && omp_get_max_threads() > 1;
#else
    (void)work;
    return false;
#endif
}

// body(i) for i in [0, n); threads split the range statically above the threshold.
template <typename Body>
inline void parallel_for(int64_t n, Body body) {
#ifndef MINI_NO_OPENMP
    if (go_parallel(n)) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) body(i);
        return;
    }
#endif
    for (int64_t i = 0; i < n; ++i) body(i);
}

// body(begin, end) over disjoint chunks covering [0, n): one chunk per thread above the
// threshold, a single chunk below it.
template <typename Body>
inline void parallel_chunks(int64_t n, Body body) {
#ifndef MINI_NO_OPENMP
    if (go_parallel(n)) {
#pragma omp parallel
        {
            const int64_t nt = omp_get_num_threads();
            const int64_t t = omp_get_thread_num();
            const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
            if (begin < end) body(begin, end);
        }
        return;
    }
#endif
    if (n > 0) body(int64_t(0), n);
}

// ---------------------------------------------------------------------------------------
// Argument checking

enum class DType { f32, f64 };

const char* dtype_name(DType d) { return d == DType::f32 ? "float32" : "float64"; }

std::string describe_dtype(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

std::string describe_shape(const py::array& a) {
    std::ostringstream s;
    s << "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s << a.shape(i) << (a.ndim() == 1 ? "," : (i + 1 < a.ndim() ? ", " : ""));
    s << ")";
    return s.str();
}

[[noreturn]] void type_error(const char* kernel, const std::string& msg) {
    throw py::type_error(std::string("mini.backends._cpu.") + kernel + ": " + msg);
}
[[noreturn]] void value_error(const char* kernel, const std::string& msg) {
    throw py::value_error(std::string("mini.backends._cpu.") + kernel + ": " + msg);
}

// A flat float32/float64 C-contiguous numpy array, checked.
struct Buf {
    py::array arr;
    DType dtype;
    int64_t size;
};

Buf check_buffer(const char* kernel, const char* name, const py::object& obj, bool writable) {
    if (!py::isinstance<py::array>(obj)) {
        type_error(kernel, std::string("argument '") + name + "' must be a numpy.ndarray, got " +
                               py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
    }
    py::array a = py::reinterpret_borrow<py::array>(obj);
    DType d;
    if (a.dtype().equal(py::dtype::of<float>())) {
        d = DType::f32;
    } else if (a.dtype().equal(py::dtype::of<double>())) {
        d = DType::f64;
    } else {
        type_error(kernel, std::string("argument '") + name + "' has dtype " + describe_dtype(a) +
                               "; the cpu kernels take float32 or float64 in native byte order");
    }
    if (a.ndim() != 1) {
        value_error(kernel, std::string("argument '") + name + "' must be a flat 1-D buffer, got shape " +
                                describe_shape(a));
    }
    if (!(a.flags() & py::array::c_style)) {
        value_error(kernel, std::string("argument '") + name + "' is not C-contiguous (stride " +
                                std::to_string(a.strides(0)) + " bytes); pass a compact buffer, "
                                "e.g. numpy.ascontiguousarray(x)");
    }
    if (writable && !a.writeable()) {
        value_error(kernel, std::string("output '") + name + "' is read-only");
    }
    return Buf{a, d, static_cast<int64_t>(a.size())};
}

void check_same_dtype(const char* kernel, const Buf& x, const char* xn, const Buf& y, const char* yn) {
    if (x.dtype != y.dtype) {
        type_error(kernel, std::string("dtypes differ: '") + xn + "' is " + dtype_name(x.dtype) + " but '" +
                               yn + "' is " + dtype_name(y.dtype));
    }
}

void check_same_size(const char* kernel, const Buf& x, const char* xn, const Buf& y, const char* yn) {
    if (x.size != y.size) {
        value_error(kernel, std::string("sizes differ: '") + xn + "' has " + std::to_string(x.size) +
                                " elements but '" + yn + "' has " + std::to_string(y.size));
    }
}

// Byte ranges [data, data + size*itemsize) of two buffers overlap.
bool overlaps(const Buf& x, const Buf& y) {
    if (x.size == 0 || y.size == 0) return false;
    auto xb = reinterpret_cast<std::uintptr_t>(x.arr.data());
    auto yb = reinterpret_cast<std::uintptr_t>(y.arr.data());
    auto xe = xb + static_cast<std::uintptr_t>(x.arr.nbytes());
    auto ye = yb + static_cast<std::uintptr_t>(y.arr.nbytes());
    return xb < ye && yb < xe;
}

void check_no_overlap(const char* kernel, const Buf& in, const char* in_name, const Buf& out) {
    if (overlaps(in, out)) {
        value_error(kernel, std::string("'out' overlaps '") + in_name +
                                "' in memory; this kernel cannot run in place, pass a separate output buffer");
    }
}

// Checked int64 arithmetic (portable: no compiler builtins).
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

bool mul_overflows(int64_t a, int64_t b) {  // a >= 0
    if (a == 0 || b == 0) return false;
    int64_t mag = b == std::numeric_limits<int64_t>::min() ? kMax : (b < 0 ? -b : b);
    return mag > kMax / a;
}

int64_t checked_mul(const char* kernel, int64_t a, int64_t b, const std::string& what) {
    if (mul_overflows(a, b)) value_error(kernel, what + " overflows a 64-bit index");
    return a * b;
}

int64_t checked_add(const char* kernel, int64_t a, int64_t b, const std::string& what) {
    if ((b > 0 && a > kMax - b) || (b < 0 && a < std::numeric_limits<int64_t>::min() - b)) {
        value_error(kernel, what + " overflows a 64-bit index");
    }
    return a + b;
}

std::string list_str(const std::vector<int64_t>& v) {
    std::ostringstream s;
    s << "[";
    for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
    s << "]";
    return s.str();
}

template <typename T>
T* ptr(Buf& b) { return static_cast<T*>(b.arr.mutable_data()); }
template <typename T>
const T* cptr(const Buf& b) { return static_cast<const T*>(b.arr.data()); }

// ---------------------------------------------------------------------------------------
// Scalar functions shared by ewise / scalar / unary.  maximum/minimum propagate NaN as
// numpy does.

template <typename T> inline T f_max(T a, T b) { return (a > b || a != a) ? a : b; }
template <typename T> inline T f_min(T a, T b) { return (a < b || a != a) ? a : b; }
template <typename T> inline T f_sigmoid(T x) {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    T e = std::exp(x);
    return e / (T(1) + e);
}

enum class BinOp { add, sub, rsub, mul, div, rdiv, maximum, minimum, pow, eq, ne, lt, le, gt, ge };

struct NamedBin { const char* name; BinOp op; };
const NamedBin kEwiseOps[] = {
    {"add", BinOp::add}, {"sub", BinOp::sub}, {"mul", BinOp::mul}, {"div", BinOp::div},
    {"maximum", BinOp::maximum}, {"minimum", BinOp::minimum}, {"pow", BinOp::pow},
    {"eq", BinOp::eq}, {"ne", BinOp::ne}, {"lt", BinOp::lt}, {"le", BinOp::le},
    {"gt", BinOp::gt}, {"ge", BinOp::ge}};
const NamedBin kScalarOps[] = {
    {"add", BinOp::add}, {"sub", BinOp::sub}, {"rsub", BinOp::rsub}, {"mul", BinOp::mul},
    {"div", BinOp::div}, {"rdiv", BinOp::rdiv}, {"maximum", BinOp::maximum},
    {"minimum", BinOp::minimum}, {"pow", BinOp::pow}, {"eq", BinOp::eq}, {"ne", BinOp::ne},
    {"lt", BinOp::lt}, {"le", BinOp::le}, {"gt", BinOp::gt}, {"ge", BinOp::ge}};

template <size_t N>
BinOp find_binop(const char* kernel, const std::string& op, const NamedBin (&table)[N]) {
    for (const auto& e : table) if (op == e.name) return e.op;
    std::string names;
    for (const auto& e : table) names += std::string(names.empty() ? "" : ", ") + e.name;
    value_error(kernel, "unknown op '" + op + "'; expected one of: " + names);
}

template <BinOp OP, typename T>
inline T apply(T a, T b) {
    if constexpr (OP == BinOp::add) return a + b;
    else if constexpr (OP == BinOp::sub) return a - b;
    else if constexpr (OP == BinOp::rsub) return b - a;
    else if constexpr (OP == BinOp::mul) return a * b;
    else if constexpr (OP == BinOp::div) return a / b;
    else if constexpr (OP == BinOp::rdiv) return b / a;
    else if constexpr (OP == BinOp::maximum) return f_max(a, b);
    else if constexpr (OP == BinOp::minimum) return f_min(a, b);
    else if constexpr (OP == BinOp::pow) return std::pow(a, b);
    else if constexpr (OP == BinOp::eq) return a == b ? T(1) : T(0);
    else if constexpr (OP == BinOp::ne) return a != b ? T(1) : T(0);
    else if constexpr (OP == BinOp::lt) return a < b ? T(1) : T(0);
    else if constexpr (OP == BinOp::le) return a <= b ? T(1) : T(0);
    else if constexpr (OP == BinOp::gt) return a > b ? T(1) : T(0);
    else return a >= b ? T(1) : T(0);
}

// Dispatch a runtime BinOp to a compile-time one, so every loop body is a plain
// expression the compiler can vectorise.
template <typename T, typename F>
void with_binop(BinOp op, F f) {
    switch (op) {
        case BinOp::add: f(std::integral_constant<BinOp, BinOp::add>{}); break;
        case BinOp::sub: f(std::integral_constant<BinOp, BinOp::sub>{}); break;
        case BinOp::rsub: f(std::integral_constant<BinOp, BinOp::rsub>{}); break;
        case BinOp::mul: f(std::integral_constant<BinOp, BinOp::mul>{}); break;
        case BinOp::div: f(std::integral_constant<BinOp, BinOp::div>{}); break;
        case BinOp::rdiv: f(std::integral_constant<BinOp, BinOp::rdiv>{}); break;
        case BinOp::maximum: f(std::integral_constant<BinOp, BinOp::maximum>{}); break;
        case BinOp::minimum: f(std::integral_constant<BinOp, BinOp::minimum>{}); break;
        case BinOp::pow: f(std::integral_constant<BinOp, BinOp::pow>{}); break;
        case BinOp::eq: f(std::integral_constant<BinOp, BinOp::eq>{}); break;
        case BinOp::ne: f(std::integral_constant<BinOp, BinOp::ne>{}); break;
        case BinOp::lt: f(std::integral_constant<BinOp, BinOp::lt>{}); break;
        case BinOp::le: f(std::integral_constant<BinOp, BinOp::le>{}); break;
        case BinOp::gt: f(std::integral_constant<BinOp, BinOp::gt>{}); break;
        case BinOp::ge: f(std::integral_constant<BinOp, BinOp::ge>{}); break;
    }
}

enum class UnOp { neg, exp, log, sqrt, sin, cos, tanh, abs, relu, sigmoid, sign, erf };
struct NamedUn { const char* name; UnOp op; };
const NamedUn kUnaryOps[] = {
    {"neg", UnOp::neg}, {"exp", UnOp::exp}, {"log", UnOp::log}, {"sqrt", UnOp::sqrt},
    {"sin", UnOp::sin}, {"cos", UnOp::cos}, {"tanh", UnOp::tanh}, {"abs", UnOp::abs},
    {"relu", UnOp::relu}, {"sigmoid", UnOp::sigmoid}, {"sign", UnOp::sign}, {"erf", UnOp::erf}};

template <UnOp OP, typename T>
inline T apply_un(T x) {
    if constexpr (OP == UnOp::neg) return -x;
    else if constexpr (OP == UnOp::exp) return std::exp(x);
    else if constexpr (OP == UnOp::log) return std::log(x);
    else if constexpr (OP == UnOp::sqrt) return std::sqrt(x);
    else if constexpr (OP == UnOp::sin) return std::sin(x);
    else if constexpr (OP == UnOp::cos) return std::cos(x);
    else if constexpr (OP == UnOp::tanh) return std::tanh(x);
    else if constexpr (OP == UnOp::abs) return std::abs(x);
    else if constexpr (OP == UnOp::relu) return f_max(x, T(0));
    else if constexpr (OP == UnOp::sigmoid) return f_sigmoid(x);
    else if constexpr (OP == UnOp::sign) return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);  // keeps 0 and NaN
    else return std::erf(x);
}

template <typename F>
void with_unop(UnOp op, F f) {
    switch (op) {
        case UnOp::neg: f(std::integral_constant<UnOp, UnOp::neg>{}); break;
        case UnOp::exp: f(std::integral_constant<UnOp, UnOp::exp>{}); break;
        case UnOp::log: f(std::integral_constant<UnOp, UnOp::log>{}); break;
        case UnOp::sqrt: f(std::integral_constant<UnOp, UnOp::sqrt>{}); break;
        case UnOp::sin: f(std::integral_constant<UnOp, UnOp::sin>{}); break;
        case UnOp::cos: f(std::integral_constant<UnOp, UnOp::cos>{}); break;
        case UnOp::tanh: f(std::integral_constant<UnOp, UnOp::tanh>{}); break;
        case UnOp::abs: f(std::integral_constant<UnOp, UnOp::abs>{}); break;
        case UnOp::relu: f(std::integral_constant<UnOp, UnOp::relu>{}); break;
        case UnOp::sigmoid: f(std::integral_constant<UnOp, UnOp::sigmoid>{}); break;
        case UnOp::sign: f(std::integral_constant<UnOp, UnOp::sign>{}); break;
        case UnOp::erf: f(std::integral_constant<UnOp, UnOp::erf>{}); break;
    }
}

// ---------------------------------------------------------------------------------------
// compact

// Copy out[begin:end] from the strided view.  shape/strides are already coalesced and
// have at least one dimension; every position reached was bounds-checked by the caller.
template <typename T>
void compact_range(const T* src, T* out, const std::vector<int64_t>& shape,
                   const std::vector<int64_t>& strides, int64_t offset, int64_t begin, int64_t end) {
    const int nd = static_cast<int>(shape.size());
    std::vector<int64_t> idx(nd, 0);
    int64_t rem = begin, pos = offset;
    for (int d = nd - 1; d >= 0; --d) {
        idx[d] = rem % shape[d];
        rem /= shape[d];
        pos += idx[d] * strides[d];
    }
    const int64_t inner = shape[nd - 1], s_in = strides[nd - 1];
    int64_t i = begin;
    while (i < end) {
        const int64_t run = std::min(inner - idx[nd - 1], end - i);
        const T* p = src + pos;
        T* o = out + i;
        if (s_in == 1) {
            std::memcpy(o, p, static_cast<size_t>(run) * sizeof(T));
        } else if (s_in == 0) {
            const T v = *p;
            for (int64_t j = 0; j < run; ++j) o[j] = v;
        } else {
            for (int64_t j = 0; j < run; ++j) o[j] = p[j * s_in];
        }
        i += run;
        idx[nd - 1] += run;
        if (i >= end) break;
        // The row is finished: step the outer dimensions like an odometer.
        pos += (run - inner) * s_in;  // back to the start of this row
        idx[nd - 1] = 0;
        for (int d = nd - 2; d >= 0; --d) {
            pos += strides[d];
            if (++idx[d] < shape[d]) break;
            pos -= shape[d] * strides[d];
            idx[d] = 0;
        }
        // (when run < inner the range ended mid-row and we already left the loop)
    }
}

void compact(const py::object& src_o, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
             int64_t offset, const py::object& out_o) {
    const char* K = "compact";
    Buf src = check_buffer(K, "src", src_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, src, "src", out, "out");
    if (shape.size() != strides.size()) {
        value_error(K, "shape " + list_str(shape) + " has " + std::to_string(shape.size()) + " dimensions but strides " +
                           list_str(strides) + " has " + std::to_string(strides.size()));
    }
    int64_t total = 1;
    for (int64_t s : shape) {
        if (s < 0) value_error(K, "negative dimension in shape " + list_str(shape));
        total = checked_mul(K, s, total, "the number of elements of shape " + list_str(shape));
    }
    if (out.size != total) {
        value_error(K, "'out' has " + std::to_string(out.size) + " elements but shape " + list_str(shape) + " has " +
                           std::to_string(total));
    }
    if (total == 0) return;
    // Lowest and highest element the view can reach.
    int64_t lo = offset, hi = offset;
    for (size_t d = 0; d < shape.size(); ++d) {
        int64_t span = checked_mul(K, shape[d] - 1, strides[d], "the span of strides " + list_str(strides));
        if (span < 0) lo = checked_add(K, lo, span, "the lowest offset");
        else hi = checked_add(K, hi, span, "the highest offset");
    }
    if (lo < 0 || hi >= src.size) {
        value_error(K, "the view (shape " + list_str(shape) + ", strides " + list_str(strides) + ", offset " +
                           std::to_string(offset) + ") reaches elements " + std::to_string(lo) + ".." +
                           std::to_string(hi) + " but 'src' has " + std::to_string(src.size) +
                           " elements (valid: 0.." + std::to_string(src.size - 1) + ")");
    }
    check_no_overlap(K, src, "src", out);

    // Coalesce: drop size-1 dimensions, merge dimensions that are contiguous in src.
    std::vector<int64_t> cs, cst;
    for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] == 1) continue;
        if (!cs.empty() && cst.back() == strides[d] * shape[d]) {
            cs.back() *= shape[d];
            cst.back() = strides[d];
        } else {
            cs.push_back(shape[d]);
            cst.push_back(strides[d]);
        }
    }
    if (cs.empty()) { cs.push_back(1); cst.push_back(0); }

    py::gil_scoped_release nogil;
    if (src.dtype == DType::f32) {
        const float* s = cptr<float>(src); float* o = ptr<float>(out);
        parallel_chunks(total, [&](int64_t b, int64_t e) { compact_range(s, o, cs, cst, offset, b, e); });
    } else {
        const double* s = cptr<double>(src); double* o = ptr<double>(out);
        parallel_chunks(total, [&](int64_t b, int64_t e) { compact_range(s, o, cs, cst, offset, b, e); });
    }
}

// ---------------------------------------------------------------------------------------
// elementwise

template <typename T>
void ewise_t(BinOp op, const T* a, const T* b, T* out, int64_t n) {
    with_binop<T>(op, [&](auto c) {
        constexpr BinOp OP = decltype(c)::value;
        parallel_for(n, [&](int64_t i) { out[i] = apply<OP, T>(a[i], b[i]); });
    });
}

void ewise(const std::string& op, const py::object& a_o, const py::object& b_o, const py::object& out_o) {
    const char* K = "ewise";
    BinOp bop = find_binop(K, op, kEwiseOps);
    Buf a = check_buffer(K, "a", a_o, false);
    Buf b = check_buffer(K, "b", b_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, a, "a", b, "b");
    check_same_dtype(K, a, "a", out, "out");
    check_same_size(K, a, "a", b, "b");
    check_same_size(K, a, "a", out, "out");
    py::gil_scoped_release nogil;
    if (a.dtype == DType::f32) ewise_t(bop, cptr<float>(a), cptr<float>(b), ptr<float>(out), a.size);
    else ewise_t(bop, cptr<double>(a), cptr<double>(b), ptr<double>(out), a.size);
}

template <typename T>
void scalar_t(BinOp op, const T* a, T s, T* out, int64_t n) {
    with_binop<T>(op, [&](auto c) {
        constexpr BinOp OP = decltype(c)::value;
        parallel_for(n, [&](int64_t i) { out[i] = apply<OP, T>(a[i], s); });
    });
}

void scalar(const std::string& op, const py::object& a_o, double s, const py::object& out_o) {
    const char* K = "scalar";
    BinOp bop = find_binop(K, op, kScalarOps);
    Buf a = check_buffer(K, "a", a_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, a, "a", out, "out");
    check_same_size(K, a, "a", out, "out");
    py::gil_scoped_release nogil;
    if (a.dtype == DType::f32) scalar_t(bop, cptr<float>(a), static_cast<float>(s), ptr<float>(out), a.size);
    else scalar_t(bop, cptr<double>(a), s, ptr<double>(out), a.size);
}

template <typename T>
void unary_t(UnOp op, const T* a, T* out, int64_t n) {
    with_unop(op, [&](auto c) {
        constexpr UnOp OP = decltype(c)::value;
        parallel_for(n, [&](int64_t i) { out[i] = apply_un<OP, T>(a[i]); });
    });
}

void unary(const std::string& op, const py::object& a_o, const py::object& out_o) {
    const char* K = "unary";
    const UnOp* found = nullptr;
    for (const auto& e : kUnaryOps) if (op == e.name) { found = &e.op; break; }
    if (!found) {
        std::string names;
        for (const auto& e : kUnaryOps) names += std::string(names.empty() ? "" : ", ") + e.name;
        value_error(K, "unknown op '" + op + "'; expected one of: " + names);
    }
    Buf a = check_buffer(K, "a", a_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, a, "a", out, "out");
    check_same_size(K, a, "a", out, "out");
    py::gil_scoped_release nogil;
    if (a.dtype == DType::f32) unary_t(*found, cptr<float>(a), ptr<float>(out), a.size);
    else unary_t(*found, cptr<double>(a), ptr<double>(out), a.size);
}

void fill(const py::object& out_o, double value) {
    const char* K = "fill";
    Buf out = check_buffer(K, "out", out_o, true);
    py::gil_scoped_release nogil;
    if (out.dtype == DType::f32) {
        float* o = ptr<float>(out); const float v = static_cast<float>(value);
        parallel_for(out.size, [&](int64_t i) { o[i] = v; });
    } else {
        double* o = ptr<double>(out);
        parallel_for(out.size, [&](int64_t i) { o[i] = value; });
    }
}

// ---------------------------------------------------------------------------------------
// reduce_last: out[r] = op(a[r*n : (r+1)*n])

// Sum with eight independent double accumulators: vectorises, and is far more accurate
// than one float32 accumulator.
template <typename T>
double sum_range(const T* p, int64_t n) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += static_cast<double>(p[i + j]);
    double s = 0;
    for (; i < n; ++i) s += static_cast<double>(p[i]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + s;
}

template <typename T>
T max_range(const T* p, int64_t n) {  // n >= 1; NaN wins, like numpy
    // Eight lanes of compare-and-select (maxps) plus a running sum of x - x, which stays 0
    // unless some x is NaN or infinite; only then is the range rescanned for a NaN.
    T m[8], chk[8];
    for (int j = 0; j < 8; ++j) { m[j] = p[0]; chk[j] = T(0); }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) {
            const T x = p[i + j];
            m[j] = x > m[j] ? x : m[j];
            chk[j] += x - x;
        }
    T r = p[0], c = T(0);
    for (int j = 0; j < 8; ++j) { r = m[j] > r ? m[j] : r; c += chk[j]; }
    for (; i < n; ++i) { r = p[i] > r ? p[i] : r; c += p[i] - p[i]; }
    if (c != c)
        for (int64_t q = 0; q < n; ++q)
            if (p[q] != p[q]) return p[q];
    return r;
}

template <typename T>
void reduce_t(bool is_sum, const T* a, int64_t n, T* out, int64_t rows) {
    const int64_t total = rows * n;
    (void)total;  // only the OpenMP paths use it
#ifndef MINI_NO_OPENMP
    if (go_parallel(total) && rows < 4 * static_cast<int64_t>(omp_get_max_threads())) {
        // Few long rows: split every row across the threads, then combine the partials.
        for (int64_t r = 0; r < rows; ++r) {
            const T* row = a + r * n;
            const int nt = omp_get_max_threads();
            std::vector<double> psum(nt, 0.0);
            std::vector<T> pmax(nt, row[0]);
            std::vector<char> used(nt, 0);
#pragma omp parallel num_threads(nt)
            {
                const int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
                const int64_t b = n * t / k, e = n * (t + 1) / k;
                if (b < e) {
                    used[t] = 1;
                    if (is_sum) psum[t] = sum_range(row + b, e - b);
                    else pmax[t] = max_range(row + b, e - b);
                }
            }
            if (is_sum) {
                double s = 0;
                for (double v : psum) s += v;
                out[r] = static_cast<T>(s);
            } else {
                T m = row[0];
                for (int t = 0; t < nt; ++t) if (used[t]) m = f_max(m, pmax[t]);
                out[r] = m;
            }
        }
        return;
    }
#endif
    auto one_row = [&](int64_t r) {
        out[r] = is_sum ? static_cast<T>(sum_range(a + r * n, n)) : max_range(a + r * n, n);
    };
#ifndef MINI_NO_OPENMP
    if (go_parallel(total)) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r) one_row(r);
        return;
    }
#endif
    for (int64_t r = 0; r < rows; ++r) one_row(r);
}

void reduce_last(const std::string& op, const py::object& a_o, int64_t n, const py::object& out_o) {
    const char* K = "reduce_last";
    bool is_sum;
    if (op == "sum") is_sum = true;
    else if (op == "max") is_sum = false;
    else value_error(K, "unknown op '" + op + "'; expected one of: sum, max");
    Buf a = check_buffer(K, "a", a_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, a, "a", out, "out");
    if (n < 0) value_error(K, "n must be >= 0, got " + std::to_string(n));
    if (mul_overflows(out.size, n) || out.size * n != a.size) {
        value_error(K, "'a' has " + std::to_string(a.size) + " elements but out.size * n = " +
                           std::to_string(out.size) + " * " + std::to_string(n) + (mul_overflows(out.size, n) ? "" : " = " + std::to_string(out.size * n)));
    }
    if (n == 0 && !is_sum && out.size > 0) {
        value_error(K, "max over empty rows (n = 0) has no identity");
    }
    check_no_overlap(K, a, "a", out);
    py::gil_scoped_release nogil;
    if (n == 0) {  // empty sums
        if (a.dtype == DType::f32) { float* o = ptr<float>(out); for (int64_t i = 0; i < out.size; ++i) o[i] = 0; }
        else { double* o = ptr<double>(out); for (int64_t i = 0; i < out.size; ++i) o[i] = 0; }
        return;
    }
    if (a.dtype == DType::f32) reduce_t(is_sum, cptr<float>(a), n, ptr<float>(out), out.size);
    else reduce_t(is_sum, cptr<double>(a), n, ptr<double>(out), out.size);
}

// ---------------------------------------------------------------------------------------
// matmul: C(m x n) = A(m x k) @ B(k x n), row-major.
//
// Blocked in the style of GotoBLAS / BLIS.  The output is cut into MC x NC tiles, one task
// each (OpenMP, dynamic schedule), so tasks share nothing.  A task walks k in KC slabs; for
// each slab it packs its A block (MC x KC, sized for L2) into MR-row micro-panels and its B
// block (KC x NC) into NR-column micro-panels, then sweeps the micro-kernel over them: one
// B micro-panel (KC x NR, sized for L1) is reused against every A micro-panel.  The
// micro-kernel keeps an MR x NR block of C in registers.  Packing pads ragged edges with
// zeros and the micro-kernel writes back only the valid part, so m, n and k need not be
// multiples of any tile size.
//
// On x86-64 with gcc or clang the tile code is compiled three times (AVX-512, AVX2+FMA,
// baseline SSE2) with a register tile that fits each, and the fastest one the CPU supports
// is picked at run time: the build stays portable (no -march=native) yet uses wide vectors.
//
// Operands are read through (row stride, column stride) pairs, so `matmul_strided` packs a
// transposed or otherwise strided view directly (no compact copy first).  Products with a
// small output and a long reduction (weight gradients) split the reduction across threads
// instead of the output (`skinny_t`), and outputs at most 16 floats / 8 doubles wide use
// the AVX2 tile rather than the twice-as-wide AVX-512 one.

#if defined(__GNUC__)
#define MINI_INLINE inline __attribute__((always_inline))
#else
#define MINI_INLINE inline
#endif

#if defined(__GNUC__) && defined(__x86_64__) && !defined(MINI_NO_ISA_DISPATCH)
#define MINI_X86_DISPATCH 1
#endif

// Block sizes.  A task's rows (MC) are a multiple of 12 and its columns (NC) a multiple of
// 32, so they nest with every micro-kernel's MR (6 or 12) and NR (4 to 32).  KC keeps one
// packed B micro-panel (KC x NR) within L1.
constexpr int64_t kMC = 96;
constexpr int64_t kMCStep = 12;
constexpr int64_t kNCStep = 32;
template <typename T> struct Blocks { static constexpr int64_t KC = 256, NC = 512; };
template <> struct Blocks<double> { static constexpr int64_t KC = 256, NC = 256; };

// Packing reads A(i, p) at A[i*rs + p*cs] and B(p, j) at B[p*rs + j*cs], so transposed
// (or otherwise strided) operands are packed straight from their views, never copied first.
template <typename T, int MR>
MINI_INLINE void pack_a(const T* A, int64_t rs, int64_t cs, int64_t mc, int64_t kc, T* Ap) {
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {
        const int64_t mr = std::min<int64_t>(MR, mc - i0);
        if (mr == MR && cs == 1) {
            for (int64_t p = 0; p < kc; ++p)
                for (int i = 0; i < MR; ++i) Ap[p * MR + i] = A[(i0 + i) * rs + p];
        } else if (mr == MR && rs == 1) {  // a transposed operand: columns are contiguous
            for (int64_t p = 0; p < kc; ++p) {
                const T* col = A + i0 + p * cs;
                for (int i = 0; i < MR; ++i) Ap[p * MR + i] = col[i];
            }
        } else {
            for (int64_t p = 0; p < kc; ++p) {
                for (int64_t i = 0; i < mr; ++i) Ap[p * MR + i] = A[(i0 + i) * rs + p * cs];
                for (int64_t i = mr; i < MR; ++i) Ap[p * MR + i] = T(0);
            }
        }
        Ap += kc * MR;
    }
}

template <typename T, int NR>
MINI_INLINE void pack_b(const T* B, int64_t rs, int64_t cs, int64_t kc, int64_t nc, T* Bp) {
    for (int64_t j0 = 0; j0 < nc; j0 += NR) {
        const int64_t nr = std::min<int64_t>(NR, nc - j0);
        if (cs == 1) {
            for (int64_t p = 0; p < kc; ++p) {
                const T* row = B + p * rs + j0;
                if (nr == NR) {
                    for (int j = 0; j < NR; ++j) Bp[p * NR + j] = row[j];
                } else {
                    for (int64_t j = 0; j < nr; ++j) Bp[p * NR + j] = row[j];
                    for (int64_t j = nr; j < NR; ++j) Bp[p * NR + j] = T(0);
                }
            }
        } else {  // strided columns (a transposed operand reads along p contiguously)
            for (int64_t j = 0; j < nr; ++j) {
                const T* col = B + (j0 + j) * cs;
                for (int64_t p = 0; p < kc; ++p) Bp[p * NR + j] = col[p * rs];
            }
            for (int64_t j = nr; j < NR; ++j)
                for (int64_t p = 0; p < kc; ++p) Bp[p * NR + j] = T(0);
        }
        Bp += kc * NR;
    }
}

// C[0:mr, 0:nr] (+)= Ap(MR x kc) * Bp(kc x NR), with the MR x NR block of C held in
// registers.  With gcc/clang the block is written with explicit vector types of VB bytes
// (GNU vector extensions: deterministic, unlike relying on the auto-vectoriser); other
// compilers get the plain loops.
template <typename T, int MR, int NR, int VB>
MINI_INLINE void micro_kernel(int64_t kc, const T* __restrict Ap, const T* __restrict Bp, T* __restrict C,
                              int64_t ldc, int64_t mr, int64_t nr, bool accumulate) {
#if defined(__GNUC__)
    typedef T V __attribute__((vector_size(VB)));
    constexpr int L = VB / static_cast<int>(sizeof(T));
    constexpr int NV = NR / L;
    static_assert(NR % L == 0, "NR must be a whole number of vectors");
    const V zero = {0};
    V acc[MR][NV];
    for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) acc[i][v] = zero;
    for (int64_t p = 0; p < kc; ++p) {
        V b[NV];
        for (int v = 0; v < NV; ++v) std::memcpy(&b[v], Bp + p * NR + v * L, sizeof(V));
        for (int i = 0; i < MR; ++i) {
            const V a = Ap[p * MR + i] - zero;  // broadcast (x - 0 == x, even for -0)
            for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v];
        }
    }
    if (mr == MR && nr == NR) {
        for (int i = 0; i < MR; ++i) {
            for (int v = 0; v < NV; ++v) {
                V c = acc[i][v];
                if (accumulate) {
                    V old;
                    std::memcpy(&old, C + i * ldc + v * L, sizeof(V));
                    c += old;
                }
                std::memcpy(C + i * ldc + v * L, &c, sizeof(V));
            }
        }
        return;
    }
    T tmp[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) std::memcpy(&tmp[i][v * L], &acc[i][v], sizeof(V));
#else
    T tmp[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) tmp[i][j] = T(0);
    for (int64_t p = 0; p < kc; ++p) {
        const T* a = Ap + p * MR;
        const T* b = Bp + p * NR;
        for (int i = 0; i < MR; ++i) {
            const T ai = a[i];
            for (int j = 0; j < NR; ++j) tmp[i][j] += ai * b[j];
        }
    }
#endif
    for (int64_t i = 0; i < mr; ++i)
        for (int64_t j = 0; j < nr; ++j) C[i * ldc + j] = accumulate ? C[i * ldc + j] + tmp[i][j] : tmp[i][j];
}

// One task: C[ic:ic+mc, jc:jc+nc] (+)= A[ic:ic+mc, :] @ B[:, jc:jc+nc], C with row stride ldc;
// `accumulate` adds to C instead of overwriting it.
template <typename T, int MR, int NR, int VB>
MINI_INLINE void gemm_tile(const T* A, const T* B, T* C, int64_t k, int64_t ldc, int64_t ic, int64_t mc, int64_t jc,
                           int64_t nc, T* Ap, T* Bp, int64_t ars, int64_t acs, int64_t brs, int64_t bcs,
                           bool accumulate) {
    static_assert(kMCStep % MR == 0 && kNCStep % NR == 0, "tiles must nest");
    constexpr int64_t KC = Blocks<T>::KC;
    for (int64_t pc = 0; pc < k; pc += KC) {
        const int64_t kc = std::min<int64_t>(KC, k - pc);
        pack_a<T, MR>(A + ic * ars + pc * acs, ars, acs, mc, kc, Ap);
        pack_b<T, NR>(B + pc * brs + jc * bcs, brs, bcs, kc, nc, Bp);
        for (int64_t jr = 0; jr < nc; jr += NR) {
            const int64_t nr = std::min<int64_t>(NR, nc - jr);
            for (int64_t ir = 0; ir < mc; ir += MR) {
                const int64_t mr = std::min<int64_t>(MR, mc - ir);
                micro_kernel<T, MR, NR, VB>(kc, Ap + (ir / MR) * kc * MR, Bp + (jr / NR) * kc * NR,
                                        C + (ic + ir) * ldc + jc + jr, ldc, mr, nr, accumulate || pc > 0);
            }
        }
    }
}

template <typename T>
using TileFn = void (*)(const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, T*, T*,
                        int64_t, int64_t, int64_t, int64_t, bool);

#define MINI_TILE_ARGS(T) const T *A, const T *B, T *C, int64_t k, int64_t ldc, int64_t ic, int64_t mc, int64_t jc, \
                          int64_t nc, T *Ap, T *Bp, int64_t ars, int64_t acs, int64_t brs, int64_t bcs, bool accumulate
#define MINI_TILE_PASS A, B, C, k, ldc, ic, mc, jc, nc, Ap, Bp, ars, acs, brs, bcs, accumulate

void tile_f32_base(MINI_TILE_ARGS(float)) { gemm_tile<float, 6, 8, 16>(MINI_TILE_PASS); }
void tile_f64_base(MINI_TILE_ARGS(double)) { gemm_tile<double, 6, 4, 16>(MINI_TILE_PASS); }
#ifdef MINI_X86_DISPATCH
__attribute__((target("avx2,fma"))) void tile_f32_avx2(MINI_TILE_ARGS(float)) {
    gemm_tile<float, 6, 16, 32>(MINI_TILE_PASS);
}
__attribute__((target("avx2,fma"))) void tile_f64_avx2(MINI_TILE_ARGS(double)) {
    gemm_tile<double, 6, 8, 32>(MINI_TILE_PASS);
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))) void tile_f32_avx512(MINI_TILE_ARGS(float)) {
    gemm_tile<float, 12, 32, 64>(MINI_TILE_PASS);
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))) void tile_f64_avx512(MINI_TILE_ARGS(double)) {
    gemm_tile<double, 12, 16, 64>(MINI_TILE_PASS);
}
#endif

// Largest MR / NR of any variant, to size the packing buffers.
constexpr int64_t kMaxNR = 32;

std::vector<std::string> supported_isas() {
    std::vector<std::string> isas{"base"};
#ifdef MINI_X86_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isas.push_back("avx2");
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        isas.push_back("avx512");
#endif
    return isas;
}

std::string g_matmul_isa;  // chosen once, at import (the GIL serialises set_matmul_isa)

void set_matmul_isa(const std::string& isa) {
    auto isas = supported_isas();
    std::string chosen = isa;
    if (isa.empty() || isa == "auto") chosen = isas.back();
    if (std::find(isas.begin(), isas.end(), chosen) == isas.end()) {
        std::string names;
        for (const auto& s : isas) names += (names.empty() ? "" : ", ") + s;
        value_error("matmul", "instruction set '" + isa + "' is not available on this CPU/build; available: auto, " + names);
    }
    g_matmul_isa = chosen;
}

template <typename T> TileFn<T> pick_tile_for(const std::string& isa);
template <> TileFn<float> pick_tile_for<float>(const std::string& isa) {
#ifdef MINI_X86_DISPATCH
    if (isa == "avx512") return tile_f32_avx512;
    if (isa == "avx2") return tile_f32_avx2;
#endif
    (void)isa;
    return tile_f32_base;
}
template <> TileFn<double> pick_tile_for<double>(const std::string& isa) {
#ifdef MINI_X86_DISPATCH
    if (isa == "avx512") return tile_f64_avx512;
    if (isa == "avx2") return tile_f64_avx2;
#endif
    (void)isa;
    return tile_f64_base;
}

template <typename T> TileFn<T> pick_tile() { return pick_tile_for<T>(g_matmul_isa); }

// m == 1: C(1 x n) = a(k) @ B(k x n), a sum of scaled rows of B (split over columns).
// n == 1: C(m) = A(m x k) @ b(k), one dot product per row (split over rows).
template <typename T>
void gemv(const T* A, const T* B, T* C, int64_t m, int64_t k, int64_t n) {
    if (m == 1) {
        parallel_chunks(n * std::max<int64_t>(k / 32, 1), [&](int64_t b, int64_t e) {
            const int64_t scale = std::max<int64_t>(k / 32, 1);
            const int64_t j0 = b / scale, j1 = e / scale;  // columns [j0, j1) are this chunk's
            if (j0 >= j1) return;
            T* c = C + j0;
            for (int64_t j = 0; j < j1 - j0; ++j) c[j] = T(0);
            for (int64_t p = 0; p < k; ++p) {
                const T ap = A[p];
                const T* row = B + p * n + j0;
                for (int64_t j = 0; j < j1 - j0; ++j) c[j] += ap * row[j];
            }
        });
        return;
    }
    // n == 1
    parallel_chunks(m * std::max<int64_t>(k / 32, 1), [&](int64_t b, int64_t e) {
        const int64_t scale = std::max<int64_t>(k / 32, 1);
        for (int64_t i = b / scale; i < e / scale; ++i) {
            const T* row = A + i * k;
            T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int64_t p = 0;
            for (; p + 8 <= k; p += 8)
                for (int l = 0; l < 8; ++l) acc[l] += row[p + l] * B[p + l];
            T s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (; p < k; ++p) s += row[p] * B[p];
            C[i] = s;
        }
    });
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Small output, long reduction (weight gradients: C(150 x 16) = A(150 x 37k) @ B(37k x 16)):
// tiling the output would leave one or two tasks and waste most of each micro-tile, so the
// reduction is split instead.  Each thread sums outer products A[:, p] B[p, :] over its
// range of p into a private block of C (in T, folded into double every 256 steps), and the
// partial sums are added in thread order (deterministic for a given thread count).
constexpr int64_t kSkinnyMaxOut = 16384;  // m * n at most (64 KiB of float32 accumulators)

inline bool skinny_shape(int64_t m, int64_t k, int64_t n) {
    return m * n <= kSkinnyMaxOut && k >= 256 && k >= 4 * std::max(m, n);
}

// One thread's share of the skinny product: part[q] += sum over p in [p0, p1) of the outer
// products, accumulated in T for 256 steps at a time (acc holds m*n elements).
template <typename T>
MINI_INLINE void skinny_range(const T* A, int64_t ars, int64_t acs, const T* B, int64_t brs, int64_t bcs, int64_t m,
                              int64_t n, int64_t p0, int64_t p1, bool ji, T* __restrict acc, double* __restrict part) {
    const int64_t mn = m * n;
    for (int64_t pb = p0; pb < p1; pb += 256) {
        const int64_t pe = std::min<int64_t>(pb + 256, p1);
        for (int64_t q = 0; q < mn; ++q) acc[q] = T(0);
        int64_t p = pb;
        // Four steps of p at a time: one load and store of each accumulator per four
        // multiply-adds.
        for (; p + 4 <= pe; p += 4) {
            const T* __restrict a0 = A + p * acs;
            const T* __restrict a1 = a0 + acs;
            const T* __restrict a2 = a1 + acs;
            const T* __restrict a3 = a2 + acs;
            const T* __restrict b0 = B + p * brs;
            const T* __restrict b1 = b0 + brs;
            const T* __restrict b2 = b1 + brs;
            const T* __restrict b3 = b2 + brs;
            if (ji) {
                for (int64_t j = 0; j < n; ++j) {
                    const T x0 = b0[j * bcs], x1 = b1[j * bcs], x2 = b2[j * bcs], x3 = b3[j * bcs];
                    T* __restrict c = acc + j * m;
                    for (int64_t i = 0; i < m; ++i) c[i] += (x0 * a0[i] + x1 * a1[i]) + (x2 * a2[i] + x3 * a3[i]);
                }
            } else {
                for (int64_t i = 0; i < m; ++i) {
                    const T x0 = a0[i * ars], x1 = a1[i * ars], x2 = a2[i * ars], x3 = a3[i * ars];
                    T* __restrict c = acc + i * n;
                    if (bcs == 1) {
                        for (int64_t j = 0; j < n; ++j) c[j] += (x0 * b0[j] + x1 * b1[j]) + (x2 * b2[j] + x3 * b3[j]);
                    } else {
                        for (int64_t j = 0; j < n; ++j)
                            c[j] += (x0 * b0[j * bcs] + x1 * b1[j * bcs]) + (x2 * b2[j * bcs] + x3 * b3[j * bcs]);
                    }
                }
            }
        }
        for (; p < pe; ++p) {
            const T* __restrict ap = A + p * acs;
            const T* __restrict bp = B + p * brs;
            if (ji) {
                for (int64_t j = 0; j < n; ++j) {
                    const T b = bp[j * bcs];
                    T* __restrict c = acc + j * m;
                    for (int64_t i = 0; i < m; ++i) c[i] += b * ap[i];
                }
            } else if (bcs == 1) {
                for (int64_t i = 0; i < m; ++i) {
                    const T a = ap[i * ars];
                    T* __restrict c = acc + i * n;
                    for (int64_t j = 0; j < n; ++j) c[j] += a * bp[j];
                }
            } else {
                for (int64_t i = 0; i < m; ++i) {
                    const T a = ap[i * ars];
                    T* __restrict c = acc + i * n;
                    for (int64_t j = 0; j < n; ++j) c[j] += a * bp[j * bcs];
                }
            }
        }
        for (int64_t q = 0; q < mn; ++q) part[q] += static_cast<double>(acc[q]);
    }
}

template <typename T>
using SkinnyFn = void (*)(const T*, int64_t, int64_t, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                          bool, T*, double*);
#define MINI_SKINNY_ARGS(T) const T *A, int64_t ars, int64_t acs, const T *B, int64_t brs, int64_t bcs, int64_t m, \
                            int64_t n, int64_t p0, int64_t p1, bool ji, T *acc, double *part
#define MINI_SKINNY_PASS A, ars, acs, B, brs, bcs, m, n, p0, p1, ji, acc, part
void skinny_f32_base(MINI_SKINNY_ARGS(float)) { skinny_range<float>(MINI_SKINNY_PASS); }
void skinny_f64_base(MINI_SKINNY_ARGS(double)) { skinny_range<double>(MINI_SKINNY_PASS); }
#ifdef MINI_X86_DISPATCH
__attribute__((target("avx2,fma"))) void skinny_f32_avx2(MINI_SKINNY_ARGS(float)) {
    skinny_range<float>(MINI_SKINNY_PASS);
}
__attribute__((target("avx2,fma"))) void skinny_f64_avx2(MINI_SKINNY_ARGS(double)) {
    skinny_range<double>(MINI_SKINNY_PASS);
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))) void skinny_f32_avx512(MINI_SKINNY_ARGS(float)) {
    skinny_range<float>(MINI_SKINNY_PASS);
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma"))) void skinny_f64_avx512(MINI_SKINNY_ARGS(double)) {
    skinny_range<double>(MINI_SKINNY_PASS);
}
#endif

template <typename T> SkinnyFn<T> pick_skinny();
template <> SkinnyFn<float> pick_skinny<float>() {
#ifdef MINI_X86_DISPATCH
    if (g_matmul_isa == "avx512") return skinny_f32_avx512;
    if (g_matmul_isa == "avx2") return skinny_f32_avx2;
#endif
    return skinny_f32_base;
}
template <> SkinnyFn<double> pick_skinny<double>() {
#ifdef MINI_X86_DISPATCH
    if (g_matmul_isa == "avx512") return skinny_f64_avx512;
    if (g_matmul_isa == "avx2") return skinny_f64_avx2;
#endif
    return skinny_f64_base;
}

template <typename T>
void skinny_t(const T* A, int64_t ars, int64_t acs, const T* B, int64_t brs, int64_t bcs, T* C, int64_t m,
              int64_t k, int64_t n) {
    const int64_t mn = m * n;
    // Accumulator layout: [m][n] with the inner loop over j, or [n][m] with the inner loop
    // over i when A's column is the contiguous (and longer) run.
    const bool ji = ars == 1 && (bcs != 1 || m > n);
    const SkinnyFn<T> fn = pick_skinny<T>();
    int nt = 1;
#ifndef MINI_NO_OPENMP
    if (go_parallel(mn * std::min<int64_t>(k, int64_t(1) << 20) / 32))
        nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_threads(), k / 128)));
#endif
    std::vector<double> parts(static_cast<size_t>(nt * mn), 0.0);
    auto body = [&](int64_t t) {
        std::vector<T> acc(static_cast<size_t>(mn));
        fn(A, ars, acs, B, brs, bcs, m, n, k * t / nt, k * (t + 1) / nt, ji, acc.data(), parts.data() + t * mn);
    };
#ifndef MINI_NO_OPENMP
    if (nt > 1) {
#pragma omp parallel for num_threads(nt) schedule(static, 1)
        for (int64_t t = 0; t < nt; ++t) body(t);
    } else {
        body(0);
    }
#else
    body(0);
#endif
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const int64_t q = ji ? j * m + i : i * n + j;
            double s = 0;
            for (int t = 0; t < nt; ++t) s += parts[static_cast<size_t>(t * mn + q)];
            C[i * n + j] = static_cast<T>(s);
        }
}

// Per-thread scratch buffers, kept between calls: matmul and conv allocate nothing per call
// (fresh buffers of a few hundred KiB cost page faults on every call, more than a small
// product's arithmetic).  `slot` names the buffer; every element is written before it is
// read.  A thread uses one kernel's buffers at a time (kernels do not nest).
enum ScratchSlot { kCols, kDcols, kGathered, kGwAcc, kPackA, kPackB, kScratchSlots };

template <typename T>
T* scratch(ScratchSlot slot, size_t n) {
    thread_local std::vector<T> buffers[kScratchSlots];
    std::vector<T>& b = buffers[slot];
    if (b.size() < n) {
        b.clear();
        b.shrink_to_fit();
        b.resize(n);
    }
    return b.data();
}

// C(m x n, row-major, compact) = A @ B with A(i, p) at A[i*ars + p*acs] and B(p, j) at
// B[p*brs + j*bcs]: any strides, so transposed views are multiplied without a copy.
template <typename T>
void matmul_t(const T* A, const T* B, T* C, int64_t m, int64_t k, int64_t n, TileFn<T> tile, int64_t ars,
              int64_t acs, int64_t brs, int64_t bcs) {
    constexpr int64_t KC = Blocks<T>::KC;
    if (m == 0 || n == 0) return;
    if (k == 0) {
        parallel_for(m * n, [&](int64_t i) { C[i] = T(0); });
        return;
    }
    // matrix-vector products of compact operands: packing would waste most of the tile
    if ((m == 1 || n == 1) && acs == 1 && ars == k && bcs == 1 && brs == n) {
        gemv(A, B, C, m, k, n);
        return;
    }
    if (skinny_shape(m, k, n)) {
        skinny_t(A, ars, acs, B, brs, bcs, C, m, k, n);
        return;
    }
#ifdef MINI_X86_DISPATCH
    // Narrow outputs: the AVX2 tile (NR = 16 floats / 8 doubles) wastes less of each
    // micro-tile than the AVX-512 one (NR = 32 / 16).
    if (g_matmul_isa == "avx512" && n <= 64 / static_cast<int64_t>(sizeof(T))) tile = pick_tile_for<T>("avx2");
#endif
    // Task blocks: as large as the caches allow, shrunk (down to 12 x 32) while there are
    // fewer than two tasks per thread, so small and skinny products still use every core.
    int64_t mc = std::min(kMC, round_up(m, kMCStep));
    int64_t nc = std::min(Blocks<T>::NC, round_up(n, kNCStep));
    bool par = false;
#ifndef MINI_NO_OPENMP
    // Work counted in multiply-adds / 32, so the element threshold means ~1M multiply-adds.
    par = go_parallel(m * n * std::min<int64_t>(k, int64_t(1) << 20) / 32);
    if (par) {
        const int64_t want = 2 * static_cast<int64_t>(omp_get_max_threads());
        while (ceil_div(m, mc) * ceil_div(n, nc) < want) {
            if (nc >= 4 * kNCStep) nc = round_up(nc / 2, kNCStep);
            else if (mc >= 2 * kMCStep) mc = round_up(mc / 2, kMCStep);
            else if (nc >= 2 * kNCStep) nc = round_up(nc / 2, kNCStep);
            else break;
        }
    }
#endif
    const int64_t row_tiles = ceil_div(m, mc), col_tiles = ceil_div(n, nc);
    const int64_t tasks = row_tiles * col_tiles;
    const size_t a_len = static_cast<size_t>(mc * KC);
    const size_t b_len = static_cast<size_t>((nc + kMaxNR) * KC);
    auto run = [&](int64_t t, T* Ap, T* Bp) {
        const int64_t ic = (t / col_tiles) * mc, jc = (t % col_tiles) * nc;
        tile(A, B, C, k, n, ic, std::min(mc, m - ic), jc, std::min(nc, n - jc), Ap, Bp, ars, acs, brs, bcs, false);
    };
#ifndef MINI_NO_OPENMP
    if (par && tasks > 1) {
#pragma omp parallel
        {
            T* Ap = scratch<T>(kPackA, a_len);
            T* Bp = scratch<T>(kPackB, b_len);
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < tasks; ++t) run(t, Ap, Bp);
        }
        return;
    }
#endif
    (void)par;
    T* Ap = scratch<T>(kPackA, a_len);
    T* Bp = scratch<T>(kPackB, b_len);
    for (int64_t t = 0; t < tasks; ++t) run(t, Ap, Bp);
}

void matmul(const py::object& a_o, const py::object& b_o, const py::object& out_o, int64_t m, int64_t k, int64_t n) {
    const char* K = "matmul";
    Buf a = check_buffer(K, "a", a_o, false);
    Buf b = check_buffer(K, "b", b_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, a, "a", b, "b");
    check_same_dtype(K, a, "a", out, "out");
    if (m < 0 || k < 0 || n < 0) {
        value_error(K, "m, k, n must be >= 0, got m=" + std::to_string(m) + ", k=" + std::to_string(k) +
                           ", n=" + std::to_string(n));
    }
    auto expect = [&](const Buf& x, const char* name, int64_t r, int64_t c, const char* rn, const char* cn) {
        if (mul_overflows(r, c) || r * c != x.size) {
            value_error(K, std::string("'") + name + "' has " + std::to_string(x.size) + " elements but " + rn + " x " +
                               cn + " = " + std::to_string(r) + " x " + std::to_string(c) +
                               (mul_overflows(r, c) ? "" : " = " + std::to_string(r * c)));
        }
    };
    expect(a, "a", m, k, "m", "k");
    expect(b, "b", k, n, "k", "n");
    expect(out, "out", m, n, "m", "n");
    check_no_overlap(K, a, "a", out);
    check_no_overlap(K, b, "b", out);
    if (a.dtype == DType::f32) {
        TileFn<float> tile = pick_tile<float>();
        py::gil_scoped_release nogil;
        matmul_t(cptr<float>(a), cptr<float>(b), ptr<float>(out), m, k, n, tile, k, 1, n, 1);
    } else {
        TileFn<double> tile = pick_tile<double>();
        py::gil_scoped_release nogil;
        matmul_t(cptr<double>(a), cptr<double>(b), ptr<double>(out), m, k, n, tile, k, 1, n, 1);
    }
}

// The lowest and highest element a 2-D view (r x c, strides rs / cs, offset) reaches; the
// view must lie inside a buffer of `size` elements.
void check_view_2d(const char* kernel, const char* name, int64_t size, int64_t offset, int64_t r, int64_t c,
                   int64_t rs, int64_t cs) {
    if (offset < 0) value_error(kernel, std::string("'") + name + "' offset must be >= 0, got " + std::to_string(offset));
    if (r == 0 || c == 0) return;
    int64_t lo = offset, hi = offset;
    const std::string strides = "strides [" + std::to_string(rs) + ", " + std::to_string(cs) + "]";
    for (auto [d, st] : {std::pair<int64_t, int64_t>{r, rs}, std::pair<int64_t, int64_t>{c, cs}}) {
        int64_t span = checked_mul(kernel, d - 1, st, std::string("the span of '") + name + "' " + strides);
        if (span < 0) lo = checked_add(kernel, lo, span, "the lowest offset");
        else hi = checked_add(kernel, hi, span, "the highest offset");
    }
    if (lo < 0 || hi >= size) {
        value_error(kernel, std::string("'") + name + "' as a " + std::to_string(r) + " x " + std::to_string(c) +
                                " view (" + strides + ", offset " + std::to_string(offset) + ") reaches elements " +
                                std::to_string(lo) + ".." + std::to_string(hi) + " but the buffer has " +
                                std::to_string(size) + " elements");
    }
}

void matmul_strided(const py::object& a_o, int64_t a_off, int64_t ars, int64_t acs, const py::object& b_o,
                    int64_t b_off, int64_t brs, int64_t bcs, const py::object& out_o, int64_t m, int64_t k,
                    int64_t n) {
    const char* K = "matmul_strided";
    Buf a = check_buffer(K, "a", a_o, false);
    Buf b = check_buffer(K, "b", b_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, a, "a", b, "b");
    check_same_dtype(K, a, "a", out, "out");
    if (m < 0 || k < 0 || n < 0) {
        value_error(K, "m, k, n must be >= 0, got m=" + std::to_string(m) + ", k=" + std::to_string(k) +
                           ", n=" + std::to_string(n));
    }
    if (mul_overflows(m, n) || m * n != out.size) {
        value_error(K, "'out' has " + std::to_string(out.size) + " elements but m x n = " + std::to_string(m) +
                           " x " + std::to_string(n));
    }
    if (m && n && k) {  // only a product that reads them needs the views inside their buffers
        check_view_2d(K, "a", a.size, a_off, m, k, ars, acs);
        check_view_2d(K, "b", b.size, b_off, k, n, brs, bcs);
    }
    check_no_overlap(K, a, "a", out);
    check_no_overlap(K, b, "b", out);
    if (a.dtype == DType::f32) {
        TileFn<float> tile = pick_tile<float>();
        const float* A = m && k ? cptr<float>(a) + a_off : nullptr;
        const float* B = k && n ? cptr<float>(b) + b_off : nullptr;
        py::gil_scoped_release nogil;
        matmul_t(A, B, ptr<float>(out), m, k, n, tile, ars, acs, brs, bcs);
    } else {
        TileFn<double> tile = pick_tile<double>();
        const double* A = m && k ? cptr<double>(a) + a_off : nullptr;
        const double* B = k && n ? cptr<double>(b) + b_off : nullptr;
        py::gil_scoped_release nogil;
        matmul_t(A, B, ptr<double>(out), m, k, n, tile, ars, acs, brs, bcs);
    }
}

// ---------------------------------------------------------------------------------------
// im2col / col2im (NCHW; padding on both sides; rows (b, i, j), columns (c, p, q)), the
// fast kernels behind the conv ops on the cpu device (the chapter 04 exercises are the
// numpy versions of the same maps).

struct ConvGeom {
    int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, ho, wo;
};

ConvGeom check_geom(const char* K, const std::vector<int64_t>& x_shape, const std::vector<int64_t>& kernel,
                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding) {
    if (x_shape.size() != 4) value_error(K, "x_shape must be (N, C, H, W), got " + list_str(x_shape));
    if (kernel.size() != 2 || stride.size() != 2 || padding.size() != 2)
        value_error(K, "kernel_size, stride and padding must be pairs, got " + list_str(kernel) + ", " +
                           list_str(stride) + ", " + list_str(padding));
    for (int64_t d : x_shape)
        if (d < 0) value_error(K, "negative dimension in x_shape " + list_str(x_shape));
    if (kernel[0] < 1 || kernel[1] < 1 || stride[0] < 1 || stride[1] < 1 || padding[0] < 0 || padding[1] < 0)
        value_error(K, "invalid kernel_size " + list_str(kernel) + ", stride " + list_str(stride) + " or padding " +
                           list_str(padding));
    ConvGeom g{x_shape[0], x_shape[1], x_shape[2], x_shape[3], kernel[0], kernel[1], stride[0], stride[1],
               padding[0], padding[1], 0, 0};
    const int64_t hp = checked_add(K, g.h, checked_mul(K, 2, g.ph, "the padding"), "the padded height");
    const int64_t wp = checked_add(K, g.w, checked_mul(K, 2, g.pw, "the padding"), "the padded width");
    if (hp < g.kh || wp < g.kw)
        value_error(K, "kernel " + list_str(kernel) + " is larger than the padded input (" + std::to_string(hp) +
                           ", " + std::to_string(wp) + ")");
    g.ho = (hp - g.kh) / g.sh + 1;
    g.wo = (wp - g.kw) / g.sw + 1;
    return g;
}

int64_t cols_size(const char* K, const ConvGeom& g) {
    int64_t r = checked_mul(K, g.n, g.ho, "N*Ho*Wo");
    r = checked_mul(K, r, g.wo, "N*Ho*Wo");
    int64_t c = checked_mul(K, g.c, g.kh, "C*kh*kw");
    c = checked_mul(K, c, g.kw, "C*kh*kw");
    return checked_mul(K, r, c, "the size of the column matrix");
}

int64_t image_size(const char* K, const ConvGeom& g) {
    int64_t s = checked_mul(K, g.n, g.c, "N*C*H*W");
    s = checked_mul(K, s, g.h, "N*C*H*W");
    return checked_mul(K, s, g.w, "N*C*H*W");
}

// Output columns j with 0 <= j*sw + off < w (off = q - pw) form the range [lo, hi).
inline void valid_cols(int64_t off, int64_t sw, int64_t w, int64_t wo, int64_t& lo, int64_t& hi) {
    lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
    hi = w - 1 - off < 0 ? 0 : std::min<int64_t>(wo, (w - 1 - off) / sw + 1);
    lo = std::min(lo, wo);
    if (hi < lo) hi = lo;
}

template <typename T>
void im2col_t(const T* x, T* out, const ConvGeom& g) {
    const int64_t ckk = g.c * g.kh * g.kw;
    const int64_t scale = g.wo * ckk >= 64 ? 64 : 1;
    parallel_chunks(g.n * g.ho * scale, [&](int64_t b0, int64_t e0) {
        for (int64_t r = b0 / scale; r < e0 / scale; ++r) {  // r = (b, i): one output row of pixels
            const int64_t b = r / g.ho, i = r % g.ho;
            const int64_t y0 = i * g.sh - g.ph;
            T* o = out + r * g.wo * ckk;  // written in order, one row of cols after another
            for (int64_t j = 0; j < g.wo; ++j) {
                const int64_t x0 = j * g.sw - g.pw;
                const int64_t qlo = std::min<int64_t>(g.kw, std::max<int64_t>(0, -x0));
                const int64_t qhi = std::max<int64_t>(qlo, std::min<int64_t>(g.kw, g.w - x0));
                for (int64_t c = 0; c < g.c; ++c) {
                    const T* plane = x + (b * g.c + c) * g.h * g.w;
                    for (int64_t p = 0; p < g.kh; ++p, o += g.kw) {
                        const int64_t y = y0 + p;
                        if (y < 0 || y >= g.h) {
                            for (int64_t q = 0; q < g.kw; ++q) o[q] = T(0);
                            continue;
                        }
                        const T* row = plane + y * g.w;  // pixels x0 + q, q in [qlo, qhi)
                        for (int64_t q = 0; q < qlo; ++q) o[q] = T(0);
                        for (int64_t q = qlo; q < qhi; ++q) o[q] = row[x0 + q];
                        for (int64_t q = qhi; q < g.kw; ++q) o[q] = T(0);
                    }
                }
            }
        }
    });
}

template <typename T>
void col2im_t(const T* cols, T* out, const ConvGeom& g) {
    const int64_t ckk = g.c * g.kh * g.kw, kk = g.kh * g.kw;
    const int64_t planes = g.n * g.c, plane = g.h * g.w;
    if (g.n >= 4) {
        // Batch items are independent: each task reads its rows of cols in order (one
        // sequential pass over the matrix) and adds them into its own [C, H, W] image.
        const int64_t image = g.c * plane;
        const int64_t scale = image * kk >= 64 ? 64 : 1;
        parallel_chunks(g.n * scale, [&](int64_t b0, int64_t e0) {
            for (int64_t b = b0 / scale; b < e0 / scale; ++b) {
                T* o = out + b * image;
                for (int64_t t = 0; t < image; ++t) o[t] = T(0);
                for (int64_t i = 0; i < g.ho; ++i) {
                    const int64_t y0 = i * g.sh - g.ph;
                    const int64_t plo = std::max<int64_t>(0, -y0), phi = std::min<int64_t>(g.kh, g.h - y0);
                    for (int64_t j = 0; j < g.wo; ++j) {
                        const T* src = cols + ((b * g.ho + i) * g.wo + j) * ckk;
                        const int64_t x0 = j * g.sw - g.pw;
                        const int64_t qlo = std::max<int64_t>(0, -x0), qhi = std::min<int64_t>(g.kw, g.w - x0);
                        for (int64_t c = 0; c < g.c; ++c) {
                            for (int64_t p = plo; p < phi; ++p) {
                                T* orow = o + (c * g.h + y0 + p) * g.w;  // pixels x0 + q
                                const T* s = src + c * kk + p * g.kw;
                                for (int64_t q = qlo; q < qhi; ++q) orow[x0 + q] += s[q];
                            }
                        }
                    }
                }
            }
        });
        return;
    }
    // Few batch items: one task per (b, c) plane, gathering its entries from every row.
    const int64_t scale = plane >= 64 ? 64 : 1;
    parallel_chunks(planes * scale, [&](int64_t b0, int64_t e0) {
        for (int64_t pl = b0 / scale; pl < e0 / scale; ++pl) {  // pl = (b, c): one output plane
            const int64_t b = pl / g.c, c = pl % g.c;
            T* o = out + pl * plane;
            for (int64_t t = 0; t < plane; ++t) o[t] = T(0);
            for (int64_t i = 0; i < g.ho; ++i) {
                const T* src_i = cols + (b * g.ho + i) * g.wo * ckk + c * kk;
                for (int64_t p = 0; p < g.kh; ++p) {
                    const int64_t y = i * g.sh + p - g.ph;
                    if (y < 0 || y >= g.h) continue;
                    for (int64_t q = 0; q < g.kw; ++q) {
                        const int64_t off = q - g.pw;
                        int64_t lo, hi;
                        valid_cols(off, g.sw, g.w, g.wo, lo, hi);
                        T* row = o + y * g.w;  // pixels j * sw + off, j in [lo, hi)
                        const T* src = src_i + p * g.kw + q;
                        for (int64_t j = lo; j < hi; ++j) row[j * g.sw + off] += src[j * ckk];
                    }
                }
            }
        }
    });
}

void im2col(const py::object& x_o, const std::vector<int64_t>& x_shape, const std::vector<int64_t>& kernel,
            const std::vector<int64_t>& stride, const std::vector<int64_t>& padding, const py::object& out_o) {
    const char* K = "im2col";
    Buf x = check_buffer(K, "x", x_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, x, "x", out, "out");
    ConvGeom g = check_geom(K, x_shape, kernel, stride, padding);
    const int64_t xs = image_size(K, g), cs = cols_size(K, g);
    if (x.size != xs)
        value_error(K, "'x' has " + std::to_string(x.size) + " elements but x_shape " + list_str(x_shape) + " has " +
                           std::to_string(xs));
    if (out.size != cs)
        value_error(K, "'out' has " + std::to_string(out.size) + " elements but the column matrix (N*Ho*Wo x C*kh*kw) "
                       "has " + std::to_string(cs));
    check_no_overlap(K, x, "x", out);
    if (cs == 0) return;
    py::gil_scoped_release nogil;
    if (x.dtype == DType::f32) im2col_t(cptr<float>(x), ptr<float>(out), g);
    else im2col_t(cptr<double>(x), ptr<double>(out), g);
}

void col2im(const py::object& cols_o, const std::vector<int64_t>& x_shape, const std::vector<int64_t>& kernel,
            const std::vector<int64_t>& stride, const std::vector<int64_t>& padding, const py::object& out_o) {
    const char* K = "col2im";
    Buf cols = check_buffer(K, "cols", cols_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, cols, "cols", out, "out");
    ConvGeom g = check_geom(K, x_shape, kernel, stride, padding);
    const int64_t xs = image_size(K, g), cs = cols_size(K, g);
    if (cols.size != cs)
        value_error(K, "'cols' has " + std::to_string(cols.size) + " elements but the column matrix "
                       "(N*Ho*Wo x C*kh*kw) for x_shape " + list_str(x_shape) + " has " + std::to_string(cs));
    if (out.size != xs)
        value_error(K, "'out' has " + std::to_string(out.size) + " elements but x_shape " + list_str(x_shape) +
                           " has " + std::to_string(xs));
    check_no_overlap(K, cols, "cols", out);
    if (xs == 0) return;
    py::gil_scoped_release nogil;
    if (cols.dtype == DType::f32) col2im_t(cptr<float>(cols), ptr<float>(out), g);
    else col2im_t(cptr<double>(cols), ptr<double>(out), g);
}

// ---------------------------------------------------------------------------------------
// conv2d forward and backward without the big column matrix.
//
// The im2col route materialises cols [N*Ho*Wo, C*kh*kw] (22 MB for LeNet's second conv at
// batch 64) and streams it through memory three times (forward product, weight gradient,
// col2im), so the conv runs at memory speed.  These kernels build the columns of one block
// at a time (a few output rows of one image, or several small images side by side; see
// conv_blocks) into a per-thread buffer sized for L2, multiply them there, and move on:
// memory traffic is the input, weight and output only.
//
// The per-image columns use the transposed ("Caffe") layout, cols_img[(c, p, q)][(i, j)],
// so every product reads and writes NCHW directly:
//   forward      out_img[Cout, rows]   = W[Cout, CKK] @ cols_img[CKK, rows]      (+ bias)
//   weight grad  dW^T[CKK, Cout]      += cols_img[CKK, rows] @ g_img[Cout, rows]^T
//   input grad   dcols[CKK, rows]      = W^T[CKK, Cout] @ g_img[Cout, rows]; col2im-add
// Threads take whole images in a static split (each image's input gradient belongs to one
// thread; weight-gradient partial sums are added in thread order: deterministic for a
// given thread count).

// cols[(c*kh + p)*kw + q][(i - i0)*wo + j] = x_pad[c, i*sh + p, j*sw + q] for i in [i0, i1);
// the rows of cols are `ld` elements apart (several images' blocks sit side by side).
template <typename T>
void image_columns(const T* x, T* cols, int64_t ld, const ConvGeom& g, int64_t i0, int64_t i1) {
    for (int64_t c = 0; c < g.c; ++c) {
        const T* plane = x + c * g.h * g.w;
        for (int64_t p = 0; p < g.kh; ++p) {
            for (int64_t q = 0; q < g.kw; ++q) {
                T* o = cols + ((c * g.kh + p) * g.kw + q) * ld;
                int64_t lo, hi;  // output columns j that read inside the image
                valid_cols(q - g.pw, g.sw, g.w, g.wo, lo, hi);
                for (int64_t i = i0; i < i1; ++i, o += g.wo) {
                    const int64_t y = i * g.sh + p - g.ph;
                    if (y < 0 || y >= g.h) {
                        for (int64_t j = 0; j < g.wo; ++j) o[j] = T(0);
                        continue;
                    }
                    const T* row = plane + y * g.w + q - g.pw;  // pixel of output column j: row[j*sw]
                    for (int64_t j = 0; j < lo; ++j) o[j] = T(0);
                    if (g.sw == 1) std::memcpy(o + lo, row + lo, static_cast<size_t>(hi - lo) * sizeof(T));
                    else for (int64_t j = lo; j < hi; ++j) o[j] = row[j * g.sw];
                    for (int64_t j = hi; j < g.wo; ++j) o[j] = T(0);
                }
            }
        }
    }
}

// The adjoint of image_columns: x[c, y, x] += every entry of cols read from that pixel.
template <typename T>
void image_columns_add(const T* cols, int64_t ld, T* x, const ConvGeom& g, int64_t i0, int64_t i1) {
    for (int64_t c = 0; c < g.c; ++c) {
        T* plane = x + c * g.h * g.w;
        for (int64_t p = 0; p < g.kh; ++p) {
            for (int64_t q = 0; q < g.kw; ++q) {
                const T* s = cols + ((c * g.kh + p) * g.kw + q) * ld;
                int64_t lo, hi;
                valid_cols(q - g.pw, g.sw, g.w, g.wo, lo, hi);
                for (int64_t i = i0; i < i1; ++i, s += g.wo) {
                    const int64_t y = i * g.sh + p - g.ph;
                    if (y < 0 || y >= g.h) continue;
                    T* row = plane + y * g.w + q - g.pw;
                    if (g.sw == 1) {
                        for (int64_t j = lo; j < hi; ++j) row[j] += s[j];
                    } else {
                        for (int64_t j = lo; j < hi; ++j) row[j * g.sw] += s[j];
                    }
                }
            }
        }
    }
}

// C(m x n, row stride ldc) (+)= A @ B on the calling thread, with A(i, p) = A[i*ars + p*acs]
// and B(p, j) = B[p*brs + j*bcs]; Ap / Bp are packing buffers of gemm_buffer_sizes().
template <typename T>
void gemm_serial(TileFn<T> tile, const T* A, int64_t ars, int64_t acs, const T* B, int64_t brs, int64_t bcs, T* C,
                 int64_t ldc, int64_t m, int64_t k, int64_t n, T* Ap, T* Bp, bool accumulate) {
    for (int64_t ic = 0; ic < m; ic += kMC)
        for (int64_t jc = 0; jc < n; jc += Blocks<T>::NC)
            tile(A, B, C, k, ldc, ic, std::min(kMC, m - ic), jc, std::min(Blocks<T>::NC, n - jc), Ap, Bp, ars, acs,
                 brs, bcs, accumulate);
}

// Packing buffers for gemm_serial products of at most m x k x n (sized to the product, so
// small convs don't pay for the full blocks).
template <typename T>
std::pair<size_t, size_t> gemm_buffer_sizes(int64_t m, int64_t k, int64_t n) {
    const int64_t kc = std::min<int64_t>(k, Blocks<T>::KC);
    const int64_t mc = round_up(std::min<int64_t>(m, kMC), kMCStep);
    const int64_t nc = std::min<int64_t>(n, Blocks<T>::NC) + kMaxNR;
    return {static_cast<size_t>(mc * kc), static_cast<size_t>(nc * kc)};
}

// The micro-tile for a product with m output rows: the AVX-512 tile (12 x 32) wastes up to
// half of each tile on the few output channels of a small conv, where the AVX2 one (6 x 16)
// fits; pick the one with fewer padded vector operations.
template <typename T>
TileFn<T> pick_conv_tile(int64_t m, int64_t n) {
#ifdef MINI_X86_DISPATCH
    if (g_matmul_isa == "avx512") {
        // tiles of two vectors' width: 12 x 2L (AVX-512) or 6 x L (AVX2), L = AVX-512 lanes
        constexpr int64_t L = 64 / static_cast<int64_t>(sizeof(T));
        const int64_t wide = round_up(m, 12) * round_up(n, 2 * L) / 2;
        const int64_t narrow = round_up(m, 6) * round_up(n, L);
        return wide < narrow ? pick_tile_for<T>("avx512") : pick_tile_for<T>("avx2");
    }
#endif
    (void)m;
    (void)n;
    return pick_tile<T>();
}

// How the work is cut into blocks whose columns (C*kh*kw x block width) stay within
// ~512 KiB of cache: several whole images side by side when images are small (one product
// per image would be dominated by packing), else a few output rows of one image.
struct ConvBlocks {
    int64_t images, rows;                          // per block
    int64_t width() const { return images * rows; } // output rows covered (times Wo: columns)
};

inline ConvBlocks conv_blocks(const ConvGeom& g, size_t itemsize) {
    constexpr int64_t budget = int64_t(512) << 10;
    const int64_t per_row = std::max<int64_t>(1, g.c * g.kh * g.kw * g.wo * static_cast<int64_t>(itemsize));
    const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(g.ho, budget / per_row));
    if (rows < g.ho) return {1, rows};
    return {std::max<int64_t>(1, std::min<int64_t>(g.n, budget / (per_row * g.ho))), g.ho};
}

// Threads for `tasks` independent images (1 below the parallel threshold).
inline int conv_threads(int64_t tasks, int64_t work) {
#ifndef MINI_NO_OPENMP
    if (go_parallel(work / 32)) return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_threads(), tasks)));
#endif
    (void)tasks;
    (void)work;
    return 1;
}

// body(t, nt) on nt threads (t = 0..nt-1), or inline when nt == 1.
template <typename Body>
void run_threads(int nt, Body body) {
#ifndef MINI_NO_OPENMP
    if (nt > 1) {
#pragma omp parallel num_threads(nt)
        body(static_cast<int64_t>(omp_get_thread_num()), static_cast<int64_t>(omp_get_num_threads()));
        return;
    }
#endif
    (void)nt;
    body(int64_t(0), int64_t(1));
}

// Calls body(b0, b1, i0, i1) for the blocks of images [first, last): images b0..b1-1, output
// rows i0..i1-1 of each (several images with all rows, or one image with some rows).
template <typename Body>
void for_each_block(const ConvGeom& g, const ConvBlocks& bl, int64_t first, int64_t last, Body body) {
    for (int64_t b0 = first; b0 < last; b0 += bl.images) {
        const int64_t b1 = std::min(last, b0 + bl.images);
        for (int64_t i0 = 0; i0 < g.ho; i0 += bl.rows) body(b0, b1, i0, std::min(g.ho, i0 + bl.rows));
    }
}

template <typename T>
void conv2d_forward_t(const T* x, const T* w, const T* bias, T* out, const ConvGeom& g, int64_t cout) {
    const int64_t ckk = g.c * g.kh * g.kw, hw = g.ho * g.wo, image = g.c * g.h * g.w;
    const ConvBlocks bl = conv_blocks(g, sizeof(T));
    const int64_t cap = bl.width() * g.wo;  // columns of the widest block
    const TileFn<T> tile = pick_conv_tile<T>(cout, cap);
    const auto [a_len, b_len] = gemm_buffer_sizes<T>(cout, ckk, cap);
    const int nt = conv_threads(g.n, g.n * cout * hw * ckk);
    run_threads(nt, [&](int64_t t, int64_t tn) {
        T* cols = scratch<T>(kCols, static_cast<size_t>(ckk * cap));
        T* outs = bl.images > 1 ? scratch<T>(kGathered, static_cast<size_t>(cout * cap)) : nullptr;
        T* Ap = scratch<T>(kPackA, a_len);
        T* Bp = scratch<T>(kPackB, b_len);
        const int64_t first = g.n * t / tn, last = g.n * (t + 1) / tn;
        for_each_block(g, bl, first, last, [&](int64_t b0, int64_t b1, int64_t i0, int64_t i1) {
            const int64_t per = (i1 - i0) * g.wo, ld = (b1 - b0) * per;
            for (int64_t b = b0; b < b1; ++b) image_columns(x + b * image, cols + (b - b0) * per, ld, g, i0, i1);
            if (b1 - b0 == 1) {  // straight into out[b, :, rows]
                gemm_serial(tile, w, ckk, int64_t(1), cols, ld, int64_t(1), out + b0 * cout * hw + i0 * g.wo,
                            hw, cout, ckk, ld, Ap, Bp, false);
                return;
            }
            gemm_serial(tile, w, ckk, int64_t(1), cols, ld, int64_t(1), outs, ld, cout, ckk, ld, Ap,
                        Bp, false);
            for (int64_t b = b0; b < b1; ++b)
                for (int64_t o = 0; o < cout; ++o)
                    std::memcpy(out + (b * cout + o) * hw + i0 * g.wo, outs + o * ld + (b - b0) * per,
                                static_cast<size_t>(per) * sizeof(T));
        });
        if (bias)
            for (int64_t b = first; b < last; ++b)
                for (int64_t o = 0; o < cout; ++o) {
                    T* ob = out + (b * cout + o) * hw;
                    for (int64_t s = 0; s < hw; ++s) ob[s] += bias[o];
                }
    });
}

template <typename T>
void conv2d_backward_t(const T* x, const T* w, const T* gout, T* gx, T* gw, T* gb, const ConvGeom& g, int64_t cout) {
    const int64_t ckk = g.c * g.kh * g.kw, hw = g.ho * g.wo, image = g.c * g.h * g.w;
    const ConvBlocks bl = conv_blocks(g, sizeof(T));
    const int64_t cap = bl.width() * g.wo;
    const TileFn<T> tile_w = pick_conv_tile<T>(ckk, cout), tile_x = pick_conv_tile<T>(ckk, cap);
    // the two products: dW^T (ckk x width x cout) and dcols (ckk x cout x width)
    const auto [a_len, b_len] = gemm_buffer_sizes<T>(ckk, std::max(cout, cap), std::max(cout, cap));
    const int nt = conv_threads(g.n, g.n * cout * hw * ckk * ((gx ? 1 : 0) + (gw ? 1 : 0)));
    std::vector<double> gw_parts(gw ? static_cast<size_t>(nt * ckk * cout) : 0, 0.0);
    std::vector<double> gb_parts(gb ? static_cast<size_t>(nt * cout) : 0, 0.0);
    run_threads(nt, [&](int64_t t, int64_t tn) {
        T* cols = gw ? scratch<T>(kCols, static_cast<size_t>(ckk * cap)) : nullptr;
        T* dcols = gx ? scratch<T>(kDcols, static_cast<size_t>(ckk * cap)) : nullptr;
        T* gs = bl.images > 1 ? scratch<T>(kGathered, static_cast<size_t>(cout * cap)) : nullptr;
        T* gw_acc = gw ? scratch<T>(kGwAcc, static_cast<size_t>(ckk * cout)) : nullptr;
        T* Ap = scratch<T>(kPackA, a_len);
        T* Bp = scratch<T>(kPackB, b_len);
        bool gw_started = false;
        const int64_t first = g.n * t / tn, last = g.n * (t + 1) / tn;
        if (gx) std::fill(gx + first * image, gx + last * image, T(0));
        for_each_block(g, bl, first, last, [&](int64_t b0, int64_t b1, int64_t i0, int64_t i1) {
            const int64_t per = (i1 - i0) * g.wo, ld = (b1 - b0) * per;
            // G[o, col]: the output gradient of the block, Cout rows `grs` apart
            const T* G = gout + b0 * cout * hw + i0 * g.wo;
            int64_t grs = hw;
            if (b1 - b0 > 1) {  // gather the images' gradients side by side
                for (int64_t b = b0; b < b1; ++b)
                    for (int64_t o = 0; o < cout; ++o)
                        std::memcpy(gs + o * ld + (b - b0) * per, gout + (b * cout + o) * hw + i0 * g.wo,
                                    static_cast<size_t>(per) * sizeof(T));
                G = gs;
                grs = ld;
            }
            if (gw) {
                for (int64_t b = b0; b < b1; ++b)
                    image_columns(x + b * image, cols + (b - b0) * per, ld, g, i0, i1);
                // dW^T[CKK, Cout] (+)= cols[CKK, ld] @ G^T   (B(p, o) = G[o*grs + p])
                gemm_serial(tile_w, cols, ld, int64_t(1), G, int64_t(1), grs, gw_acc, cout, ckk, ld, cout,
                            Ap, Bp, gw_started);
                gw_started = true;
            }
            if (gx) {
                // dcols[CKK, ld] = W^T (A(r, o) = w[o*CKK + r]) @ G[Cout, ld]
                gemm_serial(tile_x, w, int64_t(1), ckk, G, grs, int64_t(1), dcols, ld, ckk, cout, ld, Ap,
                            Bp, false);
                for (int64_t b = b0; b < b1; ++b)
                    image_columns_add(dcols + (b - b0) * per, ld, gx + b * image, g, i0, i1);
            }
        });
        if (gb)
            for (int64_t b = first; b < last; ++b)
                for (int64_t o = 0; o < cout; ++o) {
                    const T* gbo = gout + (b * cout + o) * hw;
                    double s = 0;
                    for (int64_t q = 0; q < hw; ++q) s += static_cast<double>(gbo[q]);
                    gb_parts[static_cast<size_t>(t * cout + o)] += s;
                }
        if (gw && gw_started)
            for (int64_t q = 0; q < ckk * cout; ++q) gw_parts[static_cast<size_t>(t * ckk * cout + q)] = gw_acc[q];
    });
    if (gw)
        for (int64_t o = 0; o < cout; ++o)
            for (int64_t r = 0; r < ckk; ++r) {
                double s = 0;
                for (int t = 0; t < nt; ++t) s += gw_parts[static_cast<size_t>(t * ckk * cout + r * cout + o)];
                gw[o * ckk + r] = static_cast<T>(s);
            }
    if (gb)
        for (int64_t o = 0; o < cout; ++o) {
            double s = 0;
            for (int t = 0; t < nt; ++t) s += gb_parts[static_cast<size_t>(t * cout + o)];
            gb[o] = static_cast<T>(s);
        }
}

// Checks shared by conv2d_forward / conv2d_backward: x is [N, C, H, W] and weight is
// [Cout, C, kh, kw] with the sizes of their buffers; returns the geometry and sets cout.
ConvGeom check_conv(const char* K, const Buf& x, const std::vector<int64_t>& x_shape, const Buf& w,
                    const std::vector<int64_t>& w_shape, const std::vector<int64_t>& stride,
                    const std::vector<int64_t>& padding, int64_t& cout) {
    check_same_dtype(K, x, "x", w, "weight");
    if (w_shape.size() != 4) value_error(K, "weight_shape must be (Cout, C, kh, kw), got " + list_str(w_shape));
    for (int64_t d : w_shape)
        if (d < 0) value_error(K, "negative dimension in weight_shape " + list_str(w_shape));
    if (x_shape.size() == 4 && w_shape[1] != x_shape[1])
        value_error(K, "x has " + std::to_string(x_shape[1]) + " channels (x_shape " + list_str(x_shape) +
                           ") but weight_shape " + list_str(w_shape) + " expects " + std::to_string(w_shape[1]));
    ConvGeom g = check_geom(K, x_shape, {w_shape[2], w_shape[3]}, stride, padding);
    cout = w_shape[0];
    const int64_t xs = image_size(K, g);
    if (x.size != xs)
        value_error(K, "'x' has " + std::to_string(x.size) + " elements but x_shape " + list_str(x_shape) + " has " +
                           std::to_string(xs));
    int64_t ws = checked_mul(K, cout, g.c, "the weight size");
    ws = checked_mul(K, checked_mul(K, ws, g.kh, "the weight size"), g.kw, "the weight size");
    if (w.size != ws)
        value_error(K, "'weight' has " + std::to_string(w.size) + " elements but weight_shape " + list_str(w_shape) +
                           " has " + std::to_string(ws));
    cols_size(K, g);  // N*Ho*Wo*C*kh*kw must not overflow either
    return g;
}

int64_t conv_out_size(const char* K, const ConvGeom& g, int64_t cout) {
    int64_t s = checked_mul(K, g.n, cout, "N*Cout*Ho*Wo");
    return checked_mul(K, checked_mul(K, s, g.ho, "N*Cout*Ho*Wo"), g.wo, "N*Cout*Ho*Wo");
}

void conv2d_forward(const py::object& x_o, const std::vector<int64_t>& x_shape, const py::object& w_o,
                    const std::vector<int64_t>& w_shape, const py::object& bias_o, const std::vector<int64_t>& stride,
                    const std::vector<int64_t>& padding, const py::object& out_o) {
    const char* K = "conv2d_forward";
    Buf x = check_buffer(K, "x", x_o, false);
    Buf w = check_buffer(K, "weight", w_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    int64_t cout = 0;
    ConvGeom g = check_conv(K, x, x_shape, w, w_shape, stride, padding, cout);
    check_same_dtype(K, x, "x", out, "out");
    const int64_t os = conv_out_size(K, g, cout);
    if (out.size != os)
        value_error(K, "'out' has " + std::to_string(out.size) + " elements but the output [N, Cout, Ho, Wo] = " +
                           list_str({g.n, cout, g.ho, g.wo}) + " has " + std::to_string(os));
    std::optional<Buf> bias;
    if (!bias_o.is_none()) {
        bias = check_buffer(K, "bias", bias_o, false);
        check_same_dtype(K, x, "x", *bias, "bias");
        if (bias->size != cout)
            value_error(K, "'bias' has " + std::to_string(bias->size) + " elements but Cout is " +
                               std::to_string(cout));
    }
    check_no_overlap(K, x, "x", out);
    check_no_overlap(K, w, "weight", out);
    if (bias) check_no_overlap(K, *bias, "bias", out);
    if (os == 0) return;
    if (g.c == 0) {  // an empty reduction: the output is the bias (or zero)
        const int64_t hw = g.ho * g.wo;
        for (int64_t i = 0; i < os; ++i) {
            const double v = bias ? (x.dtype == DType::f32 ? cptr<float>(*bias)[(i / hw) % cout]
                                                           : cptr<double>(*bias)[(i / hw) % cout]) : 0.0;
            if (x.dtype == DType::f32) ptr<float>(out)[i] = static_cast<float>(v);
            else ptr<double>(out)[i] = v;
        }
        return;
    }
    py::gil_scoped_release nogil;
    if (x.dtype == DType::f32)
        conv2d_forward_t(cptr<float>(x), cptr<float>(w), bias ? cptr<float>(*bias) : nullptr, ptr<float>(out), g, cout);
    else
        conv2d_forward_t(cptr<double>(x), cptr<double>(w), bias ? cptr<double>(*bias) : nullptr, ptr<double>(out), g,
                         cout);
}

void conv2d_backward(const py::object& x_o, const std::vector<int64_t>& x_shape, const py::object& w_o,
                     const std::vector<int64_t>& w_shape, const py::object& g_o, const std::vector<int64_t>& stride,
                     const std::vector<int64_t>& padding, const py::object& gx_o, const py::object& gw_o,
                     const py::object& gb_o) {
    const char* K = "conv2d_backward";
    Buf x = check_buffer(K, "x", x_o, false);
    Buf w = check_buffer(K, "weight", w_o, false);
    Buf gout = check_buffer(K, "grad_out", g_o, false);
    int64_t cout = 0;
    ConvGeom g = check_conv(K, x, x_shape, w, w_shape, stride, padding, cout);
    check_same_dtype(K, x, "x", gout, "grad_out");
    const int64_t os = conv_out_size(K, g, cout);
    if (gout.size != os)
        value_error(K, "'grad_out' has " + std::to_string(gout.size) + " elements but the output [N, Cout, Ho, Wo] = " +
                           list_str({g.n, cout, g.ho, g.wo}) + " has " + std::to_string(os));
    auto optional_out = [&](const py::object& o, const char* name, int64_t size) -> std::optional<Buf> {
        if (o.is_none()) return std::nullopt;
        Buf b = check_buffer(K, name, o, true);
        check_same_dtype(K, x, "x", b, name);
        if (b.size != size)
            value_error(K, std::string("'") + name + "' has " + std::to_string(b.size) + " elements, expected " +
                               std::to_string(size));
        for (const auto& [in, in_name] : {std::pair<const Buf*, const char*>{&x, "x"}, {&w, "weight"}, {&gout, "grad_out"}})
            check_no_overlap(K, *in, in_name, b);
        return b;
    };
    std::optional<Buf> gx = optional_out(gx_o, "grad_x", x.size);
    std::optional<Buf> gw = optional_out(gw_o, "grad_weight", w.size);
    std::optional<Buf> gb = optional_out(gb_o, "grad_bias", cout);
    if ((gx && gw && overlaps(*gx, *gw)) || (gx && gb && overlaps(*gx, *gb)) || (gw && gb && overlaps(*gw, *gb)))
        value_error(K, "the gradient outputs must not overlap");
    if (os == 0) {  // no output: every gradient is zero (C == 0 takes the general path below)
        for (auto* b : {gx ? &*gx : nullptr, gw ? &*gw : nullptr, gb ? &*gb : nullptr})
            if (b) {
                if (b->dtype == DType::f32) std::fill(ptr<float>(*b), ptr<float>(*b) + b->size, 0.0f);
                else std::fill(ptr<double>(*b), ptr<double>(*b) + b->size, 0.0);
            }
        return;
    }
    py::gil_scoped_release nogil;
    if (x.dtype == DType::f32)
        conv2d_backward_t(cptr<float>(x), cptr<float>(w), cptr<float>(gout), gx ? ptr<float>(*gx) : nullptr,
                          gw ? ptr<float>(*gw) : nullptr, gb ? ptr<float>(*gb) : nullptr, g, cout);
    else
        conv2d_backward_t(cptr<double>(x), cptr<double>(w), cptr<double>(gout), gx ? ptr<double>(*gx) : nullptr,
                          gw ? ptr<double>(*gw) : nullptr, gb ? ptr<double>(*gb) : nullptr, g, cout);
}

std::string compiler() {
#if defined(__clang__)
    return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
    return std::string("gcc ") + __VERSION__;
#elif defined(_MSC_VER)
    return "msvc " + std::to_string(_MSC_VER);
#else
    return "unknown";
#endif
}

// ---------------------------------------------------------------------------------------
// max pooling, NCHW.  Each output is the maximum of its window; its position in the window
// (row-major, a * kw + b) is kept for the backward.  Window taps outside the input (the
// padding, and the extra bottom/right rows of ceil_mode) count as -inf.  Ties go to the
// first maximum and a NaN wins, as numpy's argmax over the window does, so the values and
// positions are those of mini's numpy path.  The backward adds each output's gradient onto
// the input pixel of its position (a tap outside the input gets nothing).

struct PoolGeom {
    int64_t planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo;
};

PoolGeom check_pool(const char* K, const std::vector<int64_t>& x_shape, const std::vector<int64_t>& kernel,
                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                    const std::vector<int64_t>& dilation, const std::vector<int64_t>& out_hw) {
    if (x_shape.size() != 4) value_error(K, "x_shape must be (N, C, H, W), got " + list_str(x_shape));
    if (kernel.size() != 2 || stride.size() != 2 || padding.size() != 2 || dilation.size() != 2 || out_hw.size() != 2)
        value_error(K, "kernel_size, stride, padding, dilation and out_hw must be pairs");
    for (int64_t d : x_shape)
        if (d < 0) value_error(K, "negative dimension in x_shape " + list_str(x_shape));
    if (kernel[0] < 1 || kernel[1] < 1 || stride[0] < 1 || stride[1] < 1 || dilation[0] < 1 || dilation[1] < 1 ||
        padding[0] < 0 || padding[1] < 0 || out_hw[0] < 0 || out_hw[1] < 0)
        value_error(K, "invalid kernel_size " + list_str(kernel) + ", stride " + list_str(stride) + ", padding " +
                           list_str(padding) + ", dilation " + list_str(dilation) + " or out_hw " + list_str(out_hw));
    PoolGeom g{checked_mul(K, x_shape[0], x_shape[1], "N*C"), x_shape[2], x_shape[3], kernel[0], kernel[1],
               stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], out_hw[0], out_hw[1]};
    checked_mul(K, g.planes, checked_mul(K, g.h, g.w, "H*W"), "N*C*H*W");
    checked_mul(K, g.planes, checked_mul(K, g.ho, g.wo, "Ho*Wo"), "N*C*Ho*Wo");
    return g;
}

template <typename T>
void max_pool_fwd_t(const T* x, T* out, int64_t* arg, const PoolGeom& g) {
    const int64_t plane = g.h * g.w, oplane = g.ho * g.wo;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    parallel_chunks(g.planes * oplane, [&](int64_t b0, int64_t e0) {
        for (int64_t o = b0; o < e0; ++o) {  // o = (plane, i, j)
            const int64_t p = o / oplane, i = (o % oplane) / g.wo, j = o % g.wo;
            const T* xp = x + p * plane;
            T best = neg_inf;
            int64_t where = 0;
            for (int64_t a = 0, q = 0; a < g.kh; ++a) {
                const int64_t y = i * g.sh - g.ph + a * g.dh;
                for (int64_t b = 0; b < g.kw; ++b, ++q) {
                    const int64_t c = j * g.sw - g.pw + b * g.dw;
                    const T v = (y >= 0 && y < g.h && c >= 0 && c < g.w) ? xp[y * g.w + c] : neg_inf;
                    if (std::isnan(v)) { best = v; where = q; a = g.kh; break; }  // a NaN wins
                    if (q == 0 || v > best) { best = v; where = q; }
                }
            }
            out[o] = best;
            arg[o] = where;
        }
    });
}

template <typename T>
void max_pool_bwd_t(const T* grad, const int64_t* arg, T* gx, const PoolGeom& g) {
    const int64_t plane = g.h * g.w, oplane = g.ho * g.wo;
    parallel_chunks(g.planes, [&](int64_t p0, int64_t p1) {  // planes are independent
        for (int64_t p = p0; p < p1; ++p) {
            T* o = gx + p * plane;
            for (int64_t t = 0; t < plane; ++t) o[t] = T(0);
            for (int64_t k = p * oplane; k < (p + 1) * oplane; ++k) {
                const int64_t i = (k % oplane) / g.wo, j = k % g.wo, q = arg[k];
                const int64_t y = i * g.sh - g.ph + (q / g.kw) * g.dh, c = j * g.sw - g.pw + (q % g.kw) * g.dw;
                if (y >= 0 && y < g.h && c >= 0 && c < g.w) o[y * g.w + c] += grad[k];
            }
        }
    });
}

py::array check_positions(const char* K, const char* name, const py::object& obj, bool writable, int64_t size) {
    if (!py::isinstance<py::array>(obj))
        type_error(K, std::string("argument '") + name + "' must be a numpy.ndarray");
    py::array a = py::reinterpret_borrow<py::array>(obj);
    if (!a.dtype().equal(py::dtype::of<int64_t>()))
        type_error(K, std::string("argument '") + name + "' has dtype " + describe_dtype(a) + "; expected int64");
    if (a.ndim() != 1 || !(a.flags() & py::array::c_style))
        value_error(K, std::string("argument '") + name + "' must be a flat C-contiguous buffer");
    if (writable && !a.writeable()) value_error(K, std::string("output '") + name + "' is read-only");
    if (static_cast<int64_t>(a.size()) != size)
        value_error(K, std::string("'") + name + "' has " + std::to_string(a.size()) + " elements but N*C*Ho*Wo = " +
                           std::to_string(size));
    return a;
}

void max_pool2d_forward(const py::object& x_o, const std::vector<int64_t>& x_shape, const std::vector<int64_t>& kernel,
                        const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                        const std::vector<int64_t>& dilation, const std::vector<int64_t>& out_hw,
                        const py::object& out_o, const py::object& arg_o) {
    const char* K = "max_pool2d_forward";
    Buf x = check_buffer(K, "x", x_o, false);
    Buf out = check_buffer(K, "out", out_o, true);
    check_same_dtype(K, x, "x", out, "out");
    PoolGeom g = check_pool(K, x_shape, kernel, stride, padding, dilation, out_hw);
    if (x.size != g.planes * g.h * g.w)
        value_error(K, "'x' has " + std::to_string(x.size) + " elements but x_shape " + list_str(x_shape) + " has " +
                           std::to_string(g.planes * g.h * g.w));
    const int64_t n_out = g.planes * g.ho * g.wo;
    if (out.size != n_out)
        value_error(K, "'out' has " + std::to_string(out.size) + " elements but N*C*Ho*Wo = " + std::to_string(n_out));
    py::array arg = check_positions(K, "arg", arg_o, true, n_out);
    check_no_overlap(K, x, "x", out);
    if (n_out == 0) return;
    int64_t* a = static_cast<int64_t*>(arg.mutable_data());
    py::gil_scoped_release nogil;
    if (x.dtype == DType::f32) max_pool_fwd_t(cptr<float>(x), ptr<float>(out), a, g);
    else max_pool_fwd_t(cptr<double>(x), ptr<double>(out), a, g);
}

void max_pool2d_backward(const py::object& grad_o, const py::object& arg_o, const std::vector<int64_t>& x_shape,
                         const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                         const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                         const std::vector<int64_t>& out_hw, const py::object& grad_x_o) {
    const char* K = "max_pool2d_backward";
    Buf grad = check_buffer(K, "grad", grad_o, false);
    Buf gx = check_buffer(K, "grad_x", grad_x_o, true);
    check_same_dtype(K, grad, "grad", gx, "grad_x");
    PoolGeom g = check_pool(K, x_shape, kernel, stride, padding, dilation, out_hw);
    const int64_t n_out = g.planes * g.ho * g.wo;
    if (grad.size != n_out)
        value_error(K, "'grad' has " + std::to_string(grad.size) + " elements but N*C*Ho*Wo = " + std::to_string(n_out));
    if (gx.size != g.planes * g.h * g.w)
        value_error(K, "'grad_x' has " + std::to_string(gx.size) + " elements but x_shape " + list_str(x_shape) +
                           " has " + std::to_string(g.planes * g.h * g.w));
    py::array arg = check_positions(K, "arg", arg_o, false, n_out);
    const int64_t* a = static_cast<const int64_t*>(arg.data());
    const int64_t taps = g.kh * g.kw;
    for (int64_t k = 0; k < n_out; ++k)
        if (a[k] < 0 || a[k] >= taps)
            value_error(K, "'arg' holds " + std::to_string(a[k]) + " at " + std::to_string(k) +
                               "; window positions are 0.." + std::to_string(taps - 1));
    check_no_overlap(K, grad, "grad", gx);
    if (gx.size == 0) return;
    py::gil_scoped_release nogil;
    if (grad.dtype == DType::f32) max_pool_bwd_t(cptr<float>(grad), a, ptr<float>(gx), g);
    else max_pool_bwd_t(cptr<double>(grad), a, ptr<double>(gx), g);
}

}  // namespace

PYBIND11_MODULE(_cpu, m) {
    m.doc() =
        "mini's cpu backend: C++ kernels (OpenMP where the compiler has it) on flat, C-contiguous "
        "float32/float64 numpy buffers.  Every kernel writes into a caller-allocated 'out'.";
    m.attr("PARALLEL_THRESHOLD") = kParallelThreshold;
#ifdef MINI_HAVE_ATFORK
    pthread_atfork(nullptr, nullptr, mark_forked_child);
#endif

    m.def("openmp_enabled", []() {
#ifndef MINI_NO_OPENMP
        return true;
#else
        return false;
#endif
    }, "True when the module was built with OpenMP.");
    m.def("max_threads", &max_threads,
          "Threads a parallel kernel uses: omp_get_max_threads(), or 1 without OpenMP and in a forked child.");
    m.def("compiler", &compiler, "The compiler that built the module.");

    m.def("compact", &compact, py::arg("src"), py::arg("shape"), py::arg("strides"), py::arg("offset"), py::arg("out"),
          "out[i] = src[offset + sum_k idx_k * strides_k], idx running over `shape` in row-major order.\n"
          "Strides are in elements and may be zero or negative; every reachable index is checked.");
    m.def("ewise", &ewise, py::arg("op"), py::arg("a"), py::arg("b"), py::arg("out"),
          "out = op(a, b) elementwise. op: add sub mul div maximum minimum pow eq ne lt le gt ge\n"
          "(comparisons write 1.0 / 0.0). `out` may be `a` or `b`.");
    m.def("scalar", &scalar, py::arg("op"), py::arg("a"), py::arg("s"), py::arg("out"),
          "out = op(a, s). op: add sub rsub(s - a) mul div rdiv(s / a) maximum minimum pow eq ne lt le gt ge.");
    m.def("unary", &unary, py::arg("op"), py::arg("a"), py::arg("out"),
          "out = op(a). op: neg exp log sqrt sin cos tanh abs relu sigmoid sign erf.");
    m.def("reduce_last", &reduce_last, py::arg("op"), py::arg("a"), py::arg("n"), py::arg("out"),
          "out[r] = op(a[r*n:(r+1)*n]) for op in sum, max; a.size must be out.size * n.");
    m.def("matmul", &matmul, py::arg("a"), py::arg("b"), py::arg("out"), py::arg("m"), py::arg("k"), py::arg("n"),
          "out(m x n) = a(m x k) @ b(k x n), all row-major flat buffers; cache-blocked, OpenMP over tiles.");
    m.def("matmul_strided", &matmul_strided, py::arg("a"), py::arg("a_offset"), py::arg("a_row_stride"),
          py::arg("a_col_stride"), py::arg("b"), py::arg("b_offset"), py::arg("b_row_stride"), py::arg("b_col_stride"),
          py::arg("out"), py::arg("m"), py::arg("k"), py::arg("n"),
          "out(m x n, compact) = A @ B where A(i, p) = a[a_offset + i*a_row_stride + p*a_col_stride] and\n"
          "B(p, j) = b[b_offset + p*b_row_stride + j*b_col_stride] (strides in elements, any sign): transposed\n"
          "views need no copy.  Small outputs with a long reduction split the reduction across threads.");
    m.def("im2col", &im2col, py::arg("x"), py::arg("x_shape"), py::arg("kernel_size"), py::arg("stride"),
          py::arg("padding"), py::arg("out"),
          "out[N*Ho*Wo, C*kh*kw] = the receptive fields of the compact NCHW buffer x (zero padding on both sides).");
    m.def("col2im", &col2im, py::arg("cols"), py::arg("x_shape"), py::arg("kernel_size"), py::arg("stride"),
          py::arg("padding"), py::arg("out"),
          "out[N, C, H, W] = the adjoint of im2col: every entry of cols added onto its input pixel.");
    m.def("conv2d_forward", &conv2d_forward, py::arg("x"), py::arg("x_shape"), py::arg("weight"),
          py::arg("weight_shape"), py::arg("bias"), py::arg("stride"), py::arg("padding"), py::arg("out"),
          "out[N, Cout, Ho, Wo] = conv2d(x, weight) + bias (bias may be None), NCHW, without materialising\n"
          "the column matrix: each image's columns are built a few rows at a time in cache.");
    m.def("conv2d_backward", &conv2d_backward, py::arg("x"), py::arg("x_shape"), py::arg("weight"),
          py::arg("weight_shape"), py::arg("grad_out"), py::arg("stride"), py::arg("padding"), py::arg("grad_x"),
          py::arg("grad_weight"), py::arg("grad_bias"),
          "The gradients of conv2d_forward given grad_out [N, Cout, Ho, Wo], written into grad_x [N, C, H, W],\n"
          "grad_weight [Cout, C, kh, kw] and grad_bias [Cout]; pass None for any that is not needed.");
    m.def("max_pool2d_forward", &max_pool2d_forward, py::arg("x"), py::arg("x_shape"), py::arg("kernel_size"),
          py::arg("stride"), py::arg("padding"), py::arg("dilation"), py::arg("out_hw"), py::arg("out"), py::arg("arg"),
          "out[N, C, Ho, Wo] = the maximum of each window of the NCHW buffer x (taps outside it count as -inf)\n"
          "and arg (int64) = its position in the window, a * kw + b (the first maximum; a NaN wins).");
    m.def("max_pool2d_backward", &max_pool2d_backward, py::arg("grad"), py::arg("arg"), py::arg("x_shape"),
          py::arg("kernel_size"), py::arg("stride"), py::arg("padding"), py::arg("dilation"), py::arg("out_hw"),
          py::arg("grad_x"),
          "grad_x[N, C, H, W] = each output's gradient added onto the input pixel of its window position arg.");
    set_matmul_isa("auto");
    m.def("matmul_isa", []() { return g_matmul_isa; },
          "The instruction set of the matmul micro-kernel in use: avx512, avx2 or base.");
    m.def("supported_isas", &supported_isas, "Micro-kernel instruction sets this CPU and build support.");
    m.def("set_matmul_isa", &set_matmul_isa, py::arg("isa"),
          "Choose the matmul micro-kernel ('auto', or one of supported_isas()); for tests and benchmarks.");
    m.def("fill", &fill, py::arg("out"), py::arg("value"), "out[:] = value.");
}
