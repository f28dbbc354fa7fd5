#pragma once
// The one story pipeline that `qpu story` (a machine compiled in memory), `qpu run` and
// `qpu verify` (a checkpoint directory) share: run.c's flags checked against what the
// machine holds, the host prompt, the run on the engine with run.c's printing of the
// story as it is written, a progress line, and optionally run.c's check of every crossing
// float, nested logits vector and token, and dumps of the nested logits and host tokens.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/model.h"
#include "machine/story_interface.h"
#include "reference/llama2_checkpoint.h"
#include "reference/tokenizer.h"
#include "runner/story_stream.h"

namespace qpu::runner {

// run.c's flags of one story (parsed as run.c parses them: cli/run_c_flags.h).
struct StoryRequest {
  int steps = 256;           // run.c's -n (0 or > seq_len: seq_len)
  std::string prompt;        // run.c's -i
  float temperature = 0.0f;  // run.c's -t (0: greedy)
  float topp = 0.9f;         // run.c's -p
  uint64_t seed = 0;         // run.c's rng state
};

// The host prompt of a request on machine `m`, and the nested prompt and step count it
// stands for. Throws qpu::Error for a request the machine does not hold: more positions
// than it serves, a temperature on a greedy machine, a -p other than the one a top-p
// machine was compiled for (or any -p below 1 on a sample_mult machine), a tokenizer of
// another vocabulary; with run.c's model at hand (`reference_model`), a top-p story whose
// kept entries at some position are none or more than the machine orders (run first).
// run.c's story with a request's flags (temperature > 0, 0 < topp < 1; else nothing) run
// first on run.c's model: qpu::Error when at some position its top-p keeps no entry or more
// than the machine orders.
void refuse_topp_beyond_machine(const reference::Llama2Checkpoint& checkpoint, const reference::Tokenizer& tokenizer,
                                const StoryRequest& request, int steps);

struct StoryPlan {
  int steps = 0;
  std::vector<int> nested_prompt;  // run.c's prompt tokens, BOS first
  std::vector<int64_t> host_prompt;
};
StoryPlan plan_story(const machine::StoryInterface& m, const reference::Tokenizer& tokenizer, const StoryRequest& r,
                     const reference::Llama2Checkpoint* reference_model = nullptr);

struct StorySessionOptions {
  // run.c's model: every crossing float, logits vector and token compared with it (the
  // first difference is an error). Null: no check.
  const reference::Llama2Checkpoint* verify_against = nullptr;
  std::string dump_logits;       // every nested logits vector, float32 little-endian (empty: none)
  std::string dump_host_tokens;  // every host token id, prompt first, one per line (empty: none)
  bool profile = false;
  bool speculate = true;
  std::FILE* out = stdout;  // the story's bytes, as run.c prints them
};

struct StorySessionResult {
  StoryRunResult run;
  bool verified = false;  // checked against run.c (StorySessionOptions::verify_against)
  int64_t floats_verified = 0, logit_vectors_verified = 0, tokens_verified = 0;  // with verify_against
};

// Runs `plan` on `model` (whose checkpoint `m` describes) and prints the story to
// options.out as run.c prints it (safe printing, a BOS ends the story, the final newline).
// Progress on stderr. Throws qpu::Error for a difference from run.c, a refused top-p
// position, a machine that stops early, or a dump file that cannot be written; a dump
// file is written to a temporary name and renamed when the run ends well.
StorySessionResult run_story_session(const machine::StoryInterface& m, const engine::Model& model,
                                     const reference::Tokenizer& tokenizer, const StoryPlan& plan,
                                     const StoryRequest& request, const StorySessionOptions& options);

// The run's summary on stderr: host cycles, time, speculation, what was verified.
void print_session_summary(const StorySessionResult& result);

}  // namespace qpu::runner
