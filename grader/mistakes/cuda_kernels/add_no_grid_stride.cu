// Mistake: one element per thread with a bounds check, and no loop.  Right whenever the
// grid has at least as many threads as elements; with a smaller grid the elements past
// blocks * threads are never computed.
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
