// Mistake: the shared array has 128 floats but the block has 256 threads, each writing
// buf[threadIdx.x]: threads 128-255 write past its end.
__global__ void block_sum_shared(const float* x, float* partial, int n) {
    __shared__ float buf[128];
    int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) v += x[i];
    buf[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = buf[0];
}
