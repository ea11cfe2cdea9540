// --device and --dtype, as `meshtrain generate` and `meshtrain serve` take them: where a loaded model runs and in
// what precision.
#pragma once

#include <c10/core/TensorOptions.h>

#include <string>

namespace meshtrain::cli {

// `device`: cpu, cuda or cuda:N (a visible one); `dtype`: fp32 or bf16. UserError naming the flag otherwise,
// checked before any weight is read.
c10::TensorOptions placement_from_flags(const std::string& device, const std::string& dtype);

}  // namespace meshtrain::cli
