// A 1-D three-point stencil with shared memory.
#define BLOCK 256
extern "C" __global__ void stencil3(const float *in, float *out, int n)
{
    __shared__ float tile[BLOCK + 2];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    int t = threadIdx.x + 1;
    tile[t] = i < n ? in[i] : 0.0f;
    if (threadIdx.x == 0)
        tile[0] = i > 0 ? in[i - 1] : 0.0f;
    if (threadIdx.x == BLOCK - 1)
        tile[BLOCK + 1] = i + 1 < n ? in[i + 1] : 0.0f;
    __syncthreads();
    if (i < n)
        out[i] = 0.25f * tile[t - 1] + 0.5f * tile[t] + 0.25f * tile[t + 1];
}
