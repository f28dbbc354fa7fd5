#include "runner/story_stream.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <memory>
#include <set>
#include <string_view>

#include "common/error.h"
#include "engine/elementwise.h"
#include "runner/prompt_lookup.h"

namespace qpu::runner {

namespace {

// A non-negative decimal integer filling all of `s`, else -1.
int parse_int(std::string_view s) {
  int v = -1;
  if (s.empty()) return -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() ? v : -1;
}

// "PREFIX(l).i" -> (l, i); false for any other shape.
bool parse_layer_element(std::string_view name, std::string_view prefix, int& layer, int& element) {
  if (!name.starts_with(prefix) || name.size() <= prefix.size() || name[prefix.size()] != '(') return false;
  name.remove_prefix(prefix.size() + 1);
  const size_t close = name.find(").");
  if (close == std::string_view::npos) return false;
  layer = parse_int(name.substr(0, close));
  element = parse_int(name.substr(close + 2));
  return layer >= 0 && element >= 0;
}

// The machine's signatures (machine/control_vocab.h, npu/uplink.h): the winner scores
// exactly 2^20 + 2^10 (a control token) or 2^20 + 2^3 (a value token), and it alone
// scores above 2^20. Anything else means the host's argmax was not decided by design.
// above: how many logits score above 2^20.
bool unambiguous(float best, int64_t above) {
  return (best == 0x1p20f + 0x1p10f || best == 0x1p20f + 0x1p3f) && above == 1;
}

}  // namespace

StreamVocabulary StreamVocabulary::of(const machine::StoryInterface& m) {
  StreamVocabulary v;
  v.first_control = m.first_control();
  v.control_names = m.controls();
  v.done_id = m.done();
  v.decode = [&m](int64_t a, int64_t b, int64_t c) { return m.decode(a, b, c); };
  return v;
}

StreamParser::StreamParser(StreamVocabulary vocabulary) : v_(std::move(vocabulary)) {
  if (!v_.decode) fail("story stream: the vocabulary has no value decoder");
  if (v_.first_control < 0) fail("story stream: first control id {} is negative", v_.first_control);
  std::set<std::string_view> seen;
  meanings_.resize(v_.control_names.size());
  for (size_t c = 0; c < v_.control_names.size(); ++c) {
    const std::string_view name = v_.control_names[c];
    if (!seen.insert(name).second) fail("story stream: control token name '{}' repeats", name);
    Meaning& m = meanings_[c];
    if (static_cast<int64_t>(c) + v_.first_control == v_.done_id) {
      m.kind = Meaning::Done;
    } else if (name.starts_with("TOK.") || name.starts_with("TOKF.")) {
      m.first_printed = name.starts_with("TOKF.");
      m.token = parse_int(name.substr(m.first_printed ? 5 : 4));
      if (m.token < 0) fail("story stream: story token name '{}' has no token number", name);
      m.kind = Meaning::Story;
    } else if (name == "REFUSE") {  // the sampler's top-p refuses this position (machine/sample_part.h)
      m.kind = Meaning::Refuse;
    } else if (name == "INC") {
      m.kind = Meaning::Crossing;
      m.op = CrossingOp::Inc;
    } else if (parse_layer_element(name, "FFN", m.layer, m.element)) {
      m.kind = Meaning::Crossing;
      m.op = CrossingOp::Ffn;
    } else {
      m.layer = -1;
      m.element = 0;
    }
  }
}

bool StreamParser::feed(int64_t id, const StreamCallbacks& callbacks) {
  const int64_t cycle = counts_.cycles++;
  const int64_t count = static_cast<int64_t>(v_.control_names.size());
  if (id < 0 || id >= v_.first_control + count)
    fail("story stream: cycle {}: host token {} is outside the machine's vocabulary ({} ids)", cycle, id,
         v_.first_control + count);
  const int position = static_cast<int>(std::max<int64_t>(counts_.story_tokens - 1, 0));

  if (id < v_.first_control) {  // a value token: part of the float after the latest control token
    if (last_control_ < 0) fail("story stream: cycle {}: value token {} before any control token", cycle, id);
    if (values_.size() == 3)
      fail("story stream: cycle {}: a fourth value token after '{}'", cycle, v_.control_names[last_control_]);
    values_.push_back(id);
    if (values_.size() < 3) return true;
    const float value = v_.decode(values_[0], values_[1], values_[2]);
    const Meaning& m = meanings_[static_cast<size_t>(last_control_)];
    if (m.kind != Meaning::Crossing) {
      ++counts_.other_floats;
      return true;
    }
    ++counts_.crossings;
    if (!callbacks.on_crossing) return true;
    return callbacks.on_crossing(CrossingEvent{&v_.control_names[last_control_], m.op, m.layer, m.element, value,
                                               position, last_control_cycle_});
  }

  // A control token: the float of the previous one, if any, must be complete.
  if (last_control_ >= 0) {
    const std::string& previous = v_.control_names[last_control_];
    if (!values_.empty() && values_.size() < 3)
      fail("story stream: cycle {}: control token '{}' after {} of the 3 value tokens that follow '{}'", cycle,
           v_.control_names[id - v_.first_control], values_.size(), previous);
    if (values_.empty() && meanings_[static_cast<size_t>(last_control_)].kind == Meaning::Crossing)
      fail("story stream: cycle {}: crossing micro-op '{}' is not followed by its float", cycle, previous);
  }
  last_control_ = id - v_.first_control;
  last_control_cycle_ = cycle;
  values_.clear();
  const Meaning& m = meanings_[static_cast<size_t>(last_control_)];
  switch (m.kind) {
    case Meaning::Done:
      counts_.done = true;
      ++counts_.other_controls;
      return false;
    case Meaning::Refuse:
      counts_.refused = true;
      ++counts_.other_controls;
      return true;  // DONE follows
    case Meaning::Story: {
      const StoryTokenEvent e{m.token, static_cast<int>(counts_.story_tokens), m.first_printed, cycle};
      ++counts_.story_tokens;
      return callbacks.on_story ? callbacks.on_story(e) : true;
    }
    case Meaning::Crossing:
      return true;  // its event comes with its float
    case Meaning::Other:
      ++counts_.other_controls;
      return true;
  }
  return true;
}

machine::TokenMachineOptions token_machine_options(int positions) {
  if (positions < 1) fail("story: {} nested positions, at least 1 needed", positions);
  machine::TokenMachineOptions o;
  // Whole blocks of 8 positions, at least 16; below the 32 KV banks a power of two, since
  // a machine of fewer positions than banks has a bank per position and the bank count
  // must be a power of two (npu/kv_address.h: 24 positions would make 24 banks).
  o.max_positions = positions <= 16 ? 16 : positions <= 32 ? 32 : (positions + 7) / 8 * 8;
  // 32 KV banks at every size: the machine as of 2026-11-30 fails to compile with 8 banks
  // at 16 positions ("inbox: value ... is not an interface input"); its own test uses 32.
  o.kv_banks = 32;
  // SWIGLU chunks of 22 lanes: 8 SW(l).c cycles per layer instead of 25. A chunk's cycle
  // costs more with more lanes (the lanes' silu), but less than the cycles it saves
  // (story_profile 256 40 0 2 1 L, the 256-position machine, SW's time over 40 steps,
  // scaled by the value tokens' ms per cycle for the load: 7 lanes 12.1 s, 14: 9.6 s,
  // 22: 8.1 s, 29: 7.7 s; hidden 4,480, 4,416, 4,352, 4,672). 22 lanes make the
  // narrowest machine; 32 and more do not fit: the product RAM's row holds 63 values.
  o.lanes = 22;
  return o;
}

StoryRunResult run_story(const machine::StoryInterface& m, const engine::Model& model, const StoryRunOptions& o,
                         const StreamCallbacks& callbacks) {
  const std::vector<int64_t> prompt = o.prompt.empty() ? std::vector<int64_t>{m.id("HDR")} : o.prompt;
  StreamParser parser(StreamVocabulary::of(m));
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  std::vector<float> logits(vocab);
  engine::State state = model.new_state();
  StoryRunResult r;
  // The nested logits on HEAD's cycles: per sublayer, the (entry, dim) pairs read after it.
  const bool read_logits = callbacks.on_logits && !o.logit_probes.empty();
  const int64_t head_id = read_logits ? m.id("HEAD") : -1;
  const int64_t sublayers = 2 * model.config().num_hidden_layers, width = model.config().hidden_size;
  std::vector<std::vector<std::pair<size_t, int64_t>>> probes_after(read_logits ? static_cast<size_t>(sublayers) : 0);
  for (size_t q = 0; read_logits && q < o.logit_probes.size(); ++q) {
    const machine::ValueProbe& p = o.logit_probes[q];
    if (p.after_sublayer < 0 || p.after_sublayer >= sublayers || p.dim < 0 || p.dim >= width)
      fail("story: logit {} probed after sublayer {}, dim {}: the model has {} sublayers of width {}", q,
           p.after_sublayer, p.dim, sublayers, width);
    probes_after[static_cast<size_t>(p.after_sublayer)].emplace_back(q, p.dim);
  }
  std::vector<float> nested_logits(o.logit_probes.size());
  const engine::SublayerTap tap = [&](int64_t sublayer, std::span<const float> residual) {
    for (const auto& [q, dim] : probes_after[static_cast<size_t>(sublayer)])
      nested_logits[q] = residual[static_cast<size_t>(dim)];
  };
  bool stop_for_logits = false;
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  // --profile: per forward its wall time and the sublayers computed (all but the skipped
  // idle ones and the mixers that never run).
  std::unique_ptr<CycleProfile> profile;
  if (o.profile) profile = std::make_unique<CycleProfile>(parser.vocabulary().first_control, parser.vocabulary().control_names);
  const int64_t computable = sublayers - static_cast<int64_t>(model.skipped_mixers().size());
  // The host's greedy pick from `from` (the first maximum, as torch's argmax): engine's
  // greedy kernel gives the first maximum (std::max_element's index) and the count above
  // 2^20 in one vector pass (two scalar passes over the vocabulary were 7.5 % of a cycle).
  const auto pick = [&](const std::vector<float>& from) {
    int64_t above = 0;
    const int64_t best = engine::elementwise::kernels().argmax(from.data(), static_cast<int64_t>(from.size()), 0x1p20f, &above);
    if (!unambiguous(from[static_cast<size_t>(best)], above)) ++r.ambiguous;
    return best;
  };
  // Speculation (StoryRunOptions::speculate): the draft, the guess's logits and its undo.
  const bool speculate = o.speculate && !profile && !o.around_forward;
  PromptLookup lookup;
  std::vector<float> guess_logits(speculate ? vocab : 0);
  engine::StateJournal journal;
  int64_t ready = -1;  // a kept guess: the token whose forward has run, its logits in guess_logits
  // One forward and the host's greedy pick. The argmax after a prompt token other than the
  // last is not used (the prompt forces the next token), so it is neither returned nor
  // checked.
  const auto forward = [&](int64_t token, bool used) {
    if (speculate) lookup.push(token);
    if (token == ready) {  // its forward ran beside the previous one, which kept it
      ready = -1;
      ++r.host_forwards;
      return pick(guess_logits);
    }
    const bool head = read_logits && token == head_id;
    const int64_t guess = speculate && used && !head ? lookup.guess() : -1;
    if (guess >= 0 && !(read_logits && guess == head_id)) {
      model.forward_pair(token, guess, state, logits, guess_logits, journal);
      ++r.host_forwards;
      ++r.pairs;
      const int64_t best = pick(logits);
      if (best == guess) {
        ready = guess;
        ++r.guesses_kept;
      } else {
        model.undo(journal, state);
      }
      return best;
    }
    if (o.around_forward) o.around_forward(token, true);
    if (profile) {
      const engine::IdleSublayerCounts before = model.skipped_sublayers();
      const auto t = std::chrono::steady_clock::now();
      model.forward(token, state, logits, {}, head ? tap : engine::SublayerTap{});
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
      const engine::IdleSublayerCounts after = model.skipped_sublayers();
      profile->add(token, spent, computable - (after.mlp - before.mlp) - (after.gdn - before.gdn));
    } else {
      model.forward(token, state, logits, {}, head ? tap : engine::SublayerTap{});
    }
    if (o.around_forward) o.around_forward(token, false);
    ++r.host_forwards;
    if (head) {
      const StreamCounts& c = parser.counts();
      const LogitEvent e{static_cast<int>(c.story_tokens) - 1, nested_logits, c.cycles - 1};
      if (!callbacks.on_logits(e)) stop_for_logits = true;
    }
    if (!used) return int64_t{-1};
    return pick(logits);
  };
  int64_t next = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (o.on_host_token) o.on_host_token(prompt[i]);
    next = forward(prompt[i], i + 1 == prompt.size());
  }
  for (;;) {
    if (o.on_host_token) o.on_host_token(next);
    const bool go_on = parser.feed(next, callbacks);
    if (o.on_cycle) o.on_cycle(parser.counts(), seconds());
    if (!go_on) break;
    if (o.stop_after_story_tokens > 0 && parser.counts().story_tokens >= o.stop_after_story_tokens) break;
    if (o.max_cycles > 0 && parser.counts().cycles >= o.max_cycles) break;
    next = forward(next, true);
    if (stop_for_logits) break;
  }
  r.counts = parser.counts();
  r.seconds = seconds();
  if (profile) r.profile = profile->rows();
  return r;
}

}  // namespace qpu::runner
