// The same block sum with warp shuffles: the 32 lanes of a warp add their values in five
// __shfl_down_sync steps (no shared memory, no __syncthreads), then lane 0 of each warp
// leaves the warp's sum in shared memory and the first warp adds those up.
__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffff, v, offset);   // all 32 lanes take part
    return v;
}

__global__ void block_sum_shuffle(const float* x, float* partial, int n) {
    __shared__ float warp_sums[32];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) v += x[i];
    v = warp_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int warps = (blockDim.x + 31) / 32;
        v = lane < warps ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) partial[blockIdx.x] = v;
    }
}

// --- host launcher ---
// partial holds `blocks` floats; out[0] receives the total.  blockDim: 256 (8 full warps).
int launch_block_sum_shuffle(std::uintptr_t x, std::uintptr_t partial, std::uintptr_t out, int n, int blocks) {
    block_sum_shuffle<<<blocks, 256>>>((const float*)x, (float*)partial, n);
    block_sum_shuffle<<<1, 256>>>((const float*)partial, (float*)out, blocks);
    return (int)cudaGetLastError();
}
