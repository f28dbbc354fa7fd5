#include "reference/run_c_ops.h"

#include <math.h>  // glibc's expf/sqrtf by their C names: the reference is glibc's libm

#include <cstddef>

namespace qpu::reference {

void matmul(std::span<float> out, std::span<const float> x, std::span<const float> w, int n, int d) {
  for (int i = 0; i < d; i++) {
    const float* row = w.data() + static_cast<size_t>(i) * static_cast<size_t>(n);
    float val = 0.0f;
    for (int j = 0; j < n; j++) val += row[j] * x[j];
    out[i] = val;
  }
}

void rmsnorm(std::span<float> o, std::span<const float> x, std::span<const float> weight) {
  const int size = static_cast<int>(x.size());
  float ss = 0.0f;
  for (int j = 0; j < size; j++) ss += x[j] * x[j];
  ss /= static_cast<float>(size);  // run.c: ss /= size (int converted to float)
  ss += 1e-5f;
  ss = 1.0f / sqrtf(ss);
  for (int j = 0; j < size; j++) o[j] = weight[j] * (ss * x[j]);
}

void softmax(std::span<float> x) {
  const size_t size = x.size();
  float max_val = x[0];
  for (size_t i = 1; i < size; i++) {
    if (x[i] > max_val) max_val = x[i];
  }
  float sum = 0.0f;
  for (size_t i = 0; i < size; i++) {
    x[i] = expf(x[i] - max_val);
    sum += x[i];
  }
  for (size_t i = 0; i < size; i++) x[i] /= sum;
}

}  // namespace qpu::reference
