// File-system helpers that are safe in binaries linked to LibTorch.
//
// Never call std::filesystem::remove_all in meshtrain: libtorch.so exports its own copy of it (built against
// a newer libstdc++), the dynamic linker may bind our call to that copy, and it jumps to a null function
// (seen with the torch 2.11 wheel under GCC 12 and GCC 13). remove_tree uses plain libc.
#pragma once

#include <string>

namespace meshtrain {

// Removes `path` and everything below it (no error if it does not exist; symlinks are removed, not followed).
// Throws Error naming the first entry that cannot be removed.
void remove_tree(const std::string& path);

// fsync of a file or directory (a directory: so a rename inside it is durable). Throws Error on failure.
void fsync_path(const std::string& path);

// Writes `text` to `path` through path.tmp + fsync + rename (+ fsync of the directory), so a reader sees
// the old content or the new, never a part, whenever the process dies. Throws Error on failure.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace meshtrain
