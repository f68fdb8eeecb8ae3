// Kernels the backend contract tests and the readback self-test run. Shapes in comments.

// out[n]: out[i] = (seed * 7919 + i * 104729) mod 151936 -- "sampled ids" a host can predict.
HALO_KERNEL void halo_write_ids(i32* out, i32 n, i32 seed) {
    GRID_DEPENDENCY_SYNC();
    i32 i = HALO_GLOBAL_ID;
    if (i < n) out[i] = (i32)(((i64)seed * 7919 + (i64)i * 104729) % 151936);
}

// out[n] = a[n] + b[n] (float32): a first compute kernel for contract tests.
HALO_KERNEL void halo_add_f32(float* out, const float* a, const float* b, i32 n) {
    GRID_DEPENDENCY_SYNC();
    i32 i = HALO_GLOBAL_ID;
    if (i < n) out[i] = a[i] + b[i];
}
