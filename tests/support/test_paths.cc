#include "tests/support/test_paths.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace quantd::testing {

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return "";
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace quantd::testing
