// Writing a secret (the bootstrap admin key) to a file only its owner can read.
#ifndef VERITY_SERVER_AUTH_SECRET_FILE_H_
#define VERITY_SERVER_AUTH_SECRET_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace verity::server {

// Writes `text` and a newline to `path`, mode 0600, replacing any file there atomically
// (through `path`.tmp and rename). Whatever sits at `path`.tmp beforehand (a file with another
// mode, a symlink planted to redirect the secret) is unlinked first, and the temporary is
// created with O_CREAT | O_EXCL | O_NOFOLLOW, so the secret lands only in a new file that this
// call created, then fchmod'ed to 0600 whatever the umask. FAILED_PRECONDITION, naming the
// file and the reason, on any failure.
absl::Status WriteSecretFile(const std::string& path, const std::string& text);

}  // namespace verity::server

#endif  // VERITY_SERVER_AUTH_SECRET_FILE_H_
