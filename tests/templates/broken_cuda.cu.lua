-- fixture: renders fine, but the CUDA has an error on template line 7 (test_nvrtc)
local T = param("T", 64)
cuda [==[
extern "C" __global__ void twell_broken(float *out) {
    const int i = (int)threadIdx.x;
    if (i < ${T})
        out[i] = undefined_identifier_on_line_7 * 2.0f;
}
]==]
