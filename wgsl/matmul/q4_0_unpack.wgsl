#include "matmul/unpack.wgsl"
#include "matmul/q4_0.wgsl"
