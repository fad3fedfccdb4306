// Mistake: A is indexed as if it were stored column by column (A[k][row] instead of
// A[row][k]), so the kernel computes A^T @ B.
__global__ void matmul_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[k * M + row] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
