#include "matmul/dot4.wgsl"
#include "matmul/q4_0.wgsl"
