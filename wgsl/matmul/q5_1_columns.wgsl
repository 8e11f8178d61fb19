#include "matmul/columns.wgsl"
#include "matmul/q5_1.wgsl"
