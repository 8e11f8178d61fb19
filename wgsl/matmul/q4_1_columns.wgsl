#include "matmul/columns.wgsl"
#include "matmul/q4_1.wgsl"
