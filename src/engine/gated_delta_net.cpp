#include "engine/gated_delta_net.h"

#include <bit>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "common/error.h"
#include "engine/elementwise.h"
#include "engine/numerics.h"
#include "engine/weight_scan.h"

namespace qpu::engine {
namespace {

void expect_size(const std::vector<float>& v, int64_t size, const std::string& name) {
  if (static_cast<int64_t>(v.size()) != size) fail("{}: expected {} values, got {}", name, size, v.size());
}

// Recurrence work (state elements touched) below which a parallel region costs more
// than it saves. Measured on the looped machine (docs/engine.md, "Cost per machine
// cycle"): its GDN mixers (16 heads of 16 x 64, at most 66,560 units per step) took the
// region at 2^14 and two threads ran a cycle in 1.8 ms against 1.1 ms for one (8.1 vs
// 2.4 ms on the attention-stage runs): between two steps the worker has gone to sleep,
// and waking it on a loaded box costs more than the ~10-50 us of work it would take.
// 2^17 keeps such layers on the calling thread; the GDN of a real Qwen3.5 (16 heads of
// 128 x 128: 2^18 in the Dense count, ~2^20 with SkipZeros) still runs in parallel.
constexpr int64_t kParallelMinState = int64_t{1} << 17;

// Steps whose recurrence took the parallel region (tests check that a shape meant to
// exercise it does).
std::atomic<int64_t> parallel_step_count{0};

// S = S + k delta^T, o = S^T q over every row (row i read right after its write).
void write_and_read_all(float* state, int64_t dk, int64_t dv, const float* k, const float* q,
                        const float* delta, float* o) {
  std::fill(o, o + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    float* row = state + i * dv;
    const float ki = k[i], qi = q[i];
#pragma omp simd  // the columns c are independent, so vectorizing them changes no result
    for (int64_t c = 0; c < dv; ++c) {
      row[c] = row[c] + ki * delta[c];
      o[c] = o[c] + row[c] * qi;
    }
  }
}

// x - x is +0 for finite x and NaN for inf and NaN.
inline int finite(float x) { return x - x == 0.0f; }

// Every scratch vector of one step, reused between steps (one set per calling thread:
// step() is called outside parallel regions, its workers only use the caller's set).
struct Scratch {
  std::vector<float> floats;
  std::vector<int32_t> rows;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

namespace delta_rule {

void dense(float* state, int64_t dk, int64_t dv, const float* k, const float* q, const float* v,
           float beta, float decay, float* delta, float* o) {
  // S = S * exp(g); kv[v] = sum_i S[i][v] * k[i]   (i ascending from +0)
  float* kv = delta;
  std::fill(kv, kv + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    float* row = state + i * dv;
    const float ki = k[i];
#pragma omp simd
    for (int64_t c = 0; c < dv; ++c) {
      row[c] = row[c] * decay;
      kv[c] = kv[c] + row[c] * ki;
    }
  }
  // delta = (v - kv_mem) * beta
  for (int64_t c = 0; c < dv; ++c) delta[c] = (v[c] - kv[c]) * beta;
  // S = S + k outer delta; o[v] = sum_i S[i][v] * q[i]   (read after the write)
  write_and_read_all(state, dk, dv, k, q, delta, o);
}

// Why the bits agree (finite state in): every left-out term is 0 * s = +-0 (s finite).
// A sum started at +0 is never -0 (a + (-a) = +0 and +0 + -0 = +0), and s + (+-0) = s
// for every s that is not -0, so kv and o keep the bits of the dense sums: their
// nonzero-multiplier terms come in the same order. The decay skip: s * 1 = s. The
// write of a row with k_i = 0 adds +-0, which changes no cell except -0 + +0 = +0.
// 0 * inf and 0 * NaN are the exceptions: they are NaN in the dense loops. A non-finite
// delta or a written row that overflows would put such a NaN into this step's state or
// output, so those cases run the dense loops (checked below, O(dv) per written row).
void skip_zeros(float* state, int64_t dk, int64_t dv, const float* k, std::span<const int32_t> k_rows,
                const float* q, std::span<const int32_t> q_rows, const float* v, float beta,
                float decay, float* delta, float* o) {
  float* kv = delta;
  std::fill(kv, kv + dv, 0.0f);
  if (decay != 1.0f) {
    size_t next = 0;
    for (int64_t i = 0; i < dk; ++i) {
      float* row = state + i * dv;
      if (next < k_rows.size() && k_rows[next] == i) {
        ++next;
        const float ki = k[i];
#pragma omp simd
        for (int64_t c = 0; c < dv; ++c) {
          row[c] = row[c] * decay;
          kv[c] = kv[c] + row[c] * ki;
        }
      } else {
#pragma omp simd
        for (int64_t c = 0; c < dv; ++c) row[c] = row[c] * decay;
      }
    }
  } else {
    for (const int32_t i : k_rows) {
      const float* row = state + i * dv;
      const float ki = k[i];
#pragma omp simd
      for (int64_t c = 0; c < dv; ++c) kv[c] = kv[c] + row[c] * ki;
    }
  }
  int delta_finite = 1;
#pragma omp simd reduction(& : delta_finite)  // elementwise, and & is exact in any order
  for (int64_t c = 0; c < dv; ++c) {
    delta[c] = (v[c] - kv[c]) * beta;
    delta_finite &= finite(delta[c]);
  }
  if (!delta_finite) {  // 0 * inf in the write of a k_i = 0 row: the dense loops
    write_and_read_all(state, dk, dv, k, q, delta, o);
    return;
  }
  int written_finite = 1;
  for (const int32_t i : k_rows) {
    float* row = state + i * dv;
    const float ki = k[i];
#pragma omp simd reduction(& : written_finite)
    for (int64_t c = 0; c < dv; ++c) {
      row[c] = row[c] + ki * delta[c];
      written_finite &= finite(row[c]);
    }
  }
  // Rows are independent, so writing every row before reading any gives the same cells;
  // the read-out still adds row i's terms in ascending i.
  std::fill(o, o + dv, 0.0f);
  if (written_finite) {
    for (const int32_t i : q_rows) {
      const float* row = state + i * dv;
      const float qi = q[i];
#pragma omp simd
      for (int64_t c = 0; c < dv; ++c) o[c] = o[c] + row[c] * qi;
    }
  } else {  // an overflowed row meets q_i = 0 in the dense read-out: 0 * inf
    for (int64_t i = 0; i < dk; ++i) {
      const float* row = state + i * dv;
      const float qi = q[i];
#pragma omp simd
      for (int64_t c = 0; c < dv; ++c) o[c] = o[c] + row[c] * qi;
    }
  }
}

int64_t nonzero_rows(const float* x, int64_t n, int32_t* rows) {
  return elementwise::kernels().nonzero_indices(x, n, rows);  // all-zero blocks skipped
}

}  // namespace delta_rule

GatedDeltaNet::GatedDeltaNet(io::LinearAttentionWeights&& w, const GatedDeltaNetShape& shape,
                             float rms_eps, const PackedMatrix::Options& options,
                             const std::string& name, bool skip_zeros, bool skip_idle_channels)
    : shape_(shape), rms_eps_(rms_eps), skip_zeros_(skip_zeros), skip_idle_channels_(skip_idle_channels) {
  build(std::move(w), options, name);
}

GatedDeltaNet::GatedDeltaNet(io::BasicLinearAttentionWeights<io::SparseMatrix>&& w, const GatedDeltaNetShape& shape,
                             float rms_eps, const PackedMatrix::Options& options, const std::string& name,
                             bool skip_zeros, bool skip_idle_channels)
    : shape_(shape), rms_eps_(rms_eps), skip_zeros_(skip_zeros), skip_idle_channels_(skip_idle_channels) {
  build(std::move(w), options, name);
}

template <class Matrix>
void GatedDeltaNet::build(io::BasicLinearAttentionWeights<Matrix>&& w, const PackedMatrix::Options& options,
                          const std::string& name) {
  const GatedDeltaNetShape& s = shape_;
  if (s.hidden <= 0 || s.num_k_heads <= 0 || s.num_v_heads <= 0 || s.k_head_dim <= 0 ||
      s.v_head_dim <= 0 || s.conv_kernel < 1 || s.num_v_heads % s.num_k_heads != 0) {
    fail("{}: invalid shape (k heads {}, v heads {}, dk {}, dv {}, kernel {})", name, s.num_k_heads,
         s.num_v_heads, s.k_head_dim, s.v_head_dim, s.conv_kernel);
  }
  // transformers: query / (head_k_dim ** 0.5) when decoding, query * head_k_dim ** -0.5 in the
  // chunked kernel; Python evaluates both in double, torch rounds the scalar to fp32.
  const auto dk = static_cast<double>(s.k_head_dim);
  q_divisor_ = static_cast<float>(std::pow(dk, 0.5));
  q_multiplier_ = static_cast<float>(std::pow(dk, -0.5));

  in_proj_qkv_ = pack_matrix(w.in_proj_qkv, s.conv_dim(), s.hidden, options, name + ".in_proj_qkv");
  in_proj_z_ = pack_matrix(w.in_proj_z, s.value_dim(), s.hidden, options, name + ".in_proj_z");
  in_proj_b_ = pack_matrix(w.in_proj_b, s.num_v_heads, s.hidden, options, name + ".in_proj_b");
  in_proj_a_ = pack_matrix(w.in_proj_a, s.num_v_heads, s.hidden, options, name + ".in_proj_a");
  out_proj_ = pack_matrix(w.out_proj, s.hidden, s.value_dim(), options, name + ".out_proj");
  // From the packed matrices: a scan of their stored values, not of the dense ones.
  const bool projections_finite = in_proj_qkv_.all_finite() && in_proj_z_.all_finite() && in_proj_b_.all_finite() &&
                                  in_proj_a_.all_finite() && out_proj_.all_finite();

  expect_size(w.conv1d, s.conv_dim() * s.conv_kernel, name + ".conv1d.weight");
  expect_size(w.dt_bias, s.num_v_heads, name + ".dt_bias");
  expect_size(w.A_log, s.num_v_heads, name + ".A_log");
  expect_size(w.norm, s.v_head_dim, name + ".norm.weight");
  conv_weight_ = std::move(w.conv1d);
  for (float v : conv_weight_) conv_taps_finite_ = conv_taps_finite_ && std::isfinite(v);
  dt_bias_ = std::move(w.dt_bias);
  norm_weight_ = std::move(w.norm);
  // transformers: -self.A_log.float().exp(), recomputed each call with the same bits.
  neg_exp_a_.resize(w.A_log.size());
  for (size_t j = 0; j < w.A_log.size(); ++j) neg_exp_a_[j] = -std::exp(w.A_log[j]);

  // An idle step's decay: step() computes exp(neg_exp_a * softplus(a + dt_bias)) with
  // a = +0 (its product), the same expression as here, so the same bits.
  bool decays_finite = true;
  idle_decay_one_ = true;
  for (int64_t j = 0; j < s.num_v_heads; ++j) {
    const float a = 0.0f;
    const float g = neg_exp_a_[j] * numerics::softplus(a + dt_bias_[j]);
    const float decay = std::exp(g);
    decays_finite = decays_finite && std::isfinite(decay);
    idle_decay_one_ = idle_decay_one_ && decay == 1.0f;
  }
  // Conv blocks whose every channel's input row is empty (a compiled layer uses a few of
  // its heads): step() leaves them out while their history is known +0.
  const int64_t blocks = conv_blocks();
  dead_blocks_.assign(static_cast<size_t>(blocks), 0);
  for (int64_t b = 0; b < blocks; ++b) {
    bool dead = true;
    for (int64_t c = b * elementwise::kBlock; c < (b + 1) * elementwise::kBlock; ++c) {
      dead = dead && in_proj_qkv_.row_always_zero(c);
    }
    dead_blocks_[static_cast<size_t>(b)] = dead ? 1 : 0;
    has_dead_blocks_ = has_dead_blocks_ || dead;
  }
  for (int64_t b = 0; b < blocks;) {
    if (dead_blocks_[static_cast<size_t>(b)] != 0) {
      ++b;
      continue;
    }
    const int64_t begin = b;
    while (b < blocks && dead_blocks_[static_cast<size_t>(b)] == 0) ++b;
    conv_live_runs_.emplace_back(begin * elementwise::kBlock, b * elementwise::kBlock);
  }
  if (blocks * elementwise::kBlock < s.conv_dim()) {  // the channels past the last block
    if (!conv_live_runs_.empty() && conv_live_runs_.back().second == blocks * elementwise::kBlock) {
      conv_live_runs_.back().second = s.conv_dim();
    } else {
      conv_live_runs_.emplace_back(blocks * elementwise::kBlock, s.conv_dim());
    }
  }

  // Dead value heads (see the header): q, k and v come out of dead conv blocks as +0
  // while those blocks are idle, z, b and a out of empty rows as +0.
  dead_heads_.assign(static_cast<size_t>(s.num_v_heads), 0);
  const auto channels_dead = [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      if (c / elementwise::kBlock >= blocks || dead_blocks_[static_cast<size_t>(c / elementwise::kBlock)] == 0) {
        return false;
      }
    }
    return true;
  };
  const bool norm_finite = weight_scan::all_finite(norm_weight_) && std::isfinite(rms_eps_) && rms_eps_ > 0.0f;
  const int64_t heads_per_key = s.num_v_heads / s.num_k_heads;
  for (int64_t j = 0; j < s.num_v_heads && skip_zeros_ && skip_idle_channels_ && norm_finite; ++j) {
    const int64_t m = j / heads_per_key;
    bool dead = channels_dead(m * s.k_head_dim, (m + 1) * s.k_head_dim) &&
                channels_dead(s.key_dim() + m * s.k_head_dim, s.key_dim() + (m + 1) * s.k_head_dim) &&
                channels_dead(2 * s.key_dim() + j * s.v_head_dim, 2 * s.key_dim() + (j + 1) * s.v_head_dim) &&
                in_proj_b_.row_always_zero(j) && in_proj_a_.row_always_zero(j);
    for (int64_t c = j * s.v_head_dim; c < (j + 1) * s.v_head_dim && dead; ++c) dead = in_proj_z_.row_always_zero(c);
    const float g = neg_exp_a_[static_cast<size_t>(j)] * numerics::softplus(0.0f + dt_bias_[static_cast<size_t>(j)]);
    dead = dead && std::exp(g) == 1.0f;  // step()'s decay at a = +0
    dead_heads_[static_cast<size_t>(j)] = dead ? 1 : 0;
    has_dead_heads_ = has_dead_heads_ || dead;
  }
  rest_heads_ = skip_zeros_ && skip_idle_channels_ && norm_finite;

