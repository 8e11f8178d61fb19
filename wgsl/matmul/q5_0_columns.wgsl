#include "matmul/columns.wgsl"
#include "matmul/q5_0.wgsl"
