#include "machine/control_vocab.h"

#include <algorithm>

#include "common/error.h"

namespace qpu::machine {

std::string control_family(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] >= '0' && name[i] <= '9') {
      while (i + 1 < name.size() && name[i + 1] >= '0' && name[i + 1] <= '9') ++i;
      out += '#';
    } else {
      out += name[i];
    }
  }
  return out;
}

int64_t ControlVocab::id(int64_t c) const {
  if (c < 0 || c >= count) fail("machine: no control token {} (there are {})", c, count);
  return first + c;
}

int64_t ControlVocab::index(int64_t t) const {
  if (!contains(t)) fail("machine: token {} is not a control token [{}, {})", t, first, first + count);
  return t - first;
}

std::vector<compiler::ValueId> SignatureFeatures::all() const {
  std::vector<compiler::ValueId> v = group;
  v.insert(v.end(), member.begin(), member.end());
  return v;
}

std::vector<std::pair<compiler::ValueId, float>> SignatureFeatures::naming(const ControlVocab& vocab,
                                                                           int64_t c) const {
  static_cast<void>(vocab.id(c));  // range check
  return {{group[static_cast<size_t>(c / vocab.group_size)], 1.0f},
          {member[static_cast<size_t>(c % vocab.group_size)], 1.0f}};
}

int64_t signature_group_size(int64_t count) {
  int64_t g = 1;
  while (g * g < count) ++g;
  return g;
}

SignatureFeatures signature_features(compiler::Program& p, const ControlVocab& vocab, const char* name) {
  SignatureFeatures f;
  f.group = p.values(std::string(name) + ".group", static_cast<int>(vocab.groups()));
  f.member = p.values(std::string(name) + ".member", static_cast<int>(vocab.group_size));
  return f;
}

namespace {

int bits_for(int64_t n) {  // bits of the integers 0 .. n - 1
  int b = 1;
  while ((int64_t{1} << b) < n) ++b;
  return b;
}

}  // namespace

std::vector<compiler::ValueId> SuccessorCode::all() const {
  std::vector<compiler::ValueId> v = {named};
  v.insert(v.end(), group_bits.begin(), group_bits.end());
  v.insert(v.end(), member_bits.begin(), member_bits.end());
  return v;
}

std::vector<std::pair<compiler::ValueId, float>> SuccessorCode::naming(const ControlVocab& vocab, int64_t c) const {
  static_cast<void>(vocab.id(c));  // range check
  std::vector<std::pair<compiler::ValueId, float>> on = {{named, 1.0f}};
  const int64_t g = c / vocab.group_size, m = c % vocab.group_size;
  for (size_t i = 0; i < group_bits.size(); ++i)
    if ((g >> i) & 1) on.push_back({group_bits[i], 1.0f});
  for (size_t i = 0; i < member_bits.size(); ++i)
    if ((m >> i) & 1) on.push_back({member_bits[i], 1.0f});
  return on;
}

SuccessorCode successor_code(compiler::Program& p, const ControlVocab& vocab, const char* name) {
  SuccessorCode c;
  c.named = p.value(std::string(name) + ".named");
  c.group_bits = p.values(std::string(name) + ".group_bit", bits_for(vocab.groups()));
  c.member_bits = p.values(std::string(name) + ".member_bit", bits_for(vocab.group_size));
  return c;
}

void decode_successor(compiler::Program& p, const SuccessorCode& code, const SignatureFeatures& into,
                      const ControlVocab& vocab, const std::string& label) {
  if (into.group.size() != static_cast<size_t>(vocab.groups()) || into.member.size() != static_cast<size_t>(vocab.group_size))
    fail("decode_successor: {} group and {} member features for {} groups of {}", into.group.size(), into.member.size(),
         vocab.groups(), vocab.group_size);
  constexpr float kOn = 128.0f;  // silu(128) = 128 exactly
  std::vector<compiler::Neuron> ns;
  auto one_hot = [&](const std::vector<compiler::ValueId>& bits, const std::vector<compiler::ValueId>& features) {
    for (size_t k = 0; k < features.size(); ++k) {
      compiler::Lin gate;
      int ones = 0;
      for (size_t i = 0; i < bits.size(); ++i) {
        const bool one = (k >> i) & 1;
        ones += one;
        gate.terms.push_back({bits[i], one ? kOn : -kOn});
      }
      if (ones != 1) gate.terms.push_back({code.named, kOn * static_cast<float>(1 - ones)});
      ns.push_back(compiler::Neuron{gate, compiler::Lin{{{code.named, 1.0f / kOn}}}, {{features[k], 1.0f}}});
    }
  };
  one_hot(code.group_bits, into.group);
  one_hot(code.member_bits, into.member);
  p.mlp(label, std::move(ns));
}

void install_control_head(io::Qwen35Weights& w, const compiler::Allocation& alloc, const SignatureFeatures& f,
                          const ControlVocab& vocab) {
  const int64_t H = w.config.hidden_size, V = w.config.vocab_size;
  if (w.lm_head.empty()) fail("machine: the checkpoint's LM head is tied to the embedding");
  if (vocab.first < 0 || vocab.first + vocab.count > V)
    fail("machine: control tokens [{}, {}) outside the vocabulary of {}", vocab.first, vocab.first + vocab.count, V);
  if (f.group.size() != static_cast<size_t>(vocab.groups()) || f.member.size() != static_cast<size_t>(vocab.group_size))
    fail("machine: signature features for another control vocabulary");
  constexpr float kGroup = 0x1p20f, kMember = 0x1p10f;
  for (int64_t c = 0; c < vocab.count; ++c) {
    const int64_t t = vocab.id(c);
    std::fill_n(w.lm_head.begin() + t * H, H, 0.0f);
    w.lm_head[static_cast<size_t>(t * H + alloc.dim(f.group[static_cast<size_t>(c / vocab.group_size)]))] = kGroup;
    w.lm_head[static_cast<size_t>(t * H + alloc.dim(f.member[static_cast<size_t>(c % vocab.group_size)]))] = kMember;
  }
}

}  // namespace qpu::machine
