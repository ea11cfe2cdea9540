#include "meshtrain/model/attention_backend.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <array>

#include "meshtrain/core/error.h"

namespace meshtrain::model {
namespace {

// ATen's switches as they were, put back on destruction: a probe leaves the process as it found it.
class SdpSwitches {
 public:
  SdpSwitches()
      : flash_(ctx().userEnabledFlashSDP()), efficient_(ctx().userEnabledMemEfficientSDP()),
        math_(ctx().userEnabledMathSDP()), cudnn_(ctx().userEnabledCuDNNSDP()) {}
  ~SdpSwitches() { set(flash_, efficient_, math_, cudnn_); }
  SdpSwitches(const SdpSwitches&) = delete;
  SdpSwitches& operator=(const SdpSwitches&) = delete;

  static void set(bool flash, bool efficient, bool math, bool cudnn) {
    ctx().setSDPUseFlash(flash);
    ctx().setSDPUseMemEfficient(efficient);
    ctx().setSDPUseMath(math);
    ctx().setSDPUseCuDNN(cudnn);
  }
  static void only(AttentionBackend b) {
    const bool all = b == AttentionBackend::automatic;
    set(all || b == AttentionBackend::flash, all || b == AttentionBackend::efficient,
        all || b == AttentionBackend::math, all || b == AttentionBackend::cudnn);
  }

 private:
  static at::Context& ctx() { return at::globalContext(); }
  bool flash_, efficient_, math_, cudnn_;
};

// Collects the warnings instead of printing them: where no enabled kernel can run, ATen warns a header per
// fused kernel ("Flash attention kernel not used because:") followed by that kernel's reasons.
class WarningLog : public c10::WarningHandler {
 public:
  void process(const c10::Warning& w) override { lines.push_back(w.msg()); }
  std::vector<std::string> lines;
};

// ATen's header line for `b`'s reasons (sdp_utils.cpp).
const char* reasons_header(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::flash: return "Flash attention kernel not used because";
    case AttentionBackend::cudnn: return "CuDNN attention kernel not used because";
    case AttentionBackend::efficient: return "Memory efficient kernel not used because";
    default: return "";
  }
}

// The reasons ATen gave for `b`, joined on one line; empty when it gave none for `b` (no such kernel there).
std::string reasons_for(AttentionBackend b, const std::vector<std::string>& lines) {
  const std::string header = reasons_header(b);
  std::string out;
  bool mine = false;
  for (const auto& l : lines) {
    const bool is_header = l.find("kernel not used because") != std::string::npos;
    if (is_header) {
      mine = !header.empty() && l.rfind(header, 0) == 0;
      continue;
    }
    if (mine) out += cat(out.empty() ? "" : "; ", l.substr(0, l.find('\n')));
  }
  return out;
}

at::SDPBackend aten_backend(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::flash: return at::SDPBackend::flash_attention;
    case AttentionBackend::cudnn: return at::SDPBackend::cudnn_attention;
    case AttentionBackend::efficient: return at::SDPBackend::efficient_attention;
    case AttentionBackend::math: return at::SDPBackend::math;
    case AttentionBackend::automatic: break;
  }
  return at::SDPBackend::error;
}

// SDPA's choice for `s` with only `b` enabled; the probe tensors need gradients, as training's do, since some
// kernels run forward only.
bool sdpa_chooses(AttentionBackend b, const AttentionShape& s, std::string* why) {
  const SdpSwitches saved;
  SdpSwitches::only(b);
  const auto opts = at::TensorOptions().dtype(s.dtype).device(s.device);
  auto q = at::empty({s.batch, s.heads, s.seq_len, s.head_dim}, opts).requires_grad_(true);
  auto kv = at::empty({s.batch, s.kv_heads, s.seq_len, s.head_dim}, opts).requires_grad_(true);
  // Packed documents outside flash's varlen kernel: a block-causal boolean mask, not the causal flag.
  std::optional<at::Tensor> mask;
  if (s.documents) mask = at::ones({s.batch, 1, s.seq_len, s.seq_len}, opts.dtype(at::kBool)).tril();
  WarningLog warnings;
  const c10::WarningUtils::WarningHandlerGuard guard(&warnings);
  try {
    const int64_t chosen = at::_fused_sdp_choice(q, kv, kv, mask, s.dropout, /*is_causal=*/!s.documents,
                                                 std::nullopt, /*enable_gqa=*/s.kv_heads != s.heads);
    if (chosen == static_cast<int64_t>(aten_backend(b))) return true;
    if (why) *why = "SDPA chose another kernel";
  } catch (const c10::Error&) {
    if (why) {
      *why = reasons_for(b, warnings.lines);
      // No reasons for b: on the CPU the kernel does not exist there; elsewhere ATen gave none (a warning it
      // prints once per process may have gone already).
      if (why->empty()) why->assign(s.device.is_cpu() ? "ATen has no such kernel on the CPU" : "SDPA refused it");
    }
  }
  return false;
}

const char* dtype_name(at::ScalarType t) {
  return t == at::kBFloat16 ? "bf16" : t == at::kHalf ? "fp16" : t == at::kFloat ? "fp32" : c10::toString(t);
}

}  // namespace

std::string AttentionShape::describe() const {
  return cat("q [", batch, ", ", heads, ", ", seq_len, ", ", head_dim, "], ", kv_heads, " kv heads, ",
             dtype_name(dtype), " on ", device.str(), documents ? ", packed documents" : "");
}

bool varlen_flash_runs(const at::Device& device, at::ScalarType dtype, int64_t head_dim) {
  return device.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf) && head_dim % 8 == 0 &&
         head_dim <= 256;
}

bool attention_backend_runs(AttentionBackend b, const AttentionShape& s, std::string* why) {
  if (b == AttentionBackend::automatic) return true;
  // Packed documents under flash take the variable-length kernel where it runs, else the masked SDPA as the
  // other kernels do (model/attention.cpp).
  if (b == AttentionBackend::flash && s.documents && varlen_flash_runs(s.device, s.dtype, s.head_dim)) return true;
  return sdpa_chooses(b, s, why);
}

std::vector<AttentionBackend> runnable_attention_backends(const AttentionShape& s) {
  std::vector<AttentionBackend> out;
  for (AttentionBackend b : {AttentionBackend::automatic, AttentionBackend::flash, AttentionBackend::cudnn,
                             AttentionBackend::efficient, AttentionBackend::math})
    if (attention_backend_runs(b, s)) out.push_back(b);
  return out;
}

void check_attention_backend(AttentionBackend b, const AttentionShape& s) {
  std::string why;
  if (attention_backend_runs(b, s, &why)) return;
  std::string valid;
  for (AttentionBackend r : runnable_attention_backends(s)) valid += cat(valid.empty() ? "" : " | ", enum_name(r));
  throw UserError(cat("train.attention_backend: given '", enum_name(b), "', which cannot run ",
                      s.describe(), " (", why, "); valid here ", valid));
}

void use_attention_backend(AttentionBackend b) { SdpSwitches::only(b); }

}  // namespace meshtrain::model
