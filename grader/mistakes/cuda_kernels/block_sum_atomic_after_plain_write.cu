// Mistake: thread 0 zeroes the block's partial sum with a plain store while the other
// threads already add to it with atomicAdd, with no barrier between: an atomic and a
// plain access race.  Threads that add before the zeroing lose their values.
__global__ void block_sum_shared(const float* x, float* partial, int n) {
    int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) v += x[i];
    if (tid == 0) partial[blockIdx.x] = 0.0f;
    atomicAdd(&partial[blockIdx.x], v);
}
