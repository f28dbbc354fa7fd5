#include "machine/machine_checkpoint.h"

#include <fcntl.h>   // AT_FDCWD
#include <stdio.h>   // renameat2, RENAME_NOREPLACE (glibc)
#include <unistd.h>  // access

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "io/qwen35_layout.h"
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
  // Into place only if nothing took the target's name meanwhile (RENAME_NOREPLACE: a plain
  // rename would replace an empty directory that appeared there).
  void commit() {
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                            std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                            std::filesystem::perms::others_exec,
                                 ignored);
    int rc = ::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {  // a file system without the flag
      if (std::filesystem::exists(std::filesystem::symlink_status(target_)))
        fail("{}: appeared while the checkpoint was written (nothing replaced)", target_.string());
      rc = ::rename(path_.c_str(), target_.c_str());
    }
    if (rc != 0) fail("{}: cannot rename {} into place: {}", target_.string(), path_.string(), std::strerror(errno));
    path_.clear();
  }

 private:
  std::filesystem::path target_, path_;
};

void write_text(const std::filesystem::path& path, const std::string& text) {
  io::write_file_atomically(path, std::span<const char>(text.data(), text.size()));
}

}  // namespace

nlohmann::json machine_map(const AssembledMachine& m) {
  nlohmann::json families = nlohmann::json::object();
  for (const std::string& name : m.control_names) {
    nlohmann::json& count = families[control_family(name)];
    count = count.is_null() ? 1 : count.get<int64_t>() + 1;
  }
  nlohmann::json memories = nlohmann::json::array();
  const auto& ops = m.program.ops();
  const compiler::Schedule& schedule = m.compiled.schedule;
  const compiler::Allocation& alloc = m.compiled.allocation;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != compiler::OpKind::GdnMemory) continue;
    const compiler::GdnMemory& g = ops[i].gdn;
    memories.push_back({{"label", ops[i].label},
                        {"layer", schedule.sublayer[i] / 2},
                        {"head", alloc.first_neuron[i]},
                        {"address_bits", g.key_bits.size()},
                        {"floats_per_row", g.data.size()}});
  }
  return {{"families", families}, {"memories", memories}};
}

uint64_t machine_parameters(const AssembledMachine& m) { return io::qwen35_parameter_count(m.compiled.weights.config); }

std::filesystem::path check_checkpoint_target(const std::filesystem::path& dir) {
  std::filesystem::path target = std::filesystem::absolute(dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/" names "out"
  if (target.filename().empty() || target == target.root_path()) fail("{}: not a directory name", dir.string());
  if (std::filesystem::exists(std::filesystem::symlink_status(target)))
    fail("{}: already exists (nothing was written)", dir.string());
  const std::filesystem::path parent = target.parent_path();
  if (!std::filesystem::is_directory(parent)) fail("{}: the parent directory {} does not exist", dir.string(), parent.string());
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    fail("{}: cannot write into {}: {}", dir.string(), parent.string(), std::strerror(errno));
  return target;
}

io::StreamSaveResult write_machine_checkpoint(const std::filesystem::path& dir, const AssembledMachine& m,
                                              const CheckpointExtras& extras, const CheckpointWriteOptions& options) {
  const std::filesystem::path target = check_checkpoint_target(dir);
  TemporaryDirectory tmp(target);
  io::StreamSaveOptions so;
  so.max_shard_bytes = options.max_shard_bytes;
  so.progress = options.progress;
  // DONE ends a run: the eos token of config.json and generation_config.json, so that a
  // stock `generate` (and `qpu generate --stop-at-eos`) stops where the machine does.
  so.adjust_config = [&](io::Qwen35Config& c) {
    c.eos_token_id = m.done();
    c.eos_token_ids = {m.done()};
  };
  io::StreamSaveResult r = io::save_qwen35_streamed(tmp.path(), m.compiled.weights, m.layers(), so);
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
  if (!extras.nested_tokenizer.empty()) {
    write_text(tmp.path() / kNestedTokenizerFileName, extras.nested_tokenizer);
    r.files.push_back(kNestedTokenizerFileName);
  }
  write_text(tmp.path() / kMachineFileName, extras.machine.dump(2) + "\n");
  r.files.push_back(kMachineFileName);
  tmp.commit();
  return r;
}

}  // namespace qpu::machine
