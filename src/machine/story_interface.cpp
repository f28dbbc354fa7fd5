#include "machine/story_interface.h"

#include <cmath>
#include <utility>

#include "common/error.h"

namespace qpu::machine {

namespace {

constexpr const char* kFormat = "qpu-story-interface-v1";

// The micro-ops a host prompt writes with: every machine has them.
const char* const kPromptOps[] = {"HDR", "DONE", "HEAD", "WSTEPS", "WPOS", "WF", "PST"};
// ... and a sampling machine these too (T, the seed's 16-bit limbs, the prompt's length).
const char* const kSamplerOps[] = {"WT", "WS.0", "WS.1", "WS.2", "WS.3", "WPLEN"};

// A JSON member of the expected type, or an error that names it.
template <typename T>
T member(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object()) fail("{}: interface: not a JSON object", where);
  const auto it = j.find(key);
  if (it == j.end()) fail("{}: interface: '{}' is missing", where, key);
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: interface: '{}' has the wrong type ({})", where, key, it->type_name());
  }
}

}  // namespace

const char* sampler_name(SamplerKind k) {
  switch (k) {
    case SamplerKind::Greedy: return "greedy";
    case SamplerKind::SampleMult: return "sample_mult";
    case SamplerKind::TopP: return "top-p";
  }
  return "?";
}

StoryInterface::StoryInterface(Fields fields, const std::string& where) : f_(std::move(fields)) {
  const auto& v = f_.values;
  if (v.jmin > v.jmax || v.jmin < -126 || v.jmax > 127 || v.first < 0)
    fail("{}: interface: value window [{}, {}] from id {} is not one the uplink has", where, v.jmin, v.jmax, v.first);
  if (f_.first_control != v.first + v.size())
    fail("{}: interface: control tokens start at {}, the {} value tokens end at {}", where, f_.first_control, v.size(),
         v.first + v.size());
  if (f_.host_vocab != f_.first_control + static_cast<int64_t>(f_.controls.size()))
    fail("{}: interface: a host vocabulary of {} ids, but {} value and {} control tokens", where, f_.host_vocab,
         f_.first_control, f_.controls.size());
  if (f_.max_positions < 1) fail("{}: interface: {} nested positions", where, f_.max_positions);
  if (f_.nested_vocab < 2) fail("{}: interface: a nested vocabulary of {}", where, f_.nested_vocab);
  if (f_.nested_seq_len < 1) fail("{}: interface: a nested seq_len of {}", where, f_.nested_seq_len);
  for (size_t c = 0; c < f_.controls.size(); ++c) {
    if (f_.controls[c].empty()) fail("{}: interface: control token {} has no name", where, c);
    if (!ids_.emplace(f_.controls[c], f_.first_control + static_cast<int64_t>(c)).second)
      fail("{}: interface: the control name '{}' repeats", where, f_.controls[c]);
  }
  auto require = [&](const std::string& name) {
    if (!ids_.count(name)) fail("{}: interface: no control token '{}'", where, name);
  };
  for (const char* n : kPromptOps) require(n);
  for (int k = 0; k < f_.nested_vocab; ++k) require("TOK." + std::to_string(k));
  if (f_.sampler != SamplerKind::Greedy) {
    for (const char* n : kSamplerOps) require(n);
    if (!(f_.min_temperature > 0 && f_.min_temperature <= f_.max_temperature && std::isfinite(f_.max_temperature)))
      fail("{}: interface: temperatures [{}, {}]", where, f_.min_temperature, f_.max_temperature);
  }
  if (f_.sampler == SamplerKind::TopP && !(f_.topp > 0.0f && f_.topp < 1.0f))
    fail("{}: interface: a top-p machine for p = {}", where, f_.topp);
  if (!f_.logit_probes.empty() && f_.logit_probes.size() != static_cast<size_t>(f_.nested_vocab))
    fail("{}: interface: {} logit probes for a vocabulary of {}", where, f_.logit_probes.size(), f_.nested_vocab);
  for (const ValueProbe& p : f_.logit_probes)
    if (p.after_sublayer < 0 || p.dim < 0) fail("{}: interface: a logit probe at ({}, {})", where, p.after_sublayer, p.dim);
}

int64_t StoryInterface::id(const std::string& name) const {
  const auto it = ids_.find(name);
  if (it == ids_.end()) fail("machine: no control token named '{}'", name);
  return it->second;
}

std::vector<int64_t> StoryInterface::value_tokens(float x) const {
  const auto parts = npu::split_parts_reference(x);
  return {f_.values.token(parts[0]), f_.values.token(parts[1]), f_.values.token(parts[2])};
}

float StoryInterface::decode(int64_t t0, int64_t t1, int64_t t2) const {
  // The INBOX's order (npu/inbox.h): p1 + p2 is exact, p0 + p2 may round when p0 carried.
  return f_.values.value(t0) + (f_.values.value(t1) + f_.values.value(t2));
}

