#include "reference/trace.h"

#include <math.h>  // glibc's expf/sqrtf/powf/cosf/sinf, exactly the calls run.c makes

#include <algorithm>
#include <array>
#include <vector>

#include "common/error.h"
#include "reference/sampler.h"

namespace qpu::reference {
namespace {

constexpr std::array kKinds = {
#define QPU_TRACE_INFO(id, name, scope, count, is_token) \
  TraceKindInfo{TraceKind::name, #name, TraceScope::scope, TraceCount::count, is_token},
    QPU_TRACE_KINDS(QPU_TRACE_INFO)
#undef QPU_TRACE_INFO
};

// Ids are 1..N without gaps, so an id indexes the table directly.
constexpr bool ids_are_dense() {
  for (size_t i = 0; i < kKinds.size(); i++) {
    if (static_cast<uint32_t>(kKinds[i].kind) != i + 1) return false;
  }
  return true;
}
static_assert(ids_are_dense(), "trace kind ids must be 1, 2, 3, ... in table order");

TraceKind next_kind(TraceKind kind, uint32_t steps) {
  return static_cast<TraceKind>(static_cast<uint32_t>(kind) + steps);
}

}  // namespace

std::span<const TraceKindInfo> trace_kinds() { return kKinds; }

const TraceKindInfo* find_trace_kind(uint32_t id) {
  if (id == 0 || id > kKinds.size()) return nullptr;
  return &kKinds[id - 1];
}

const TraceKindInfo& trace_kind_info(TraceKind kind) {
  const TraceKindInfo* info = find_trace_kind(static_cast<uint32_t>(kind));
  if (info == nullptr) fail("trace kind {} does not exist", static_cast<uint32_t>(kind));
  return *info;
}

size_t trace_count(TraceKind kind, const Llama2Config& config, int pos) {
  switch (trace_kind_info(kind).count) {
    case TraceCount::kOne: return 1;
    case TraceCount::kTwo: return 2;
    case TraceCount::kDim: return static_cast<size_t>(config.dim);
    case TraceCount::kKvDim: return static_cast<size_t>(config.kv_dim());
    case TraceCount::kHalfDim: return static_cast<size_t>(config.dim) / 2;
    case TraceCount::kHidden: return static_cast<size_t>(config.hidden_dim);
    case TraceCount::kHeadSize: return static_cast<size_t>(config.head_size());
    case TraceCount::kPositions: return static_cast<size_t>(pos) + 1;
    case TraceCount::kVocab: return static_cast<size_t>(config.vocab_size);
  }
  return 0;
}

void trace_rmsnorm_pieces(TraceObserver& observer, TraceKind first, int pos, int layer,
                          std::span<const float> x) {
  const int size = static_cast<int>(x.size());
  std::vector<float> sq(x.size()), scaled(x.size());
  float ss = 0.0f;
  for (int j = 0; j < size; j++) {
    sq[j] = x[j] * x[j];
    ss += sq[j];
  }
  const float sum = ss;
  const float mean = sum / static_cast<float>(size);
  const float eps = mean + 1e-5f;
  const float root = sqrtf(eps);
  const float inv = 1.0f / root;
  for (int j = 0; j < size; j++) scaled[j] = inv * x[j];
  observer.record(first, pos, layer, -1, sq);
  observer.record(next_kind(first, 1), pos, layer, -1, {&sum, 1});
  observer.record(next_kind(first, 2), pos, layer, -1, {&mean, 1});
  observer.record(next_kind(first, 3), pos, layer, -1, {&eps, 1});
  observer.record(next_kind(first, 4), pos, layer, -1, {&root, 1});
  observer.record(next_kind(first, 5), pos, layer, -1, {&inv, 1});
  observer.record(next_kind(first, 6), pos, layer, -1, scaled);
}

void trace_rope_pieces(TraceObserver& observer, int pos, int layer, int dim, int head_size) {
  const size_t half = static_cast<size_t>(dim) / 2;
  std::vector<float> freq(half), angle(half), c(half), s(half);
  for (int i = 0; i < dim; i += 2) {
    const size_t k = static_cast<size_t>(i) / 2;
    const int head_dim = i % head_size;
    freq[k] = 1.0f / powf(10000.0f, static_cast<float>(head_dim) / static_cast<float>(head_size));
    angle[k] = static_cast<float>(pos) * freq[k];
    c[k] = cosf(angle[k]);
    s[k] = sinf(angle[k]);
  }
  observer.record(TraceKind::rope_freq, pos, layer, -1, freq);
  observer.record(TraceKind::rope_angle, pos, layer, -1, angle);
  observer.record(TraceKind::rope_cos, pos, layer, -1, c);
  observer.record(TraceKind::rope_sin, pos, layer, -1, s);
}

void trace_attention_raw(TraceObserver& observer, int pos, int layer, int head, std::span<const float> q,
                         const float* keys, size_t stride) {
  std::vector<float> raw(static_cast<size_t>(pos) + 1);
  for (size_t t = 0; t < raw.size(); t++) {
    const float* kt = keys + t * stride;
    float score = 0.0f;
    for (size_t i = 0; i < q.size(); i++) score += q[i] * kt[i];
    raw[t] = score;
  }
  observer.record(TraceKind::att_raw, pos, layer, head, raw);
}

void trace_softmax_pieces(TraceObserver& observer, TraceKind max_kind, int pos, int layer, int head,
                          std::span<const float> x) {
  float max_val = x[0];
  for (size_t i = 1; i < x.size(); i++) {
    if (x[i] > max_val) max_val = x[i];
  }
  std::vector<float> shifted(x.size()), e(x.size());
  float sum = 0.0f;
  for (size_t i = 0; i < x.size(); i++) {
    shifted[i] = x[i] - max_val;
    e[i] = expf(shifted[i]);
    sum += e[i];
  }
  observer.record(max_kind, pos, layer, head, {&max_val, 1});
  observer.record(next_kind(max_kind, 1), pos, layer, head, shifted);
  observer.record(next_kind(max_kind, 2), pos, layer, head, e);
  observer.record(next_kind(max_kind, 3), pos, layer, head, {&sum, 1});
}

void trace_silu_pieces(TraceObserver& observer, int pos, int layer, std::span<const float> hb) {
  const size_t n = hb.size();
  std::vector<float> e(n), denom(n), recip(n), silu(n);
  for (size_t i = 0; i < n; i++) {
    e[i] = expf(-hb[i]);
    denom[i] = 1.0f + e[i];
    recip[i] = 1.0f / denom[i];
    silu[i] = hb[i] * recip[i];
  }
  observer.record(TraceKind::silu_exp, pos, layer, -1, e);
  observer.record(TraceKind::silu_denom, pos, layer, -1, denom);
  observer.record(TraceKind::silu_recip, pos, layer, -1, recip);
  observer.record(TraceKind::silu, pos, layer, -1, silu);
}

void trace_sampler(TraceObserver& observer, int pos, std::span<const float> logits, float temperature,
                   float topp, uint64_t rng_state, std::span<const float> probabilities) {
  std::vector<float> scaled(logits.begin(), logits.end());
  for (float& l : scaled) l /= temperature;
  observer.record(TraceKind::sample_scaled, pos, -1, -1, scaled);
  trace_softmax_pieces(observer, TraceKind::sample_max, pos, -1, -1, scaled);
  observer.record(TraceKind::sample_prob, pos, -1, -1, probabilities);
  const float coin = random_f32(rng_state);
  observer.record(TraceKind::sample_coin, pos, -1, -1, {&coin, 1});
  if (topp <= 0 || topp >= 1) return;

  // sample_topp's cut, step for step (see sampler.cpp).
  const int n = static_cast<int>(probabilities.size());
  const float cutoff = (1.0f - topp) / static_cast<float>(n - 1);
  std::vector<float> kept;
  for (float p : probabilities) {
    if (p >= cutoff) kept.push_back(p);
  }
  std::stable_sort(kept.begin(), kept.end(), [](float a, float b) { return a > b; });
  float cumulative = 0.0f;
  for (float p : kept) {
    cumulative += p;
    if (cumulative > topp) break;
  }
  const float r = coin * cumulative;
  observer.record(TraceKind::topp_cutoff, pos, -1, -1, {&cutoff, 1});
  observer.record(TraceKind::topp_cumulative, pos, -1, -1, {&cumulative, 1});
  observer.record(TraceKind::topp_r, pos, -1, -1, {&r, 1});
}

}  // namespace qpu::reference