  idle_output_zero_ = projections_finite && conv_taps_finite_ && weight_scan::all_finite(norm_weight_) &&
                      decays_finite && std::isfinite(rms_eps_) && rms_eps_ > 0.0f;
}

int64_t GatedDeltaNet::conv_blocks() const { return shape_.conv_dim() / elementwise::kBlock; }
int64_t GatedDeltaNet::dead_conv_blocks() const { return std::count(dead_blocks_.begin(), dead_blocks_.end(), 1); }
int64_t GatedDeltaNet::dead_value_heads() const { return std::count(dead_heads_.begin(), dead_heads_.end(), 1); }

void GatedDeltaNet::save_conv(std::span<const float> conv_state, const float* input,
                              std::span<const uint8_t> conv_zero_blocks, const StepSaves& saves) const {
  const int64_t history = shape_.conv_kernel - 1, conv_dim = shape_.conv_dim();
  const int64_t full = conv_dim / elementwise::kBlock * elementwise::kBlock;
  // conv_silu_tracked leaves a block's history alone when its taps are finite, its input is
  // all +0 bits and its history is known +0 (count at kernel-1) or all +0 bits; the plain
  // loop (no tracking) writes every channel.
  const bool tracked = skip_idle_channels_ && conv_taps_finite_ && !conv_zero_blocks.empty();
  const auto all_plus_zero = [](const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      if (std::bit_cast<uint32_t>(x[i]) != 0) return false;
    return true;
  };
  for (int64_t c = 0; c < full; c += elementwise::kBlock) {
    const int64_t b = c / elementwise::kBlock;
    const float* past = conv_state.data() + c * history;
    const int64_t values = elementwise::kBlock * history;
    if (tracked && all_plus_zero(input + c, elementwise::kBlock) &&
        (conv_zero_blocks[static_cast<size_t>(b)] >= history || all_plus_zero(past, values)))
      continue;
    std::copy(past, past + values, saves.conv + c * history);
    saves.conv_saved[b] = 1;
  }
  if (full < conv_dim) {
    std::copy(conv_state.begin() + full * history, conv_state.end(), saves.conv + full * history);
    saves.conv_saved[full / elementwise::kBlock] = 1;
  }
}

void GatedDeltaNet::step(const float* h, std::span<float> conv_state, std::span<float> recurrent_state,
                         bool first_token, float* out, std::span<uint8_t> conv_zero_blocks,
                         bool projections_zero, const uint64_t* h_blocks, const StepSaves* saves,
                         const std::vector<uint32_t>* out_words) const {
  const GatedDeltaNetShape& s = shape_;
  const int64_t conv_dim = s.conv_dim();
  const int64_t taps = s.conv_kernel;
  const int64_t history = taps - 1;
  const int64_t dk = s.k_head_dim;
  const int64_t dv = s.v_head_dim;
  const int64_t key_dim = s.key_dim(), value_dim = s.value_dim(), v_heads = s.num_v_heads;
  if (static_cast<int64_t>(conv_state.size()) != s.conv_state_size() ||
      static_cast<int64_t>(recurrent_state.size()) != s.recurrent_state_size()) {
    fail("gated delta net: state has {} conv / {} recurrent values, expected {} / {}",
         conv_state.size(), recurrent_state.size(), s.conv_state_size(), s.recurrent_state_size());
  }
  if (!conv_zero_blocks.empty() && static_cast<int64_t>(conv_zero_blocks.size()) != conv_blocks()) {
    fail("gated delta net: {} conv block counts, expected {}", conv_zero_blocks.size(), conv_blocks());
  }

  // Scratch: mixed, conv [conv_dim]; z, normed [value_dim]; b, a, beta, decay [v_heads];
  // q_scaled [key_dim]; delta and o per value head [2 * value_dim].
  Scratch& scr = scratch();
  scr.floats.resize(static_cast<size_t>(2 * conv_dim + 4 * value_dim + 4 * v_heads + key_dim));
  float* mixed = scr.floats.data();
  float* conv = mixed + conv_dim;
  float* z = conv + conv_dim;
  float* normed = z + value_dim;
  float* b = normed + value_dim;
  float* a = b + v_heads;
  float* beta = a + v_heads;
  float* decay = beta + v_heads;
  float* q_scaled = decay + v_heads;
  float* head_scratch = q_scaled + key_dim;
  const PackedMatrix::Job projections[] = {
      {&in_proj_qkv_, h, mixed}, {&in_proj_z_, h, z}, {&in_proj_b_, h, b}, {&in_proj_a_, h, a}};
  if (projections_zero) {
    std::fill(mixed, mixed + conv_dim, 0.0f);
    std::fill(z, z + value_dim, 0.0f);
    std::fill(b, b + v_heads, 0.0f);
    std::fill(a, a + v_heads, 0.0f);
  } else {
    PackedMatrix::multiply_all(projections, {h_blocks != nullptr ? h : nullptr, s.hidden, h_blocks});
  }

  // Causal depthwise conv over [previous kernel-1 inputs, this input], no bias, then
  // silu (torch_causal_conv1d_update). The sum runs over the taps left to right from +0.
  // skip_idle_channels: the same loop, blocks of all-+0 channels skipped (elementwise.h).
  // Dead blocks (no input row) whose history is known +0 (count at kernel-1): their
  // input is +0 too, so conv_silu_tracked would write +0, keep the count at the cap and
  // leave the history's bits; only the live runs are run, on the same kernel.
  if (saves != nullptr) save_conv(conv_state, mixed, conv_zero_blocks, *saves);
  bool dead_blocks_idle = false;
  if (skip_idle_channels_ && has_dead_blocks_ && conv_taps_finite_ && !conv_zero_blocks.empty() && history <= 255) {
    const auto cap = static_cast<uint8_t>(std::min<int64_t>(history, 255));
    uint8_t warm = 0;
    const uint8_t* counts = conv_zero_blocks.data();
    const uint8_t* dead = dead_blocks_.data();
#pragma omp simd reduction(| : warm)
    for (size_t blk = 0; blk < dead_blocks_.size(); ++blk) warm |= static_cast<uint8_t>(dead[blk] & (counts[blk] < cap));
    dead_blocks_idle = warm == 0;
  }
  if (dead_blocks_idle) {
    std::fill(conv, conv + conv_dim, 0.0f);
    const elementwise::Kernels& kernels = elementwise::kernels();
    for (const auto& [begin, end] : conv_live_runs_) {
      kernels.conv_silu_tracked(conv_weight_.data() + begin * taps, taps, conv_taps_finite_,
                                conv_state.data() + begin * history, mixed + begin, conv + begin, end - begin,
                                conv_zero_blocks.data() + begin / elementwise::kBlock);
    }
  } else if (skip_idle_channels_) {
    elementwise::kernels().conv_silu_tracked(conv_weight_.data(), taps, conv_taps_finite_, conv_state.data(), mixed,
                                             conv, conv_dim,
                                             conv_zero_blocks.empty() ? nullptr : conv_zero_blocks.data());
  } else {
    std::fill(conv_zero_blocks.begin(), conv_zero_blocks.end(), uint8_t{0});  // not kept here: unknown
    for (int64_t c = 0; c < conv_dim; ++c) {
      float* past = conv_state.data() + c * history;
      const float* wc = conv_weight_.data() + c * taps;
      float acc = 0.0f;
      for (int64_t t = 0; t < history; ++t) acc = acc + wc[t] * past[t];
      acc = acc + wc[history] * mixed[c];
      for (int64_t t = 0; t + 1 < history; ++t) past[t] = past[t + 1];
      if (history > 0) past[history - 1] = mixed[c];
      conv[c] = numerics::silu(acc);
    }
  }
  float* q = conv;
  float* k = conv + key_dim;
  const float* v = conv + 2 * key_dim;

  // l2norm per key head (transformers normalizes after repeat_interleave: same values).
  if (skip_idle_channels_) {  // the same operations in vectors (elementwise.h)
    for (int64_t m = 0; m < s.num_k_heads; ++m) {
      elementwise::l2norm(q + m * dk, dk);
      elementwise::l2norm(k + m * dk, dk);
    }
    if (first_token) {
      elementwise::kernels().mul(q, q_multiplier_, q_scaled, key_dim);
    } else {
      elementwise::kernels().div(q, q_divisor_, q_scaled, key_dim);
    }
  } else {
    for (int64_t m = 0; m < s.num_k_heads; ++m) {
      numerics::l2norm(q + m * dk, dk);
      numerics::l2norm(k + m * dk, dk);
    }
    for (int64_t i = 0; i < key_dim; ++i) {
      q_scaled[i] = first_token ? q[i] * q_multiplier_ : q[i] / q_divisor_;
    }
  }

  // beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias).
  for (int64_t j = 0; j < v_heads; ++j) {
    if (dead_blocks_idle && dead_heads_[static_cast<size_t>(j)] != 0) {  // b = a = +0: their exact values
      beta[j] = 0.5f;   // sigmoid(+0) = 1 / (1 + 1)
      decay[j] = 1.0f;  // checked at construction
      continue;
    }
    beta[j] = numerics::sigmoid(b[j]);
    const float g = neg_exp_a_[j] * numerics::softplus(a[j] + dt_bias_[j]);
    decay[j] = std::exp(g);
  }

  // The nonzero rows of k and q per key head (skip_zeros), and the work they leave.
  const int64_t group = v_heads / s.num_k_heads;
  int64_t work = s.recurrent_state_size();
  int32_t* k_rows = nullptr;
  int32_t* q_rows = nullptr;
  if (skip_zeros_) {
    scr.rows.resize(static_cast<size_t>(2 * key_dim + 2 * s.num_k_heads));
    k_rows = scr.rows.data();
    q_rows = k_rows + key_dim;
    int32_t* counts = q_rows + key_dim;  // [k count, q count] per key head
    work = 0;
    for (int64_t m = 0; m < s.num_k_heads; ++m) {
      counts[2 * m] = static_cast<int32_t>(delta_rule::nonzero_rows(k + m * dk, dk, k_rows + m * dk));
      counts[2 * m + 1] = static_cast<int32_t>(delta_rule::nonzero_rows(q_scaled + m * dk, dk, q_rows + m * dk));
    }
    for (int64_t j = 0; j < v_heads; ++j) {
      const int32_t* c = counts + 2 * (j / group);
      work += (decay[j] != 1.0f ? dk * dv : 0) + (2 * c[0] + c[1] + 1) * dv;
    }
  }

  // The gated delta rule, one value head per call; value head j reads key head
  // j / (v_heads / k_heads) (repeat_interleave, grouped). A head is computed whole by one
  // thread, so the thread count changes no bit.
  // With no k row, S^T k is +0 and delta = (v - (+0)) * beta: whether that is finite
  // decides whether a head at rest is written (skip_zeros' dense write) at all.
  const auto rest_delta_finite = [dv](const float* vh, float bj) {
    int all_finite = 1;
#pragma omp simd reduction(& : all_finite)  // elementwise, and & is exact in any order
    for (int64_t c = 0; c < dv; ++c) all_finite &= finite((vh[c] - 0.0f) * bj);
    return all_finite != 0;
  };
  const auto run_head = [&](int64_t j) {
    if (dead_blocks_idle && dead_heads_[static_cast<size_t>(j)] != 0) {
      // k = q = v = +0 (dead blocks at rest), decay 1, beta = sigmoid(+0): skip_zeros
      // touches no state row and gives o = +0 (the first token's q.k read-out too); then
      // y = (w * (+0 * r)) * silu(+0) = +-0 with r = rsqrt(0 / dv + eps) and w finite.
      // y is read only by out_proj, whose product is the same for +0 and -0 inputs.
      std::fill(normed + j * dv, normed + (j + 1) * dv, 0.0f);
      return;
    }
    const int64_t m = j / group;
    const float* kh = k + m * dk;
    const float* qh = q_scaled + m * dk;
    float* state = recurrent_state.data() + j * dk * dv;
    // Copies head j before its first write (a head computed whole by one thread: its slot
    // is its own).
    const auto save = [&] {
      if (saves == nullptr) return;
      std::copy(state, state + dk * dv, saves->heads + j * dk * dv);
      saves->heads_saved[j] = 1;
    };
    float* delta = head_scratch + 2 * j * dv;
    float* o = delta + dv;
    const float* zh = z + j * dv;
    float* yh = normed + j * dv;
    // A head at rest (k = q = +0, decay 1), the usual head of a compiled layer that runs:
    // skip_zeros touches no state row, its delta (v - (+0)) * beta is only tested for
    // finiteness (a non-finite one runs its dense write: tested here the same way) and
    // o = +0. Then y = (w * (+0 * r)) * silu(z); with z all +-0 and w finite that is +-0,
    // which only out_proj reads (the same product for +0 and -0): +0 is written.
    const int32_t* head_counts = skip_zeros_ ? q_rows + key_dim + 2 * m : nullptr;
    if (rest_heads_ && !first_token && head_counts[0] == 0 && head_counts[1] == 0 && decay[j] == 1.0f) {
      const float* vh = v + j * dv;
      const float bj = beta[j];
      const bool delta_finite = rest_delta_finite(vh, bj);
      if (delta_finite) {
        if (elementwise::all_zero(zh, dv)) {
          std::fill(yh, yh + dv, 0.0f);
          return;
        }
        std::fill(o, o + dv, 0.0f);  // and on to the gated norm with o = +0
      }
      if (!delta_finite) {
        save();  // the dense write
        delta_rule::skip_zeros(state, dk, dv, kh, {k_rows + m * dk, 0}, qh, {q_rows + m * dk, 0}, vh, bj, decay[j],
                               delta, o);
      }
    } else if (skip_zeros_) {
      const int32_t* counts = head_counts;
      // skip_zeros writes rows only where k_i != 0, every row when decay != 1, and every row
      // when delta = (v - S^T k) * beta is not finite; with no k row, S^T k is +0.
      if (saves != nullptr) {
        if (decay[j] != 1.0f || counts[0] > 0 || !rest_delta_finite(v + j * dv, beta[j])) save();
      }
      delta_rule::skip_zeros(state, dk, dv, kh, {k_rows + m * dk, static_cast<size_t>(counts[0])}, qh,
                             {q_rows + m * dk, static_cast<size_t>(counts[1])}, v + j * dv, beta[j],
                             decay[j], delta, o);
    } else {
      save();
      delta_rule::dense(state, dk, dv, kh, qh, v + j * dv, beta[j], decay[j], delta, o);
    }
    if (first_token) {
      // Chunked kernel with a zero initial state: (q @ k^T) * exp(0) @ (v * beta), plus
      // the zero read of the empty state.
      const float qk = dot::dot_f32(qh, kh, dk);
      for (int64_t c = 0; c < dv; ++c) o[c] = qk * delta[c];
    }

    // Qwen3_5RMSNormGated: weight * (o * rsqrt(mean(o^2) + eps)), then * silu(z).
    const float r = numerics::rsqrt(skip_idle_channels_ ? elementwise::mean_square_plus_eps(o, dv, rms_eps_)
                                                        : numerics::mean_square_plus_eps(o, dv, rms_eps_));
    if (skip_idle_channels_) {  // silu skipped on all-zero blocks of z (elementwise.h)
      elementwise::kernels().gated_norm(norm_weight_.data(), o, r, zh, yh, dv);
    } else {
      for (int64_t c = 0; c < dv; ++c) {
        yh[c] = (norm_weight_[c] * (o[c] * r)) * numerics::silu(zh[c]);
      }
    }
  };
  if (work >= kParallelMinState) {
    parallel_step_count.fetch_add(1, std::memory_order_relaxed);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < v_heads; ++j) run_head(j);
  } else {  // no region at all: not even a team of one (the if clause still enters libgomp)
    for (int64_t j = 0; j < v_heads; ++j) run_head(j);
  }

  if (out_words != nullptr) {
    out_proj_.multiply_words(normed, out, *out_words);
  } else {
    out_proj_.multiply(normed, out);
  }
}

int64_t GatedDeltaNet::parallel_steps() { return parallel_step_count.load(std::memory_order_relaxed); }

}  // namespace qpu::engine
