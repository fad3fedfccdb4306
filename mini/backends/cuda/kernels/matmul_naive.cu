// C = A @ B for row-major A [M, K], B [K, N], C [M, N]: one thread per element of C.
// threadIdx.x walks the columns, so the 32 threads of a warp read 32 neighbouring
// elements of a row of B (coalesced) and the same element of A (a broadcast).
__global__ void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}

// --- host launcher ---
int launch_matmul_naive(std::uintptr_t A, std::uintptr_t B, std::uintptr_t C, int M, int N, int K) {
    dim3 block(16, 16);
    dim3 grid((N + 15) / 16, (M + 15) / 16);
    matmul_naive<<<grid, block>>>((const float*)A, (const float*)B, (float*)C, M, N, K);
    return (int)cudaGetLastError();
}
