#include "matmul/unpack.wgsl"
#include "matmul/q5_0.wgsl"
