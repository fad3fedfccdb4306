// Mistake: the tile has 32 columns, not 33.  Reading a column of the tile, the 32 lanes
// of a warp read 32 floats that are 32 words apart: all in one shared-memory bank, so
// the read takes 32 turns (bank conflicts).  The result is right, only slow.
#define TDIM 32
#define TROWS 8

__global__ void transpose_tiled(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[TDIM][TDIM];
    int c = blockIdx.x * TDIM + threadIdx.x;
    int r = blockIdx.y * TDIM + threadIdx.y;
    for (int j = 0; j < TDIM; j += TROWS)
        if (r + j < rows && c < cols) tile[threadIdx.y + j][threadIdx.x] = in[(r + j) * cols + c];
    __syncthreads();
    c = blockIdx.y * TDIM + threadIdx.x;
    r = blockIdx.x * TDIM + threadIdx.y;
    for (int j = 0; j < TDIM; j += TROWS)
        if (r + j < cols && c < rows) out[(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
}
