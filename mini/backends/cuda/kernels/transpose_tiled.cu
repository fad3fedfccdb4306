// The same transpose through a 32 x 32 tile in shared memory: a block reads a tile with
// coalesced row accesses, waits, and writes the transposed tile with coalesced row
// accesses of `out`.  Column reads of the tile would all fall in one of the 32 banks of
// shared memory (elements 32 floats apart); one column of padding (33 floats per row)
// spreads them over all banks.  A block is 32 x 8 threads, each moving 4 elements.
#define TDIM 32
#define TROWS 8

__global__ void transpose_tiled(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[TDIM][TDIM + 1];
    int c = blockIdx.x * TDIM + threadIdx.x;
    int r = blockIdx.y * TDIM + threadIdx.y;
    for (int j = 0; j < TDIM; j += TROWS)
        if (r + j < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = in[(r + j) * cols + c];
    __syncthreads();
    c = blockIdx.y * TDIM + threadIdx.x;      // the block's tile, transposed
    r = blockIdx.x * TDIM + threadIdx.y;
    for (int j = 0; j < TDIM; j += TROWS)
        if (r + j < cols && c < rows) out[(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
}

// --- host launcher ---
int launch_transpose_tiled(std::uintptr_t in, std::uintptr_t out, int rows, int cols) {
    dim3 block(TDIM, TROWS);
    dim3 grid((cols + TDIM - 1) / TDIM, (rows + TDIM - 1) / TDIM);
    transpose_tiled<<<grid, block>>>((const float*)in, (float*)out, rows, cols);
    return (int)cudaGetLastError();
}
