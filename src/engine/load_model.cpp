#include "engine/load_model.h"

#include "io/qwen35_weights.h"

namespace qpu::engine {

Model load_model(const std::filesystem::path& checkpoint_dir, const ModelOptions& options) {
  io::Qwen35Reader reader(checkpoint_dir);
  const LayerSource layer = [&reader](int64_t l) { return reader.layer(l); };
  return Model(reader.take_globals(), layer, options);
}

}  // namespace qpu::engine
