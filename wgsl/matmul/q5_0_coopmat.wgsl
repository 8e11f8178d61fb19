#include "matmul/coopmat.wgsl"
#include "matmul/q5_0.wgsl"
