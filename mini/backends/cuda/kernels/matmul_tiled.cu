// C = A @ B (row-major, A [M, K], B [K, N]) with shared-memory tiles: a block of
// TILE x TILE threads computes a TILE x TILE tile of C.  For each step along K the block
// loads one tile of A and one of B into shared memory (one element per thread), waits
// until all are loaded, multiplies them, and waits again before the next step
// overwrites them.  Each element loaded from global memory is used TILE times, so the
// kernel reads 2*M*N*K/TILE floats instead of the naive kernel's 2*M*N*K.
// Tiles hanging over the edge of A or B are padded with zeros (sizes need not be
// multiples of TILE).
#define TILE 16

__global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int a_col = t * TILE + tx;
        int b_row = t * TILE + ty;
        As[ty][tx] = (row < M && a_col < K) ? A[row * K + a_col] : 0.0f;
        Bs[ty][tx] = (b_row < K && col < N) ? B[b_row * N + col] : 0.0f;
        __syncthreads();                        // the tiles are complete
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();                        // everyone is done with them
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

// --- host launcher ---
int launch_matmul_tiled(std::uintptr_t A, std::uintptr_t B, std::uintptr_t C, int M, int N, int K) {
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_tiled<<<grid, block>>>((const float*)A, (const float*)B, (float*)C, M, N, K);
    return (int)cudaGetLastError();
}
