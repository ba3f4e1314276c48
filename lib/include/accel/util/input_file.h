// The one way accel-bench reads an input file whole: configs, vocab files,
// data files, result sets, loss traces. It must exist and be a regular file
// (a FIFO would block the open or the read for ever, a device like /dev/zero
// never end) and hold at most max_bytes. The check and the read use one
// descriptor, opened without blocking, so a file swapped for a FIFO between
// them cannot hang the reader either.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace accel {

// Larger than any config, vocab or result file; data files pass their own.
inline constexpr int64_t kInputFileLimit = int64_t{256} << 20;

// FILE's bytes. `what` says what the file is for in messages ("vocab file",
// "data.vocab"): ConfigError "<what> FILE: no such file" / "...: not a regular
// file (a FIFO, socket, device or folder)"; DataError "FILE: larger than N
// bytes" / "FILE: cannot open for reading: ..." / "FILE: read error: ...".
// `pipe_ok`: a FIFO is read too, to its end or the limit (a config given on
// the command line as `-c <(...)`); devices and sockets never are.
// `follow_links` false: a symbolic link is refused (O_NOFOLLOW), "<what>
// FILE: a symbolic link (refused: ...)", so a file swapped for a link after
// it was written is never read through it.
std::string read_input_file(const std::filesystem::path& file, const std::string& what,
                            int64_t max_bytes = kInputFileLimit, bool pipe_ok = false,
                            bool follow_links = true);

// A folder from someone else (a result set from a pull request) may hold
// symbolic links: to its own files they are fine; one that leads out of
// ROOT (charts/env.svg -> /proc/self/environ) would let a reader publish
// what it points to. ConfigError naming the first such link under ROOT
// ("<what> ROOT: LINK is a symbolic link leaving the folder (to TARGET)"),
// and for a link that does not resolve (a loop) alike. ROOT itself may be
// a link; at most `max_entries` entries are walked (ConfigError beyond).
void refuse_links_leaving(const std::filesystem::path& root, const std::string& what,
                          size_t max_entries = 200000);

}  // namespace accel
