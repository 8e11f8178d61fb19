#include "matmul/dot4.wgsl"
#include "matmul/q4_1.wgsl"
