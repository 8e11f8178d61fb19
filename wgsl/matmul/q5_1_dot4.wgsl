#include "matmul/dot4.wgsl"
#include "matmul/q5_1.wgsl"
