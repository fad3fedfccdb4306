// Mistake: the shuffle mask names lanes 0-15 only, but all 32 lanes of the warp execute
// the shuffle (and lanes 0-15 read from lanes 16-31).
__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0x0000ffff, v, offset);
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
