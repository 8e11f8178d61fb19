#include "matmul/columns.wgsl"
#include "matmul/q4_0.wgsl"