std::vector<int64_t> StoryInterface::prompt(const std::vector<int>& nested, int steps, float temperature,
                                            uint64_t seed) const {
  if (steps < 1 || steps > f_.max_positions) fail("token machine: {} steps outside [1, {}]", steps, f_.max_positions);
  const bool sampling = f_.sampler != SamplerKind::Greedy;
  if (temperature != 0.0f && !sampling) fail("token machine: temperature {} on a greedy machine", temperature);
  if (temperature != 0.0f && !(temperature >= f_.min_temperature && temperature <= f_.max_temperature))
    fail("token machine: temperature {} outside 0 and [{}, {}] (the sampler's windows)", temperature,
         f_.min_temperature, f_.max_temperature);
  if (nested.empty() || nested[0] != 1) fail("token machine: a nested prompt starts with BOS (1)");
  if (nested.size() > static_cast<size_t>(f_.max_positions))
    fail("token machine: a prompt of {} tokens, the machine holds {} positions", nested.size(), f_.max_positions);
  std::vector<int64_t> t = {id("HDR")};
  auto write = [&](const std::string& op, float v) {
    t.push_back(id(op));
    for (int64_t x : value_tokens(v)) t.push_back(x);
  };
  write("WSTEPS", static_cast<float>(steps));
  for (size_t j = 1; j < nested.size(); ++j) {
    if (nested[j] < 0 || nested[j] >= f_.nested_vocab)
      fail("token machine: prompt token {} outside [0, {})", nested[j], f_.nested_vocab);
    write("WPOS", static_cast<float>(j));
    write("WF", static_cast<float>(nested[j] + 1));
    t.push_back(id("PST"));
  }
  if (sampling) {
    write("WT", temperature);
    for (int j = 0; j < 4; ++j) write("WS." + std::to_string(j), static_cast<float>((seed >> (16 * j)) & 0xffff));
    write("WPLEN", static_cast<float>(nested.size()));
  }
  write("WPOS", 0.0f);
  return t;
}

nlohmann::json StoryInterface::to_json() const {
  nlohmann::json probes = nlohmann::json::array();
  for (const ValueProbe& p : f_.logit_probes) probes.push_back({p.after_sublayer, p.dim});
  nlohmann::json sampler = {{"kind", sampler_name(f_.sampler)}};
  if (f_.sampler != SamplerKind::Greedy) {
    sampler["min_temperature"] = f_.min_temperature;
    sampler["max_temperature"] = f_.max_temperature;
  }
  if (f_.sampler == SamplerKind::TopP) sampler["topp"] = f_.topp;
  return {{"format", kFormat},
          {"host_vocab_size", f_.host_vocab},
          {"value_tokens", {{"first", f_.values.first}, {"jmin", f_.values.jmin}, {"jmax", f_.values.jmax}}},
          {"first_control", f_.first_control},
          {"controls", f_.controls},
          {"positions", f_.max_positions},
          {"nested_vocab", f_.nested_vocab},
          {"nested_seq_len", f_.nested_seq_len},
          {"sampler", sampler},
          {"logit_probes", probes}};
}

StoryInterface StoryInterface::from_json(const nlohmann::json& j, const std::string& where) {
  const auto format = member<std::string>(j, "format", where);
  if (format != kFormat) fail("{}: interface: format '{}', this qpu reads '{}'", where, format, kFormat);
  Fields f;
  f.host_vocab = member<int64_t>(j, "host_vocab_size", where);
  const auto values = member<nlohmann::json>(j, "value_tokens", where);
  f.values.first = member<int64_t>(values, "first", where);
  f.values.jmin = member<int>(values, "jmin", where);
  f.values.jmax = member<int>(values, "jmax", where);
  f.first_control = member<int64_t>(j, "first_control", where);
  f.controls = member<std::vector<std::string>>(j, "controls", where);
  f.max_positions = member<int>(j, "positions", where);
  f.nested_vocab = member<int>(j, "nested_vocab", where);
  f.nested_seq_len = member<int>(j, "nested_seq_len", where);
  const auto sampler = member<nlohmann::json>(j, "sampler", where);
  const auto kind = member<std::string>(sampler, "kind", where);
  if (kind == "greedy") {
    f.sampler = SamplerKind::Greedy;
  } else if (kind == "sample_mult") {
    f.sampler = SamplerKind::SampleMult;
  } else if (kind == "top-p") {
    f.sampler = SamplerKind::TopP;
  } else {
    fail("{}: interface: sampler '{}' (greedy, sample_mult or top-p)", where, kind);
  }
  if (f.sampler != SamplerKind::Greedy) {
    f.min_temperature = member<float>(sampler, "min_temperature", where);
    f.max_temperature = member<float>(sampler, "max_temperature", where);
  }
  if (f.sampler == SamplerKind::TopP) f.topp = member<float>(sampler, "topp", where);
  for (const auto& p : member<std::vector<std::vector<int64_t>>>(j, "logit_probes", where)) {
    if (p.size() != 2) fail("{}: interface: a logit probe of {} numbers, not (sublayer, dim)", where, p.size());
    f.logit_probes.push_back(ValueProbe{p[0], p[1]});
  }
  return StoryInterface(std::move(f), where);
}

}  // namespace qpu::machine
