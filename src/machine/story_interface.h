#pragma once
// What a host needs to drive a compiled story machine, and nothing of how it was built:
// its host vocabulary (value tokens, control token names in id order, DONE), how a run is
// started (the host prompt: HDR, the step count, the nested prompt's tokens, the sampler's
// registers), what it can run (positions, greedy or which sampler) and where HEAD's
// classifier leaves the nested logits inside the forward pass (for verification).
//
// The same description comes from a machine built in memory (TokenMachine::interface) or
// from a checkpoint directory's qpu-machine.json ("interface"), so `qpu story` (in memory)
// and `qpu run` / `qpu prompt` / `qpu verify` (from the files) share one story pipeline
// (runner/story_session.h), and `qpu run` needs no compiler: only the files.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "machine/assembler.h"
#include "npu/uplink.h"

namespace qpu::machine {

// run.c's sampler as the machine holds it: greedy only, temperature sampling over the whole
// distribution (sample_mult), or top-p with the p the machine was compiled for.
enum class SamplerKind { Greedy, SampleMult, TopP };
const char* sampler_name(SamplerKind k);

class StoryInterface {
 public:
  struct Fields {
    int64_t host_vocab = 0;                 // the host's vocabulary size
    npu::ValueVocab values;                 // value tokens at ids [values.first, values.first + values.size())
    int64_t first_control = 0;              // host id of controls[0]
    std::vector<std::string> controls;      // control token names, in id order
    int max_positions = 0;                  // nested positions the machine serves
    int nested_vocab = 0;                   // the nested model's vocabulary (TOK.0 .. TOK.(n-1))
    int nested_seq_len = 0;                 // the nested model's seq_len (run.c's -n 0 runs that many)
    SamplerKind sampler = SamplerKind::Greedy;
    float topp = 1.0f;                      // SamplerKind::TopP: run.c's -p the machine holds
    float min_temperature = 0, max_temperature = 0;  // sampling machines: the temperatures it holds
    std::vector<ValueProbe> logit_probes;   // per nested vocabulary entry
  };

  StoryInterface() = default;
  // Throws qpu::Error (naming `where`) for a description a host could not drive: sizes
  // that disagree, a repeated or missing control name (HDR, DONE, HEAD, the prompt's write
  // micro-ops, TOK.k for every nested token), a value window the uplink does not have.
  StoryInterface(Fields fields, const std::string& where);

  const Fields& fields() const { return f_; }
  int64_t first_control() const { return f_.first_control; }
  const std::vector<std::string>& controls() const { return f_.controls; }
  int max_positions() const { return f_.max_positions; }
  int nested_vocab() const { return f_.nested_vocab; }
  int nested_seq_len() const { return f_.nested_seq_len; }
  SamplerKind sampler() const { return f_.sampler; }
  const std::vector<ValueProbe>& logit_probes() const { return f_.logit_probes; }

  // Host id of the control token `name`; throws for an unknown name.
  int64_t id(const std::string& name) const;
  int64_t done() const { return id("DONE"); }
  // The value tokens of a float (split_parts_reference), and 3 value tokens back to the
  // float as the register file adds them (p0 + (p1 + p2)).
  std::vector<int64_t> value_tokens(float x) const;
  float decode(int64_t t0, int64_t t1, int64_t t2) const;

  // The host prompt of a run of `steps` nested positions (TokenMachine::prompt documents
  // it). Throws qpu::Error for steps outside [1, max_positions], a prompt that does not
  // start with BOS or holds a token outside the vocabulary or more tokens than positions,
  // a temperature other than 0 on a greedy machine or outside the sampler's range.
  std::vector<int64_t> prompt(const std::vector<int>& nested_prompt, int steps, float temperature = 0.0f,
                              uint64_t seed = 0) const;

  nlohmann::json to_json() const;
  // Throws qpu::Error naming `where` and the field for anything missing, mistyped or
  // inconsistent.
  static StoryInterface from_json(const nlohmann::json& j, const std::string& where);

 private:
  Fields f_;
  std::unordered_map<std::string, int64_t> ids_;
};

}  // namespace qpu::machine
