// Paths of the source tree, build tree and binaries, for tests.
#ifndef QUANTD_TESTS_SUPPORT_TEST_PATHS_H_
#define QUANTD_TESTS_SUPPORT_TEST_PATHS_H_

#include <string>

namespace quantd::testing {

inline std::string SourcePath(const std::string& rel) {
  return std::string(QUANTD_SOURCE_DIR) + "/" + rel;
}
inline std::string BinaryPath(const std::string& rel) {
  return std::string(QUANTD_BINARY_DIR) + "/" + rel;
}
// Reads a whole file; fails the test (and returns "") when it cannot.
std::string ReadFileOrDie(const std::string& path);

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_SUPPORT_TEST_PATHS_H_
