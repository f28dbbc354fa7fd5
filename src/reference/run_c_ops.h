#pragma once
// run.c's numerical kernels, in run.c's exact float32 operation order. Every line
// is one IEEE rounding as written (the project builds with -ffp-contract=off, so no
// a*b+c is fused); libm calls go to glibc (expf, sqrtf), whose results, not the
// exact mathematics, are the reference (../shared/docs/llama2c-numerics.md).
#include <span>

namespace qpu::reference {

// out[i] = sum_j w[i*n + j] * x[j] for i < d, accumulated left to right from 0.0f.
void matmul(std::span<float> out, std::span<const float> x, std::span<const float> w, int n, int d);

// o[j] = weight[j] * (ss * x[j]) with ss = 1/sqrtf(mean(x^2) + 1e-5f). o may alias x.
void rmsnorm(std::span<float> o, std::span<const float> x, std::span<const float> weight);

// In place: x[i] = expf(x[i] - max) / sum (a division per element, as run.c).
void softmax(std::span<float> x);

}  // namespace qpu::reference
