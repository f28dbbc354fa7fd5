// Provenance with ed25519 (docs/audit.md, "Manifest and signatures"):
//
//   qpu sign --keygen NAME                 writes NAME.key (secret, mode 0600) and NAME.pub
//   qpu sign CHECKPOINT --key NAME.key [-o SIGNATURE]
//       signs the checkpoint's manifest; default SIGNATURE: CHECKPOINT/qpu-signature.json
//       for a directory, FILE.qpu-signature.json for a single file
//   qpu verify-signature CHECKPOINT --public-key NAME.pub [--signature SIGNATURE] [--json]
//       checks the signature with the trusted key, recomputes the manifest and names
//       every changed tensor and file. Exit 0 when valid and unchanged, else 1.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "common/error.h"
#include "io/safetensors_writer.h"
#include "tools/manifest.h"
#include "tools/signature.h"

namespace {

namespace fs = std::filesystem;

fs::path default_signature_path(const fs::path& checkpoint) {
  if (fs::is_directory(checkpoint)) return checkpoint / qpu::tools::kSignatureFileName;
  return fs::path(checkpoint.string() + "." + qpu::tools::kSignatureFileName);
}

struct SignOptions {
  std::string checkpoint;
  std::string key;
  std::string output;
  std::string keygen;
};

qpu::cli::Runner setup_sign(CLI::App& app) {
  auto o = std::make_shared<SignOptions>();
  app.add_option("checkpoint", o->checkpoint, "Checkpoint directory or file to sign");
  app.add_option("--key", o->key, "Secret key file (NAME.key from --keygen)");
  app.add_option("-o,--output", o->output, "Signature file (default: qpu-signature.json in the checkpoint)");
  app.add_option("--keygen", o->keygen, "Generate a key pair: writes NAME.key (secret) and NAME.pub");
  return [o] {
    using namespace qpu::tools;
    if (!o->keygen.empty()) {
      if (!o->checkpoint.empty() || !o->key.empty()) qpu::fail("--keygen takes no checkpoint and no --key");
      const KeyPair keys = generate_key_pair();
      const fs::path secret = o->keygen + ".key", pub = o->keygen + ".pub";
      if (fs::exists(pub)) qpu::fail("{}: already exists (key files are never overwritten)", pub.string());
      write_secret_key(secret, keys);
      write_public_key(pub, keys.public_key);
      std::printf("key %s: secret %s (keep it private), public %s\n", key_id(keys.public_key).c_str(),
                  secret.c_str(), pub.c_str());
      return 0;
    }
    if (o->checkpoint.empty()) qpu::fail("give a CHECKPOINT to sign (or --keygen NAME)");
    if (o->key.empty()) qpu::fail("--key SECRET_KEY_FILE is required to sign");
    const KeyPair keys = read_secret_key(o->key);
    const Manifest manifest = compute_manifest(o->checkpoint);
    if (!manifest.errors.empty())
      qpu::fail("cannot sign {}: {}", o->checkpoint, manifest.errors.front().error);
    const nlohmann::json signature = sign_manifest(manifest, keys);
    const fs::path out = o->output.empty() ? default_signature_path(o->checkpoint) : fs::path(o->output);
    qpu::io::write_file_atomically(out, signature.dump(2) + "\n");
    std::printf("signed %zu files, %zu tensors with key %s -> %s\n", manifest.files.size(), manifest.tensors.size(),
                key_id(keys.public_key).c_str(), out.c_str());
    return 0;
  };
}

struct VerifyOptions {
  std::string checkpoint;
  std::string public_key;
  std::string signature;
  bool json = false;
};

qpu::cli::Runner setup_verify(CLI::App& app) {
  auto o = std::make_shared<VerifyOptions>();
  app.add_option("checkpoint", o->checkpoint, "Checkpoint directory or file")->required();
  app.add_option("--public-key", o->public_key, "Trusted public key file (NAME.pub)")->required();
  app.add_option("--signature", o->signature, "Signature file (default: qpu-signature.json in the checkpoint)");
  app.add_flag("--json", o->json, "Print the result as JSON");
  return [o] {
    using namespace qpu::tools;
    const PublicKey trusted = read_public_key(o->public_key);
    const fs::path sig_path = o->signature.empty() ? default_signature_path(o->checkpoint) : fs::path(o->signature);
    std::ifstream in(sig_path, std::ios::binary);
    if (!in) qpu::fail("{}: cannot open the signature file", sig_path.string());
    std::ostringstream text;
    text << in.rdbuf();
    const auto doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) qpu::fail("{}: not valid JSON", sig_path.string());
    const Manifest current = compute_manifest(o->checkpoint);
    const VerifyResult r = verify_signature(doc, trusted, current, sig_path.string());
    if (o->json) {
      nlohmann::json changes = nlohmann::json::array();
      for (const auto& c : r.changes)
        changes.push_back({{"subject", c.subject}, {"file", c.file}, {"name", c.name}, {"change", c.change},
                           {"message", c.message}});
      const nlohmann::json j = {{"ok", r.ok()},
                                {"signature_valid", r.signature_valid},
                                {"problem", r.problem},
                                {"trusted_key_id", key_id(trusted)},
                                {"signer_key_id", r.signer_key_id},
                                {"signed_files", r.signed_files},
                                {"signed_tensors", r.signed_tensors},
                                {"changes", changes}};
      std::printf("%s\n", j.dump(2).c_str());
    } else if (!r.signature_valid) {
      std::printf("FAILED: %s\n", r.problem.c_str());
    } else if (r.changes.empty()) {
      std::printf("OK: signature by key %s is valid and the checkpoint matches it (%zu files, %zu tensors)\n",
                  key_id(trusted).c_str(), r.signed_files, r.signed_tensors);
    } else {
      std::printf("FAILED: the signature by key %s is valid, but the checkpoint changed since it was signed "
                  "(%zu changes):\n",
                  key_id(trusted).c_str(), r.changes.size());
      for (const auto& c : r.changes) std::printf("  %s\n", c.message.c_str());
    }
    return r.ok() ? 0 : 1;
  };
}

qpu::cli::Registration sign_reg{"sign", "Sign a checkpoint's manifest with ed25519 (or --keygen a key pair)",
                                setup_sign};
qpu::cli::Registration verify_reg{"verify-signature",
                                  "Check a checkpoint against its signed manifest, naming every changed tensor",
                                  setup_verify};

}  // namespace
