// docs/capabilities.md must be exactly what the capability table generates:
// the docs can never promise a combination the server refuses (or hide one
// it serves). Regenerate with scripts/update_docs.sh.
#include "core/engine/capability_matrix.h"

#include <fstream>
#include <sstream>
#include <string>

#include "core/engine/capabilities.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd {
namespace {

using ::testing::HasSubstr;

std::string DocsPath() {
  return std::string(QUANTD_SOURCE_DIR) + "/docs/capabilities.md";
}

TEST(CapabilityMatrixTest, EveryCombinationHasACell) {
  const std::string md = CapabilityMatrixMarkdown();
  int cells = 0;
  for (size_t pos = 0; (pos = md.find("] |", pos)) != std::string::npos;
       ++pos) {
    ++cells;
  }
  EXPECT_EQ(cells, static_cast<int>(CapabilityTable().size()));
  for (const auto& c : CapabilityTable()) {
    EXPECT_THAT(md, HasSubstr(c.note()));
  }
}

TEST(CapabilityMatrixTest, DocsMatchTheTable) {
  const std::string generated = CapabilityMatrixMarkdown();
  if (const char* update = std::getenv("QUANTD_UPDATE_DOCS");
      update != nullptr && std::string(update) == "1") {
    std::ofstream(DocsPath(), std::ios::binary) << generated;
  }
  std::ifstream in(DocsPath(), std::ios::binary);
  ASSERT_TRUE(in) << DocsPath() << " is missing: run scripts/update_docs.sh";
  std::stringstream docs;
  docs << in.rdbuf();
  EXPECT_EQ(docs.str(), generated)
      << "docs/capabilities.md is stale: run scripts/update_docs.sh";
}

}  // namespace
}  // namespace quantd
