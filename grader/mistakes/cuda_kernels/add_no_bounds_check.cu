// Mistake: one thread per element, and no check that the element exists.  The last
// block has threads past the end of the arrays; they read and write out of bounds.
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = a[i] + b[i];
}
