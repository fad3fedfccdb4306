// Mistake: every block writes its sum to partial[0]: the blocks overwrite each other
// (a write-write race between blocks), and the other partial sums are never written.
__global__ void block_sum_shared(const float* x, float* partial, int n) {
    __shared__ float buf[256];
    int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) v += x[i];
    buf[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[0] = buf[0];
}
