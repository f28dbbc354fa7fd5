#pragma once
// Runs the whole-token machine (machine/token_machine.h) the way a host does, and reads
// its output stream.
//
// The host is given a prompt (TokenMachine::prompt: HDR, the step count, a nested
// prompt's tokens); from there each forward's greedy argmax is the next host token, fed
// back, until the machine's DONE. That stream is the machine's control stream (docs/story-cli.md):
//
//   control tokens        one per cycle; most of them only say which micro-op ran;
//   crossing micro-ops    FFN(l).i, INC: each is followed by the 3 value tokens of the
//                         float it sends up (AssembledMachine::decode). ATTO(l).0 is not
//                         one: it writes x after the attention down into the X1 RAM;
//   story tokens          TOK.k (TOKF.k: the first printed one): k is the nested model's
//                         token; the j-th story token (from 0) starts nested position j.
//
// StreamParser turns host tokens into events (it knows nothing of engines, so a test can
// feed it a synthetic stream); run_story drives an engine::Model and feeds the parser.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model.h"
#include "machine/assembler.h"
#include "machine/story_interface.h"
#include "machine/token_machine.h"
#include "runner/cycle_profile.h"

namespace qpu::runner {

// What the parser needs to know about a machine's host vocabulary: value tokens are the
// ids below first_control, control tokens the ids first_control + c for the names.
struct StreamVocabulary {
  int64_t first_control = 0;
  std::vector<std::string> control_names;  // in id order
  int64_t done_id = -1;                    // -1: none
  std::function<float(int64_t, int64_t, int64_t)> decode;  // 3 value tokens -> the float

  // The machine's (its decode is kept by reference: `m` must outlive the vocabulary).
  static StreamVocabulary of(const machine::StoryInterface& m);
};

enum class CrossingOp { Ffn, Inc };  // FFN(l).i, INC

struct StoryTokenEvent {
  int token = 0;          // k of TOK.k
  int position = 0;       // the nested position this token starts (0 for the first)
  bool first_printed = false;  // TOKF.k
  int64_t cycle = 0;      // host cycle (0-based over the generated tokens) that emitted it
};

struct CrossingEvent {
  const std::string* name = nullptr;  // the micro-op's control name, e.g. "FFN(2).17"
  CrossingOp op = CrossingOp::Ffn;
  int layer = -1;    // -1 for INC
  int element = 0;
  float value = 0.0f;
  int position = 0;  // the nested position it belongs to
  int64_t cycle = 0;  // cycle of the micro-op's control token
};

struct StreamCounts {
  int64_t cycles = 0;        // host tokens fed
  int64_t story_tokens = 0;
  int64_t crossings = 0;     // crossing floats
  int64_t other_floats = 0;  // floats after a control token that is not a crossing
  int64_t other_controls = 0;  // every other control token
  bool done = false;         // the machine's DONE came out
  bool refused = false;      // the machine's REFUSE came out (top-p: n0 = 0 or > 128 entries at the cutoff)
};

// The nested logits of one position, read from the host's residual stream on HEAD's
// cycle (StoryRunOptions::logit_probes): where the classifier leaves them, before the
// argmax reads them. Verification only: they never leave the forward pass, the story
// does not need them.
struct LogitEvent {
  int position = 0;               // the nested position whose forward they end
  std::span<const float> logits;  // valid during the callback
  int64_t cycle = 0;              // host cycle (0-based over the generated tokens) of HEAD
};

// Each returns false to stop the run.
struct StreamCallbacks {
  std::function<bool(const StoryTokenEvent&)> on_story;
  std::function<bool(const CrossingEvent&)> on_crossing;
  std::function<bool(const LogitEvent&)> on_logits;  // needs StoryRunOptions::logit_probes
};

class StreamParser {
 public:
  // Throws qpu::Error for a vocabulary whose names repeat or whose decode is empty.
  explicit StreamParser(StreamVocabulary vocabulary);

