#pragma once
// `qpu audit`: does a checkpoint hold ordinary learned weights, or computation
// compiled into its weights? Every float tensor is scanned (tensor_stats.h), judged
// on its own (judge_tensor), compared with the same tensor in neighbouring layers,
// and the tensors of each layer give the layer's verdict. docs/audit.md documents
// the features, the rules, the thresholds and the JSON schema.
//
// The report is built to grow: analyses that need the NPU's layout later
// (extracting a nested model, disassembling it) add their own sections next to
// "layers" without changing what is here.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tools/tensor_names.h"
#include "tools/tensor_stats.h"

namespace qpu::tools {

enum class Verdict {
  Learned,      // nothing distinguishes it from trained or randomly initialised weights
  Compiled,     // computation built into the values (exact constants, one-term rows, rails)
  Mixed,        // a learned part and a compiled part
  Unusual,      // not learned-looking (outliers, NaN, low precision, sparsity), but no compiled structure
  Zero,         // all exact zeros (tensors only)
  Inert,        // every matrix of the layer is exactly zero: the layer is the identity (layers only)
  NotAnalysed,  // integer / packed data (tensors only)
};
const char* verdict_name(Verdict verdict);  // "learned", "compiled", ...

// What a piece of evidence supports.
enum class Strength { Compiled, Unusual, Note };
const char* strength_name(Strength strength);

struct Evidence {
  std::string code;  // stable identifier (docs/audit.md lists them)
  Strength strength = Strength::Note;
  std::string tensor;   // the tensor it is about
  std::string message;  // one line for humans
};

struct RowRun {
  uint64_t first = 0, last = 0;  // inclusive
  std::string kind;              // "structured", "plain" or "zero"
};

struct TensorAudit {
  std::string file;  // safetensors file name
  std::string name;
  TensorName where;
  TensorStats stats;
  Verdict verdict = Verdict::Learned;
  std::vector<Evidence> evidence;
  std::vector<RowRun> row_runs;  // embeddings, lm_head and mixed tensors: rows unlike the majority (first kMaxRuns)
  uint64_t row_run_count = 0;    // all such runs
};

struct LayerAudit {
  std::string id;  // "model.layers.3"
  std::string stack;
  int64_t index = 0;
  std::string type;  // from the config when known ("linear_attention", ...)
  Verdict verdict = Verdict::Learned;
  std::vector<size_t> tensors;     // indices into AuditReport::tensors
  std::vector<Evidence> evidence;  // the tensors' compiled/unusual evidence and the neighbour comparison
};

struct AuditSummary {
  std::string verdict;  // "compiled", "unusual" or "learned"
  std::string message;
  std::map<std::string, uint64_t> layers_by_verdict;
  std::map<std::string, uint64_t> tensors_by_verdict;
  std::vector<std::string> compiled_layers, mixed_layers, unusual_layers, inert_layers;
  std::vector<std::string> flagged_tensors_outside_layers;  // compiled/mixed embeddings, heads, norms
};

struct AuditReport {
  std::string path;
  std::string architecture;  // config.json "architectures"[0], "" when unknown
  std::string model_type;
  int64_t config_layers = 0;  // num_hidden_layers, 0 when unknown
  std::vector<std::string> warnings;  // config problems etc.: the audit goes on without them
  std::vector<std::string> files;
  std::vector<std::string> unread_files;  // pickles: never loaded
  std::vector<TensorAudit> tensors;       // in file order
  std::vector<LayerAudit> layers;         // by stack, then index
  std::vector<size_t> outside_layers;     // tensors not in a layer stack
  AuditSummary summary;
  uint64_t bytes_scanned = 0;
  double seconds = 0;
};

AuditReport audit_checkpoint(const std::filesystem::path& path);

// The rules, exposed for tests (audit_checkpoint runs them in this order).
void judge_tensor(TensorAudit& tensor);                     // verdict + evidence from the statistics
void compare_with_neighbours(std::vector<TensorAudit>& tensors);  // same kind, nearby layers
void judge_layers(AuditReport& report);                     // layers from their tensors, and the summary

nlohmann::json audit_to_json(const AuditReport& report);
std::string format_audit(const AuditReport& report, bool show_tensors);

}  // namespace qpu::tools
