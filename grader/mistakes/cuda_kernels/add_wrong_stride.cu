// Mistake: the grid-stride loop steps by the block size instead of the grid size, so
// every block walks the elements of the blocks after it: blocks write the same
// elements (a race between blocks), and the work is done gridDim.x times over.
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x) {
        out[i] = a[i] + b[i];
    }
}
