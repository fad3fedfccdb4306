// Mistake: only threads with an element write their slot of buf; the tree then adds the
// slots of the threads past the end, which nobody wrote.
__global__ void block_sum_shared(const float* x, float* partial, int n) {
    __shared__ float buf[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    if (i < n) buf[tid] = x[i];
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = buf[0];
}
