// partial[b] = the sum of the elements block b visits (grid-stride), by a tree in shared
// memory: each step halves the number of active threads, and a __syncthreads() that
// every thread reaches separates the steps.  The launcher sums the partial sums with a
// second launch of one block.  blockDim.x must be a power of two, at most 256.
__global__ void block_sum_shared(const float* x, float* partial, int n) {
    __shared__ float buf[256];
    int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) v += x[i];
    buf[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();                      // outside the if: every thread reaches it
    }
    if (tid == 0) partial[blockIdx.x] = buf[0];
}

// --- host launcher ---
// partial holds `blocks` floats; out[0] receives the total.
int launch_block_sum_shared(std::uintptr_t x, std::uintptr_t partial, std::uintptr_t out, int n, int blocks) {
    block_sum_shared<<<blocks, 256>>>((const float*)x, (float*)partial, n);
    block_sum_shared<<<1, 256>>>((const float*)partial, (float*)out, blocks);
    return (int)cudaGetLastError();
}
