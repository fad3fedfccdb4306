// out [cols, rows] = in [rows, cols] transposed, one thread per element.  A warp reads 32
// neighbours of a row of `in` (coalesced: 4 sectors of 32 bytes) but writes them down a
// column of `out`, 32 elements `rows` apart: 32 sectors for 128 useful bytes.
__global__ void transpose_naive(const float* in, float* out, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) out[c * rows + r] = in[r * cols + c];
}

// --- host launcher ---
int launch_transpose_naive(std::uintptr_t in, std::uintptr_t out, int rows, int cols) {
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 7) / 8);
    transpose_naive<<<grid, block>>>((const float*)in, (float*)out, rows, cols);
    return (int)cudaGetLastError();
}
