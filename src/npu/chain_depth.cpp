#include "npu/chain_depth.h"

#include <math.h>  // glibc's expf/sqrtf/powf/cosf/sinf, as the reference

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace qpu::npu {

// A float and the depths of the chain that produced it.
struct ChainShadow::D {
  float v = 0.0f;
  int c = 0;
  double s = 0;
};

namespace {

using D = ChainShadow::D;

struct Ops {
  const ChainCosts& k;
  D mul(D a, D b) const { return {a.v * b.v, std::max(a.c, b.c) + 1, std::max(a.s, b.s) + k.mul}; }
  D add(D a, D b) const { return {a.v + b.v, std::max(a.c, b.c) + 1, std::max(a.s, b.s) + k.add}; }
  D sub(D a, D b) const { return {a.v - b.v, std::max(a.c, b.c) + 1, std::max(a.s, b.s) + k.add}; }
  // acc += p inside an accumulation loop (three such adds per fused sublayer).
  D acc(D a, D p) const { return {a.v + p.v, std::max(a.c, p.c) + 1, std::max(a.s, p.s) + k.add_in_loop}; }
  D div(D a, D b, bool constant_divisor) const {
    return {a.v / b.v, std::max(a.c, b.c) + 1, std::max(a.s, b.s) + (constant_divisor ? k.divide_const : k.divide)};
  }
  D sqrt(D a) const { return {sqrtf(a.v), a.c + 1, a.s + k.sqrt}; }
  D exp(D a) const { return {expf(a.v), a.c + k.expf_roundings, a.s + k.expf}; }
};

D constant(float v) { return {v, 0, 0}; }

// val = 0; for j: val += w[j] * x[j]  (constant weights)
D dot(const Ops& o, const float* w, const std::vector<D>& x) {
  D val = constant(0.0f);
  for (size_t j = 0; j < x.size(); ++j) val = o.acc(val, o.mul(constant(w[j]), x[j]));
  return val;
}

std::vector<D> matmul(const Ops& o, const std::vector<D>& x, std::span<const float> w, int d) {
  std::vector<D> out(static_cast<size_t>(d));
  for (size_t i = 0; i < out.size(); ++i) out[i] = dot(o, &w[i * x.size()], x);
  return out;
}

std::vector<D> rmsnorm(const Ops& o, const std::vector<D>& x, std::span<const float> weight) {
  D ss = constant(0.0f);
  for (const D& xi : x) ss = o.acc(ss, o.mul(xi, xi));
  // ss /= 64.0f: a division in C (one rounding, exact here), a power-of-two scaling
  // (one product) on the NPU.
  ss = D{ss.v / static_cast<float>(x.size()), ss.c + 1, ss.s + o.k.mul};
  ss = o.add(ss, constant(1e-5f));
  ss = o.div(constant(1.0f), o.sqrt(ss), false);
  std::vector<D> out(x.size());
  for (size_t j = 0; j < x.size(); ++j) out[j] = o.mul(constant(weight[j]), o.mul(ss, x[j]));
  return out;
}

void softmax(const Ops& o, std::vector<D>& x) {
  // The max scan rounds nothing; on the NPU it is a tree of compares.
  D mx = x[0];
  int c = x[0].c;
  double s = x[0].s;
  for (const D& xi : x) {
    if (xi.v > mx.v) mx.v = xi.v;
    c = std::max(c, xi.c);
    s = std::max(s, xi.s);
  }
  mx.c = c;
  mx.s = s + o.k.compare_level * std::ceil(std::log2(static_cast<double>(x.size())));
  D sum = constant(0.0f);
  for (D& xi : x) {
    xi = o.exp(o.sub(xi, mx));
    sum = o.acc(sum, xi);
  }
  for (D& xi : x) xi = o.div(xi, sum, false);
}

}  // namespace

ChainShadow::ChainShadow(const reference::Llama2Checkpoint& checkpoint, ChainCosts costs)
    : ckpt_(checkpoint), costs_(costs) {
  const auto& p = ckpt_.config();
  const size_t cache = static_cast<size_t>(p.n_layers) * p.seq_len * p.kv_dim();
  key_cache_.assign(cache, 0.0f);
  value_cache_.assign(cache, 0.0f);
}

ChainDepth ChainShadow::forward(int token, int pos, std::vector<float>& logits) {
  const auto& p = ckpt_.config();
  const auto w = ckpt_.weights();
  if (token < 0 || token >= p.vocab_size || pos < 0 || pos >= p.seq_len)
    fail("chain shadow: token {} at position {} out of range", token, pos);
  const Ops o{costs_};
  const size_t dim = p.dim, kv_dim = p.kv_dim(), hidden = p.hidden_dim, hs = p.head_size(), seq = p.seq_len;
  std::vector<D> x(dim);
  for (size_t i = 0; i < dim; ++i) x[i] = constant(w.token_embedding[static_cast<size_t>(token) * dim + i]);

  for (size_t l = 0; l < static_cast<size_t>(p.n_layers); ++l) {
    std::vector<D> xb = rmsnorm(o, x, w.rms_att.subspan(l * dim, dim));
    std::vector<D> q = matmul(o, xb, w.wq.subspan(l * dim * dim, dim * dim), p.dim);
    std::vector<D> k = matmul(o, xb, w.wk.subspan(l * dim * kv_dim, dim * kv_dim), p.kv_dim());
    std::vector<D> v = matmul(o, xb, w.wv.subspan(l * dim * kv_dim, dim * kv_dim), p.kv_dim());
    for (size_t i = 0; i < dim; i += 2) {
      const size_t head_dim = i % hs;
      const float freq = 1.0f / powf(10000.0f, static_cast<float>(head_dim) / static_cast<float>(hs));
      const float val = static_cast<float>(pos) * freq;
      const D fcr = constant(cosf(val)), fci = constant(sinf(val));  // compile-time constants per position
      for (int r = 0; r < (i < kv_dim ? 2 : 1); ++r) {
        std::vector<D>& vec = r == 0 ? q : k;
        const D v0 = vec[i], v1 = vec[i + 1];
        vec[i] = o.sub(o.mul(v0, fcr), o.mul(v1, fci));
        vec[i + 1] = o.add(o.mul(v0, fci), o.mul(v1, fcr));
      }
    }
    const size_t loff = l * seq * kv_dim;
    for (size_t i = 0; i < kv_dim; ++i) {
      key_cache_[loff + static_cast<size_t>(pos) * kv_dim + i] = k[i].v;
      value_cache_[loff + static_cast<size_t>(pos) * kv_dim + i] = v[i].v;
    }
    // A cached row of an earlier position was computed by an earlier nested token: depth 0.
    auto cached = [&](const std::vector<float>& cache, const std::vector<D>& now, size_t t, size_t i) {
      return t == static_cast<size_t>(pos) ? now[i] : constant(cache[loff + t * kv_dim + i]);
    };
    std::vector<D> att_out(dim);
    for (size_t h = 0; h < static_cast<size_t>(p.n_heads); ++h) {
      const size_t kv_off = (h / static_cast<size_t>(p.kv_mul())) * hs;
      std::vector<D> att(static_cast<size_t>(pos) + 1);
      for (size_t t = 0; t < att.size(); ++t) {
        D score = constant(0.0f);
        for (size_t i = 0; i < hs; ++i) score = o.acc(score, o.mul(q[h * hs + i], cached(key_cache_, k, t, kv_off + i)));
        att[t] = o.div(score, constant(sqrtf(static_cast<float>(hs))), true);
      }
      softmax(o, att);
      for (size_t i = 0; i < hs; ++i) {
        D acc = constant(0.0f);
        for (size_t t = 0; t < att.size(); ++t) acc = o.acc(acc, o.mul(att[t], cached(value_cache_, v, t, kv_off + i)));
        att_out[h * hs + i] = acc;
      }
    }
    std::vector<D> xb2 = matmul(o, att_out, w.wo.subspan(l * dim * dim, dim * dim), p.dim);
    for (size_t i = 0; i < dim; ++i) x[i] = o.add(x[i], xb2[i]);
    xb = rmsnorm(o, x, w.rms_ffn.subspan(l * dim, dim));
    std::vector<D> hb = matmul(o, xb, w.w1.subspan(l * dim * hidden, dim * hidden), p.hidden_dim);
    const std::vector<D> hb2 = matmul(o, xb, w.w3.subspan(l * dim * hidden, dim * hidden), p.hidden_dim);
    for (size_t i = 0; i < hidden; ++i) {
      D val = hb[i];
      const D e = o.exp(D{-val.v, val.c, val.s});  // negation is exact (a sign flip in the weights)
      val = o.mul(val, o.div(constant(1.0f), o.add(constant(1.0f), e), false));
      hb[i] = o.mul(val, hb2[i]);
    }
    const std::vector<D> ffn = matmul(o, hb, w.w2.subspan(l * dim * hidden, dim * hidden), p.dim);
    for (size_t i = 0; i < dim; ++i) x[i] = o.add(x[i], ffn[i]);
  }
  x = rmsnorm(o, x, w.rms_final);
  const std::vector<D> out = matmul(o, x, w.wcls, p.vocab_size);
  ChainDepth d;
  logits.resize(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    logits[i] = out[i].v;
    d.c_roundings = std::max(d.c_roundings, out[i].c);
    d.sublayers = std::max(d.sublayers, out[i].s);
  }
  return d;
}

}  // namespace qpu::npu
