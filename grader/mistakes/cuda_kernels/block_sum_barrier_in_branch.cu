// Mistake: the barrier is inside the branch, so only the threads that still add reach
// it; the others go on to the next step, or finish (barrier divergence).
__global__ void block_sum_shared(const float* x, float* partial, int n) {
    __shared__ float buf[256];
    int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) v += x[i];
    buf[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            buf[tid] += buf[tid + s];
            __syncthreads();
        }
    }
    if (tid == 0) partial[blockIdx.x] = buf[0];
}
