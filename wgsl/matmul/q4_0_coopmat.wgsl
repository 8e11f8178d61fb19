#include "matmul/coopmat.wgsl"
#include "matmul/q4_0.wgsl"
