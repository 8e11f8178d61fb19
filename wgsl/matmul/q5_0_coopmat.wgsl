#include "matmul/coopmat.wgsl"
#include "matmul/q5_0.wgsl"

// Groups fetched a K step ahead (coopmat.wgsl): 1.07-1.23x for Q4_K on the H100.
const FETCH_AHEAD: bool = true;
