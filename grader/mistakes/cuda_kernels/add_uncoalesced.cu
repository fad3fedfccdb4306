// Mistake: CPU-style chunks: thread t adds elements t*chunk ... (t+1)*chunk - 1.  The
// result is right, but at each step the 32 threads of a warp touch addresses `chunk`
// floats apart: one 32-byte sector per thread instead of 4 sectors per warp.
__global__ void add_kernel(const float* a, const float* b, float* out, int n) {
    int threads = blockDim.x * gridDim.x;
    int chunk = (n + threads - 1) / threads;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = t * chunk; i < (t + 1) * chunk && i < n; ++i) {
        out[i] = a[i] + b[i];
    }
}
