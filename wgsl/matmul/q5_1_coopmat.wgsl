#include "matmul/coopmat.wgsl"
#include "matmul/q5_1.wgsl"
