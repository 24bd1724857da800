// The docs' view of the capability table: docs/capabilities.md is this
// function's output, so the matrix users read is the table the server
// enforces (tests/core/engine/capability_matrix_test.cc keeps them equal).
#ifndef QUANTD_CORE_ENGINE_CAPABILITY_MATRIX_H_
#define QUANTD_CORE_ENGINE_CAPABILITY_MATRIX_H_

#include <string>

namespace quantd {

// A Markdown page: one grid per method (precision x op set, each cell
// "yes" or "no" with a footnote number) followed by every cell's note.
std::string CapabilityMatrixMarkdown();

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_CAPABILITY_MATRIX_H_
