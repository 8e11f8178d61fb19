#include "matmul/coopmat.wgsl"
#include "matmul/q4_1.wgsl"
