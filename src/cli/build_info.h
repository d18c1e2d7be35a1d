// What the serve8 binary was built from, for benchmark records and --version.
#pragma once

namespace serve8 {

// `git describe --always --dirty` of the source tree at build time ("unknown" outside git).
const char* build_commit();

}  // namespace serve8
