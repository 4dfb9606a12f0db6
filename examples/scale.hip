// A template kernel: instantiate it with --name-expr 'scale<float>' and read the
// lowered (mangled) name back to launch it.
template <typename T>
__global__ void scale(T *a, T s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        a[i] *= s;
}
