#include "matmul/unpack.wgsl"
#include "matmul/q4_1.wgsl"
