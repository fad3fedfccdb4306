// out[i] = a[i] + b[i] for every i < n, with a grid-stride loop: each thread starts at
// its global index and steps by the number of threads in the grid, so any grid covers
// any n (a grid smaller than the data still does all of it).
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int stride = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = a[i] + b[i];
    }
}

// --- host launcher ---
int launch_add(std::uintptr_t a, std::uintptr_t b, std::uintptr_t out, int n, int blocks, int threads) {
    add_kernel<<<blocks, threads>>>((const float*)a, (const float*)b, (float*)out, n);
    return (int)cudaGetLastError();
}
