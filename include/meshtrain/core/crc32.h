// CRC-32 (IEEE, zlib's polynomial) and CRC-32C (Castagnoli, iSCSI/ext4's; SSE4.2's crc32 instruction where the
// CPU has it): checkpoints checksum their tensors with them, TensorBoard's record framing uses CRC-32C.
#pragma once

#include <cstddef>
#include <cstdint>

namespace meshtrain {

// `crc` continues an earlier call over the preceding bytes (0 to start).
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The CRC of A followed by B from crc(A), crc(B) and B's length (zlib's crc32_combine): pieces of one range
// checksummed on different threads give the checksum of the whole range.
uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace meshtrain
