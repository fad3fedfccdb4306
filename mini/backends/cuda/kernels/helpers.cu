// Device memory for Python: allocate, copy, free, synchronise.  Pointers travel to
// Python as integers (std::uintptr_t) and come back to the launchers the same way.
#include <stdexcept>
#include <string>

static void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(e) + " (" +
                                 cudaGetErrorString(e) + ")");
}

std::uintptr_t device_malloc(std::size_t bytes) {
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    return (std::uintptr_t)p;
}

// Memory both the host and the kernels use (the buffers of mini's cuda device).
std::uintptr_t managed_malloc(std::size_t bytes) {
    void* p = nullptr;
    check_cuda(cudaMallocManaged(&p, bytes ? bytes : 1, cudaMemAttachGlobal), "cudaMallocManaged");
    return (std::uintptr_t)p;
}

void device_free(std::uintptr_t p) { check_cuda(cudaFree((void*)p), "cudaFree"); }

void copy_to_device(std::uintptr_t dst, py::array src) {
    if (!(src.flags() & py::array::c_style))
        throw std::invalid_argument("copy_to_device needs a C-contiguous array");
    check_cuda(cudaMemcpy((void*)dst, src.data(), (std::size_t)src.nbytes(), cudaMemcpyHostToDevice),
               "cudaMemcpy (host to device)");
}

void copy_to_host(py::array dst, std::uintptr_t src) {
    if (!(dst.flags() & py::array::c_style) || !dst.writeable())
        throw std::invalid_argument("copy_to_host needs a writeable C-contiguous array");
    check_cuda(cudaMemcpy(dst.mutable_data(), (const void*)src, (std::size_t)dst.nbytes(), cudaMemcpyDeviceToHost),
               "cudaMemcpy (device to host)");
}

void device_copy(std::uintptr_t dst, std::uintptr_t src, std::size_t bytes) {
    check_cuda(cudaMemcpy((void*)dst, (const void*)src, bytes, cudaMemcpyDeviceToDevice),
               "cudaMemcpy (device to device)");
}

void device_memset(std::uintptr_t p, int value, std::size_t bytes) {
    check_cuda(cudaMemset((void*)p, value, bytes), "cudaMemset");
}

// Waits for the device and returns the first error since the last call ("cudaSuccess").
std::string synchronize() {
    cudaError_t e = cudaDeviceSynchronize();
    cudaError_t last = cudaGetLastError();
    return cudaGetErrorName(e != cudaSuccess ? e : last);
}

std::string error_name(int code) { return cudaGetErrorName((cudaError_t)code); }
