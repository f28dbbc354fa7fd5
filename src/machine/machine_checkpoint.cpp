#include "machine/machine_checkpoint.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "io/qwen35_layout.h"
#include "io/qwen35_save.h"
#include "io/safetensors_writer.h"

namespace qpu::machine {

namespace {

// A directory created beside the target, removed unless commit() renamed it into place.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::filesystem::path& target) : target_(target) {
    std::string pattern = (target.parent_path() / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      fail("{}: cannot create a temporary directory beside it: {}", target.string(), std::strerror(errno));
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }
  void commit() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                            std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                            std::filesystem::perms::others_exec,
                                 ec);
    std::filesystem::rename(path_, target_, ec);
    if (ec) fail("{}: cannot rename {} into place: {}", target_.string(), path_.string(), ec.message());
    path_.clear();
  }

 private:
  std::filesystem::path target_, path_;
};

void write_text(const std::filesystem::path& path, const std::string& text) {
  io::write_file_atomically(path, std::span<const char>(text.data(), text.size()));
}

}  // namespace

uint64_t machine_parameters(const AssembledMachine& m) { return io::qwen35_parameter_count(m.compiled.weights.config); }

io::StreamSaveResult write_machine_checkpoint(const std::filesystem::path& dir, const AssembledMachine& m,
                                              const CheckpointExtras& extras, const CheckpointWriteOptions& options) {
  const std::filesystem::path target = std::filesystem::absolute(dir).lexically_normal();
  if (target.filename().empty()) fail("{}: not a directory name", dir.string());
  if (std::filesystem::exists(target)) fail("{}: already exists (nothing was written)", dir.string());
  if (!std::filesystem::is_directory(target.parent_path()))
    fail("{}: the parent directory {} does not exist", dir.string(), target.parent_path().string());
  TemporaryDirectory tmp(target);
  io::StreamSaveOptions so;
  so.max_shard_bytes = options.max_shard_bytes;
  so.progress = options.progress;
  io::StreamSaveResult r =
      io::save_qwen35_streamed(tmp.path(), m.compiled.weights, [&](int64_t l) { return m.layer(l); }, so);
  // DONE ends a run: the eos token of config.json and generation_config.json, so that a
  // stock `generate` (and `qpu generate --stop-at-eos`) stops where the machine does.
  {
    io::Qwen35Config config = m.compiled.weights.config;
    config.tie_word_embeddings = m.compiled.weights.lm_head.empty();
    config.eos_token_id = m.done();
    config.eos_token_ids = {m.done()};
    write_text(tmp.path() / "config.json", io::qwen35_config_to_json(config).dump(2) + "\n");
  }
  // Greedy: the host's argmax is the machine's next token.
  const nlohmann::json generation = {{"do_sample", false}, {"num_beams", 1}, {"temperature", nullptr},
                                     {"top_p", nullptr},   {"top_k", nullptr}, {"bos_token_id", nullptr},
                                     {"eos_token_id", m.done()}, {"pad_token_id", m.done()}};
  write_text(tmp.path() / "generation_config.json", generation.dump(2) + "\n");
  r.files.push_back("generation_config.json");
  if (!extras.tokenizer_json.empty()) {
    write_text(tmp.path() / "tokenizer.json", extras.tokenizer_json);
    r.files.push_back("tokenizer.json");
  }
  if (!extras.tokenizer_config.is_null()) {
    write_text(tmp.path() / "tokenizer_config.json", extras.tokenizer_config.dump(2) + "\n");
    r.files.push_back("tokenizer_config.json");
  }
  write_text(tmp.path() / "qpu-manifest.json", extras.manifest.dump(2) + "\n");
  r.files.push_back("qpu-manifest.json");
  tmp.commit();
  return r;
}

}  // namespace qpu::machine
