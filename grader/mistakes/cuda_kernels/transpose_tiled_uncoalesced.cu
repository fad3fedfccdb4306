// Mistake: no shared tile: each thread copies its elements straight from in to out.  The
// result is right, but a warp writes 32 elements down a column of `out`, `rows` floats
// apart: 32 sectors of 32 bytes per request where a row takes 4.
#define TDIM 32
#define TROWS 8

__global__ void transpose_tiled(const float* in, float* out, int rows, int cols) {
    int c = blockIdx.x * TDIM + threadIdx.x;
    int r = blockIdx.y * TDIM + threadIdx.y;
    for (int j = 0; j < TDIM; j += TROWS)
        if (r + j < rows && c < cols) out[c * rows + r + j] = in[(r + j) * cols + c];
}
