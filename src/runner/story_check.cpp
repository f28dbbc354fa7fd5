#include "runner/story_check.h"

#include <algorithm>
#include <bit>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "common/error.h"
#include "reference/tokenizer.h"
#include "reference/trace.h"

namespace qpu::runner {

namespace {

using K = reference::TraceKind;

// Collects x after the FFN of every layer of one forward.
class Residuals final : public reference::TraceObserver {
 public:
  explicit Residuals(ReferencePosition& out) : out_(out) {}
  void record(K kind, int, int layer, int head, std::span<const float> values) override {
    if (head >= 0 || layer < 0 || kind != K::x_ffn_res) return;
    auto& per_layer = out_.x_ffn_res;
    if (per_layer.size() <= static_cast<size_t>(layer)) per_layer.resize(static_cast<size_t>(layer) + 1);
    per_layer[static_cast<size_t>(layer)].assign(values.begin(), values.end());
  }

 private:
  ReferencePosition& out_;
};

int64_t crossings_per_position(const reference::Llama2Config& c) {
  return static_cast<int64_t>(c.n_layers) * c.dim + 1;  // FFN of every layer, INC
}

}  // namespace

std::string float_with_bits(float v) { return fmt::format("{:.9g} (0x{:08x})", v, std::bit_cast<uint32_t>(v)); }

std::string Difference::message() const {
  return fmt::format("nested position {}: {}: machine {}, run.c {}", position, what, machine, run_c);
}

StoryChecker::StoryChecker(const reference::Llama2Checkpoint& checkpoint, std::vector<int> prompt,
                           std::optional<reference::Sampler> sampler)
    : checkpoint_(checkpoint),
      transformer_(checkpoint),
      sampler_(sampler ? std::move(*sampler) : reference::Sampler(checkpoint.config().vocab_size, 0.0f, 1.0f, 0)),
      prompt_(std::move(prompt)) {
  if (!prompt_.empty() && prompt_[0] != reference::kBosToken) fail("story check: a prompt starts with BOS");
}

ReferencePosition& StoryChecker::reference(int pos) {
  const auto& cfg = checkpoint_.config();
  if (pos < 0 || pos >= cfg.seq_len) fail("story check: nested position {} outside run.c's [0, {})", pos, cfg.seq_len);
  while (static_cast<int>(positions_.size()) <= pos) {
    ReferencePosition r;
    r.token = positions_.empty() ? reference::kBosToken : positions_.back().next;
    Residuals residuals(r);
    transformer_.set_trace(&residuals);
    const std::span<float> logits = transformer_.forward(r.token, static_cast<int>(positions_.size()));
    transformer_.set_trace(nullptr);
    r.logits.assign(logits.begin(), logits.end());
    // run.c's prompt token while there is one (no coin drawn), else sample(): at
    // temperature 0 sample_argmax (the first maximum), else one coin, on a copy (it
    // works in place; r.logits stay forward's).
    const size_t at = positions_.size() + 1;
    if (at < prompt_.size()) {
      r.next = prompt_[at];
    } else {
      std::vector<float> scratch = r.logits;
      r.next = sampler_.sample(scratch);
      r.sampled = sampler_.temperature() > 0.0f;
    }
    if (r.x_ffn_res.size() != static_cast<size_t>(cfg.n_layers))
      fail("story check: run.c's trace gave {} layers, the checkpoint has {}", r.x_ffn_res.size(), cfg.n_layers);
    positions_.push_back(std::move(r));
  }
  return positions_[static_cast<size_t>(pos)];
}

bool StoryChecker::differ(int position, std::string what, std::string machine, std::string run_c) {
  if (!first_) first_ = Difference{position, std::move(what), std::move(machine), std::move(run_c)};
  return false;
}

bool StoryChecker::check(const CrossingEvent& e) {
  if (first_) return false;
  const auto& cfg = checkpoint_.config();
  const std::string name = e.name ? *e.name : std::string("?");
  const std::string machine = float_with_bits(e.value);
  float expected = 0.0f;
  std::string what;
  if (e.op == CrossingOp::Inc) {
    expected = static_cast<float>(e.position + 1);
    what = "POS + 1 (INC)";
  } else {
    what = fmt::format("x after the FFN of layer {}, element {}", e.layer, e.element);
    if (e.layer < 0 || e.layer >= cfg.n_layers || e.element < 0 || e.element >= cfg.dim)
      return differ(e.position, what + " (" + name + ")", machine,
                    fmt::format("none: {} layers of dim {}", cfg.n_layers, cfg.dim));
    const ReferencePosition& r = reference(e.position);
    expected = r.x_ffn_res[static_cast<size_t>(e.layer)][static_cast<size_t>(e.element)];
  }
  ++floats_;
  ++crossings_seen_[e.position];
  if (std::bit_cast<uint32_t>(e.value) != std::bit_cast<uint32_t>(expected))
    return differ(e.position, what, machine, float_with_bits(expected));
  return true;
}

bool StoryChecker::check(const StoryTokenEvent& e) {
  if (first_) return false;
  ++tokens_;
  const int expected = e.position == 0 ? reference::kBosToken : reference(e.position - 1).next;
  const std::string what = e.position == 0                      ? "the first story token (BOS)"
                           : reference(e.position - 1).sampled ? "the story token (run.c's sampled next token)"
                                                               : "the story token (greedy next token)";
  if (e.token != expected) return differ(e.position, what, fmt::format("token {}", e.token), fmt::format("token {}", expected));
  if (e.position > 0) {
    // Every crossing float of the position just finished came out (none skipped).
    const int64_t want = crossings_per_position(checkpoint_.config());
    const int64_t seen = crossings_seen_[e.position - 1];
    if (seen != want)
      return differ(e.position - 1, "crossing floats of the position", fmt::format("{} floats", seen),
                    fmt::format("{} floats", want));
  }
  return true;
}

bool StoryChecker::check(const LogitEvent& e) {
  if (first_) return false;
  const std::vector<float>& want = reference(e.position).logits;
  if (e.logits.size() != want.size())
    return differ(e.position, "logits", fmt::format("{} entries", e.logits.size()), fmt::format("{} entries", want.size()));
  ++logit_vectors_;
  for (size_t q = 0; q < want.size(); ++q)
    if (std::bit_cast<uint32_t>(e.logits[q]) != std::bit_cast<uint32_t>(want[q]))
      return differ(e.position, fmt::format("logit {}", q), float_with_bits(e.logits[q]), float_with_bits(want[q]));
  return true;
}

}  // namespace qpu::runner
