#include "reference/transformer.h"

#include <math.h>  // glibc's powf/cosf/sinf/sqrtf/expf: the reference is glibc's libm

#include <algorithm>
#include <cstddef>

#include "common/error.h"
#include "reference/run_c_ops.h"

namespace qpu::reference {

Transformer::Transformer(const Llama2Checkpoint& checkpoint)
    : config_(checkpoint.config()), w_(checkpoint.weights()) {
  const size_t dim = config_.dim, hidden = config_.hidden_dim;
  x_.resize(dim);
  xb_.resize(dim);
  xb2_.resize(dim);
  hb_.resize(hidden);
  hb2_.resize(hidden);
  q_.resize(dim);
  att_.resize(static_cast<size_t>(config_.n_heads) * config_.seq_len);
  logits_.resize(config_.vocab_size);
  size_t cache = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(config_.n_layers) * config_.seq_len,
                             static_cast<size_t>(config_.kv_dim()), &cache)) {
    fail("llama2 transformer: key/value cache size overflows");
  }
  key_cache_.resize(cache);
  value_cache_.resize(cache);
}

std::span<float> Transformer::forward(int token, int pos) {
  const Llama2Config& p = config_;
  if (token < 0 || token >= p.vocab_size)
    fail("llama2 forward: token {} is outside the vocabulary [0, {})", token, p.vocab_size);
  if (pos < 0 || pos >= p.seq_len)
    fail("llama2 forward: position {} is outside [0, seq_len = {})", pos, p.seq_len);

  const int dim = p.dim;
  const int kv_dim = p.kv_dim();
  const int kv_mul = p.kv_mul();
  const int hidden_dim = p.hidden_dim;
  const int head_size = p.head_size();
  const size_t udim = dim, ukv = kv_dim, uhidden = hidden_dim, useq = p.seq_len;
  float* x = x_.data();
  // Tracing costs one pointer test per record point when off. `tr` reports a buffer.
  TraceObserver* const trace = trace_;
  const auto tr = [trace, pos](TraceKind kind, int layer, int head, std::span<const float> values) {
    trace->record(kind, pos, layer, head, values);
  };
  if (trace) {
    const float token_value = static_cast<float>(token);
    trace->record(TraceKind::token_in, pos, -1, -1, {&token_value, 1});
  }

  const auto emb = w_.token_embedding.subspan(static_cast<size_t>(token) * udim, udim);
  std::copy(emb.begin(), emb.end(), x_.begin());

  for (size_t l = 0; l < static_cast<size_t>(p.n_layers); l++) {
    const int li = static_cast<int>(l);  // the layer as trace records name it
    // attention rmsnorm, then q, k, v (k and v straight into this position's cache row)
    if (trace) {
      tr(TraceKind::x_in, li, -1, x_);
      trace_rmsnorm_pieces(*trace, TraceKind::att_rms_sq, pos, li, x_);
    }
    rmsnorm(xb_, x_, w_.rms_att.subspan(l * udim, udim));
    const size_t loff = l * useq * ukv;
    float* k = key_cache_.data() + loff + static_cast<size_t>(pos) * ukv;
    float* v = value_cache_.data() + loff + static_cast<size_t>(pos) * ukv;
    matmul(q_, xb_, w_.wq.subspan(l * udim * udim, udim * udim), dim, dim);
    matmul({k, ukv}, xb_, w_.wk.subspan(l * udim * ukv, udim * ukv), dim, kv_dim);
    matmul({v, ukv}, xb_, w_.wv.subspan(l * udim * ukv, udim * ukv), dim, kv_dim);
    if (trace) {
      tr(TraceKind::att_rms_out, li, -1, xb_);
      tr(TraceKind::q, li, -1, q_);
      tr(TraceKind::k, li, -1, {k, ukv});
      tr(TraceKind::v, li, -1, {v, ukv});
      trace_rope_pieces(*trace, pos, li, dim, head_size);
    }

    // RoPE, recomputed in every layer exactly as run.c does (libm powf/cosf/sinf).
    for (int i = 0; i < dim; i += 2) {
      const int head_dim = i % head_size;
      const float freq = 1.0f / powf(10000.0f, static_cast<float>(head_dim) / static_cast<float>(head_size));
      const float val = static_cast<float>(pos) * freq;
      const float fcr = cosf(val);
      const float fci = sinf(val);
      const int rotn = i < kv_dim ? 2 : 1;  // q always, k only inside kv_dim
      for (int r = 0; r < rotn; r++) {
        float* vec = r == 0 ? q_.data() : k;
        const float v0 = vec[i];
        const float v1 = vec[i + 1];
        vec[i] = v0 * fcr - v1 * fci;
        vec[i + 1] = v0 * fci + v1 * fcr;
      }
    }
    if (trace) {
      tr(TraceKind::q_rope, li, -1, q_);
      tr(TraceKind::k_rope, li, -1, {k, ukv});
    }

    // multi-head attention; query head h reads kv head h / kv_mul
    for (int h = 0; h < p.n_heads; h++) {
      const float* q = q_.data() + static_cast<size_t>(h) * head_size;
      float* att = att_.data() + static_cast<size_t>(h) * useq;
      const size_t kv_off = static_cast<size_t>(h / kv_mul) * head_size;
      for (int t = 0; t <= pos; t++) {
        const float* kt = key_cache_.data() + loff + static_cast<size_t>(t) * ukv + kv_off;
        float score = 0.0f;
        for (int i = 0; i < head_size; i++) score += q[i] * kt[i];
        score /= sqrtf(static_cast<float>(head_size));
        att[t] = score;
      }
      const std::span<float> scores{att, static_cast<size_t>(pos) + 1};
      if (trace) {
        trace_attention_raw(*trace, pos, li, h, {q, static_cast<size_t>(head_size)},
                            key_cache_.data() + loff + kv_off, ukv);
        tr(TraceKind::att_scaled, li, h, scores);
        trace_softmax_pieces(*trace, TraceKind::att_max, pos, li, h, scores);
      }
      softmax(scores);
      if (trace) tr(TraceKind::att_prob, li, h, scores);
      float* xb = xb_.data() + static_cast<size_t>(h) * head_size;
      std::fill(xb, xb + head_size, 0.0f);
      for (int t = 0; t <= pos; t++) {
        const float* vt = value_cache_.data() + loff + static_cast<size_t>(t) * ukv + kv_off;
        const float a = att[t];
        for (int i = 0; i < head_size; i++) xb[i] += a * vt[i];
      }
      if (trace) tr(TraceKind::att_out, li, h, {xb, static_cast<size_t>(head_size)});
    }

    // output projection and residual
    matmul(xb2_, xb_, w_.wo.subspan(l * udim * udim, udim * udim), dim, dim);
    for (int i = 0; i < dim; i++) x[i] += xb2_[i];
    if (trace) {
      tr(TraceKind::wo_out, li, -1, xb2_);
      tr(TraceKind::x_att_res, li, -1, x_);
      trace_rmsnorm_pieces(*trace, TraceKind::ffn_rms_sq, pos, li, x_);
    }

    // SwiGLU feed-forward: w2(silu(w1 x) * w3 x), silu(v) = v * (1 / (1 + expf(-v)))
    rmsnorm(xb_, x_, w_.rms_ffn.subspan(l * udim, udim));
    matmul(hb_, xb_, w_.w1.subspan(l * udim * uhidden, udim * uhidden), dim, hidden_dim);
    matmul(hb2_, xb_, w_.w3.subspan(l * udim * uhidden, udim * uhidden), dim, hidden_dim);
    if (trace) {
      tr(TraceKind::ffn_rms_out, li, -1, xb_);
      tr(TraceKind::hb, li, -1, hb_);
      tr(TraceKind::hb2, li, -1, hb2_);
      trace_silu_pieces(*trace, pos, li, hb_);
    }
    for (int i = 0; i < hidden_dim; i++) {
      float val = hb_[i];
      val *= (1.0f / (1.0f + expf(-val)));
      val *= hb2_[i];
      hb_[i] = val;
    }
    matmul(xb_, hb_, w_.w2.subspan(l * udim * uhidden, udim * uhidden), hidden_dim, dim);
    for (int i = 0; i < dim; i++) x[i] += xb_[i];
    if (trace) {
      tr(TraceKind::ffn_prod, li, -1, hb_);
      tr(TraceKind::w2_out, li, -1, xb_);
      tr(TraceKind::x_ffn_res, li, -1, x_);
    }
  }

  if (trace) trace_rmsnorm_pieces(*trace, TraceKind::final_rms_sq, pos, -1, x_);
  rmsnorm(x_, x_, w_.rms_final);  // in place, as run.c
  matmul(logits_, x_, w_.wcls, dim, p.vocab_size);
  if (trace) {
    tr(TraceKind::final_rms_out, -1, -1, x_);
    tr(TraceKind::logits, -1, -1, logits_);
  }
  return logits_;
}

}  // namespace qpu::reference
