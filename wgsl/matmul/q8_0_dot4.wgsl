#include "matmul/dot4.wgsl"
#include "matmul/q8_0.wgsl"
