#include "runner/story_session.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "common/error.h"
#include "npu/unit_topp.h"
#include "reference/generate.h"
#include "reference/sampler.h"
#include "runner/story_check.h"
#include "runner/story_precheck.h"

namespace qpu::runner {

namespace {

// A progress line on stderr at most 4 times a second on a terminal (rewritten in place),
// else every 10 s (one line each, for logs).
class Progress {
 public:
  explicit Progress(int steps) : tty_(isatty(fileno(stderr)) != 0), steps_(steps) {}
  void update(const StreamCounts& c, double seconds, bool last) {
    if (!last && seconds - shown_ < (tty_ ? 0.25 : 10.0)) return;
    shown_ = seconds;
    const long long tokens = c.story_tokens > 0 ? c.story_tokens - 1 : 0;  // TOK.1 is BOS, not a story token
    const double rate = seconds > 0 ? static_cast<double>(c.cycles) / seconds : 0.0;
    // The ETA from the nested tokens' pace so far (later positions cost more cycles).
    const double eta = tokens > 0 ? seconds * static_cast<double>(steps_ - tokens) / static_cast<double>(tokens) : 0.0;
    std::fprintf(stderr, "%shost cycles %lld, nested tokens %lld of %d, %.0f cycles/s, %.1f s", tty_ ? "\r" : "",
                 static_cast<long long>(c.cycles), tokens, steps_, rate, seconds);
    if (!last && tokens > 0) std::fprintf(stderr, ", ETA %.0f s", eta);
    std::fprintf(stderr, "%s", tty_ && !last ? "\x1b[K" : "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  int steps_;
  double shown_ = -1e9;
};

// A file written under a temporary name beside `path`, renamed into place by commit();
// removed otherwise.
class DumpFile {
 public:
  explicit DumpFile(const std::string& path) : path_(path) {
    if (path_.empty()) return;
    tmp_ = path_ + ".tmp-" + std::to_string(::getpid());
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail("{}: cannot write: {}", path_, std::strerror(errno));
  }
  ~DumpFile() {
    if (f_) std::fclose(f_);
    if (!tmp_.empty()) std::remove(tmp_.c_str());
  }
  DumpFile(const DumpFile&) = delete;
  DumpFile& operator=(const DumpFile&) = delete;

  bool on() const { return f_ != nullptr; }
  void write(const void* data, size_t bytes) {
    if (std::fwrite(data, 1, bytes, f_) != bytes) fail("{}: write failed: {}", path_, std::strerror(errno));
  }
  void commit() {
    if (!f_) return;
    const bool ok = std::fflush(f_) == 0;
    std::fclose(f_);
    f_ = nullptr;
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("{}: cannot write: {}", path_, std::strerror(errno));
    tmp_.clear();
  }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

void print_profile(const std::vector<ProfileRow>& rows) {
  double total = 0;
  int64_t cycles = 0;
  for (const ProfileRow& r : rows) {
    total += r.seconds;
    cycles += r.cycles;
  }
  std::fprintf(stderr, "profile: %lld host forwards, %.1f s in forward passes\n", static_cast<long long>(cycles), total);
  std::fprintf(stderr, "profile: %-24s %10s %9s %7s %10s %14s\n", "micro-op", "cycles", "seconds", "share", "ms/cycle",
               "sublayers/cycle");
  for (const ProfileRow& r : rows) {
    const auto n = static_cast<double>(r.cycles);
    std::fprintf(stderr, "profile: %-24s %10lld %9.2f %6.1f%% %10.3f %14.1f\n", r.family.c_str(),
                 static_cast<long long>(r.cycles), r.seconds, total > 0 ? 100.0 * r.seconds / total : 0.0,
                 1e3 * r.seconds / n, static_cast<double>(r.sublayers_run) / n);
  }
}

}  // namespace

void refuse_topp_beyond_machine(const reference::Llama2Checkpoint& checkpoint, const reference::Tokenizer& tokenizer,
                                const StoryRequest& r, int steps) {
  if (!(r.temperature > 0.0f && r.topp > 0.0f && r.topp < 1.0f)) return;
  const auto over =
      first_topp_overflow(checkpoint, tokenizer, r.prompt, steps, r.temperature, r.topp, r.seed, npu::kToppSlots);
  if (over && over->kept == 0)
    fail("story: at nested position {} no entry reaches run.c's top-p cutoff (1 - p) / (vocab - 1) (run.c reads out "
         "of bounds there); refused before the run",
         over->position);
  if (over)
    fail("story: at nested position {} run.c's top-p keeps {} entries (those at or above its cutoff (1 - p) / "
         "(vocab - 1)); the machine orders at most {}: refused before the run",
         over->position, over->kept, npu::kToppSlots);
}

StoryPlan plan_story(const machine::StoryInterface& m, const reference::Tokenizer& tokenizer, const StoryRequest& r,
                     const reference::Llama2Checkpoint* reference_model) {
  using machine::SamplerKind;
  const bool sampled = r.temperature > 0.0f;  // run.c: temperature 0 is the argmax, -p unused
  const bool topp = sampled && r.topp > 0.0f && r.topp < 1.0f;
  if (sampled && m.sampler() == SamplerKind::Greedy)
    fail("flag -t: this machine is greedy (compiled without a sampler); -t 0 runs it");
  if (topp && m.sampler() != SamplerKind::TopP)
    fail("flag -p: this machine samples the whole distribution (run.c's sample_mult), not top-p; -p 1 runs it");
  if (sampled && !topp && m.sampler() == SamplerKind::TopP)
    fail("flag -p: this machine runs run.c's top-p for p = {} only", m.fields().topp);
  if (topp && r.topp != m.fields().topp)
    fail("flag -p: this machine runs run.c's top-p for p = {} only, not {}", m.fields().topp, r.topp);
  const auto& f = m.fields();
  if (sampled && !(r.temperature >= f.min_temperature && r.temperature <= f.max_temperature))
    fail("flag -t: the machine's sampler holds temperatures in [{}, {}] (or 0), not {}", f.min_temperature,
         f.max_temperature, r.temperature);
  if (tokenizer.vocab_size() != m.nested_vocab())
    fail("tokenizer: {} entries, the machine's nested model has a vocabulary of {}", tokenizer.vocab_size(),
         m.nested_vocab());
  StoryPlan plan;
  plan.steps = reference::run_c_steps(r.steps, m.nested_seq_len());
  if (plan.steps > m.max_positions())
    fail("flag -n: {} nested positions, the machine serves {} (compiled with --positions {})", plan.steps,
         m.max_positions(), m.max_positions());
  // The prompt, encoded by run.c's BPE (the machine gets its tokens as data and forces
  // them as run.c does). Tokens past index `steps` are never used by run.c: left out.
  plan.nested_prompt = tokenizer.encode(r.prompt, true, false);
  if (plan.nested_prompt.size() > static_cast<size_t>(plan.steps) + 1)
    plan.nested_prompt.resize(static_cast<size_t>(plan.steps) + 1);
  if (plan.nested_prompt.size() > static_cast<size_t>(m.max_positions()))
    fail("flag -i: a prompt of {} tokens, the machine serves {} positions", plan.nested_prompt.size(), m.max_positions());
  if (topp && reference_model) refuse_topp_beyond_machine(*reference_model, tokenizer, r, plan.steps);
  plan.host_prompt = m.prompt(plan.nested_prompt, plan.steps, sampled ? r.temperature : 0.0f, r.seed);
  return plan;
}

StorySessionResult run_story_session(const machine::StoryInterface& m, const engine::Model& model,
                                     const reference::Tokenizer& tokenizer, const StoryPlan& plan,
                                     const StoryRequest& request, const StorySessionOptions& o) {
  std::unique_ptr<StoryChecker> checker;
  if (o.verify_against)  // run.c's sampler with the story's flags (temperature 0: the argmax)
    checker = std::make_unique<StoryChecker>(*o.verify_against, plan.nested_prompt,
                                             reference::Sampler(m.nested_vocab(), request.temperature, request.topp,
                                                                request.seed));
  DumpFile logits_file(o.dump_logits), tokens_file(o.dump_host_tokens);
  int previous = reference::kBosToken;
  bool bos_stop = false;
  StreamCallbacks cb;
  cb.on_story = [&](const StoryTokenEvent& e) {
    if (checker && !checker->check(e)) return false;
    if (e.position == 0) return true;  // run.c's first token, BOS: nothing printed
    if (e.token == reference::kBosToken) {  // run.c stops at BOS (it delimits sequences)
      bos_stop = true;
      return false;
    }
    const std::string_view bytes = reference::printable_piece(tokenizer.decode(previous, e.token));
    std::fwrite(bytes.data(), 1, bytes.size(), o.out);
    std::fflush(o.out);  // run.c flushes after every token
    previous = e.token;
    return true;
  };
  if (checker) cb.on_crossing = [&](const CrossingEvent& e) { return checker->check(e); };
  if (checker || logits_file.on())
    cb.on_logits = [&](const LogitEvent& e) {
      if (logits_file.on()) logits_file.write(e.logits.data(), e.logits.size() * sizeof(float));
      return !checker || checker->check(e);
    };

  Progress progress(plan.steps);
  StoryRunOptions ro;
  ro.prompt = plan.host_prompt;
  ro.stop_after_story_tokens = plan.steps + 1;  // TOK.1 (BOS at position 0), then one per position
  if (cb.on_logits) {
    if (m.logit_probes().empty()) fail("machine: its description names no logit probes (nothing to read or dump)");
    ro.logit_probes = m.logit_probes();  // the nested logits, read where HEAD computes them
  }
  ro.on_cycle = [&](const StreamCounts& counts, double seconds) { progress.update(counts, seconds, false); };
  if (tokens_file.on())
    ro.on_host_token = [&](int64_t id) {
      const std::string line = std::to_string(id) + "\n";
      tokens_file.write(line.data(), line.size());
    };
  ro.profile = o.profile;
  ro.speculate = o.speculate;
  StorySessionResult out;
  out.run = run_story(m, model, ro, cb);
  const StoryRunResult& r = out.run;
  progress.update(r.counts, r.seconds, true);
  if (o.profile) print_profile(r.profile);  // also when the check below fails: where the time went

  if (checker && checker->first_difference()) fail("verify: {}", checker->first_difference()->message());
  if (r.counts.refused)
    fail("story: the machine refused top-p at nested position {}: no entry or more than {} entries reach run.c's "
         "cutoff (1 - p) / (vocab - 1) (run.c reads out of bounds for none; the machine orders at most {})",
         r.counts.story_tokens - 1, npu::kToppSlots, npu::kToppSlots);
  const int64_t expected_tokens = plan.steps + 1;
  if (!bos_stop && r.counts.story_tokens < expected_tokens)
    fail("story: the machine stopped after {} of {} story tokens ({}, {} host cycles)", r.counts.story_tokens,
         expected_tokens, r.counts.done ? "DONE" : "no DONE", r.counts.cycles);
  std::fwrite("\n", 1, 1, o.out);  // run.c's final newline
  std::fflush(o.out);
  logits_file.commit();
  tokens_file.commit();
  if (checker) {
    out.verified = true;
    out.floats_verified = checker->floats_compared();
    out.logit_vectors_verified = checker->logit_vectors_compared();
    out.tokens_verified = checker->tokens_compared();
  }
  return out;
}

void print_session_summary(const StorySessionResult& s) {
  const StoryRunResult& r = s.run;
  const double nested = static_cast<double>(r.counts.story_tokens - 1);
  std::fprintf(stderr, "story: %lld host cycles, %.0f nested tokens in %.1f s: %.1f host cycles/s, %.4f nested tokens/s",
               static_cast<long long>(r.host_forwards), nested, r.seconds, r.cycles_per_second(),
               r.seconds > 0 ? nested / r.seconds : 0.0);
  if (r.ambiguous > 0) std::fprintf(stderr, " (%lld ambiguous host argmaxes)", static_cast<long long>(r.ambiguous));
  std::fprintf(stderr, "\n");
  if (r.pairs > 0)
    std::fprintf(stderr, "story: %lld forwards ran beside a guessed next token, %lld guesses kept (%.1f %%)\n",
                 static_cast<long long>(r.pairs), static_cast<long long>(r.guesses_kept),
                 100.0 * static_cast<double>(r.guesses_kept) / static_cast<double>(r.pairs));
  if (s.verified)
    std::fprintf(stderr, "verify: %lld floats, %lld logits vectors and %lld tokens bit-identical to run.c\n",
                 static_cast<long long>(s.floats_verified), static_cast<long long>(s.logit_vectors_verified),
                 static_cast<long long>(s.tokens_verified));
}

}  // namespace qpu::runner