  // One host token (the host's output of one cycle). Returns false when a callback asked
  // to stop or after DONE. Throws qpu::Error (naming the cycle) for a stream that breaks
  // the machine's grammar: a value token not after a control token, a control token
  // before the 3 value tokens of a float are complete, a crossing without its float, an
  // id outside the vocabulary.
  bool feed(int64_t id, const StreamCallbacks& callbacks);

  const StreamCounts& counts() const { return counts_; }
  const StreamVocabulary& vocabulary() const { return v_; }

 private:
  struct Meaning {
    enum Kind { Other, Story, Crossing, Done, Refuse } kind = Other;
    int token = 0;  // Story
    bool first_printed = false;
    CrossingOp op = CrossingOp::Inc;
    int layer = -1, element = 0;
  };
  StreamVocabulary v_;
  std::vector<Meaning> meanings_;  // per control index
  StreamCounts counts_;
  int64_t last_control_ = -1;      // control index of the latest control token
  int64_t last_control_cycle_ = 0;
  std::vector<int64_t> values_;    // value tokens after it so far
};

// The token machine's options for a run of `positions` nested positions: the KV cache
// holds max(16, positions rounded up to a multiple of 8) positions (the attention's block
// loops work in blocks of 8 positions), in 32 banks.
machine::TokenMachineOptions token_machine_options(int positions);

struct StoryRunOptions {
  std::vector<int64_t> prompt;  // host tokens before the first generated one (empty: HDR alone)
  int64_t stop_after_story_tokens = 0;  // 0: no limit
  int64_t max_cycles = 0;               // generated host tokens at most (0: no limit)
  // TokenMachine::logit_probes: with on_logits set, the logits are read on every cycle
  // whose input is HEAD (engine::SublayerTap). Empty: never.
  std::vector<machine::ValueProbe> logit_probes;
  // Called with every host token the model is fed (the prompt's, then each generated one
  // that is fed back) and the last generated one (e.g. to write the host stream).
  std::function<void(int64_t id)> on_host_token;
  // Called after every cycle with the counts so far (progress display).
  std::function<void(const StreamCounts&, double seconds)> on_cycle;
  // Time every forward and count its computed sublayers per micro-op family
  // (StoryRunResult::profile, runner/cycle_profile.h).
  bool profile = false;
  // Called with every forward's input token just before it (true) and just after it
  // (false): e.g. to switch a sampling profiler on for one micro-op family
  // (bench/story_profile.cpp). It observes only.
  std::function<void(int64_t token, bool before)> around_forward;
  // Speculative decoding on a second thread (engine::Model::forward_pair): each generated
  // cycle's forward runs beside the forward of a guessed next token (PromptLookup over the
  // host tokens so far); when the host's argmax is the guess, the next cycle's logits are
  // ready, else the guess is undone. The same tokens, logits and State bits as without.
  // Not with profile or around_forward (which time or watch one forward at a time), nor on
  // a cycle whose forward the logit probes read (HEAD's), nor for a guess of HEAD then.
  bool speculate = false;
};

struct StoryRunResult {
  StreamCounts counts;
  int64_t host_forwards = 0;  // prompt + generated tokens run through the model
  int64_t ambiguous = 0;      // cycles whose winning logit is not a token signature or not unique
  double seconds = 0;         // wall time of the run (forwards, parsing, callbacks)
  std::vector<ProfileRow> profile;  // StoryRunOptions::profile: every forward (prompt included)
  int64_t pairs = 0;         // StoryRunOptions::speculate: forwards run beside a guess
  int64_t guesses_kept = 0;  // of those, the guess was the host's next token
  double cycles_per_second() const { return seconds > 0 ? static_cast<double>(host_forwards) / seconds : 0.0; }
};

// Greedy host: forward each prompt token, then feed back the argmax (first maximum) one
// token per forward, every generated token through a StreamParser, until a callback
// stops, the story-token or cycle limit, or DONE. Throws qpu::Error for logit probes
// outside the model's sublayers or width.
StoryRunResult run_story(const machine::StoryInterface& m, const engine::Model& model, const StoryRunOptions& options,
                         const StreamCallbacks& callbacks);

}  // namespace qpu::runner
