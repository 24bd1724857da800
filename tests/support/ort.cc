#include "tests/support/ort.h"

#include <cmath>
#include <regex>

#include "gtest/gtest.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::testing {

std::string OrtEval(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {QUANTD_NODE_BIN,
                                   SourcePath("scripts/ort_eval.js")};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r =
      RunCommand(argv, {std::string("NODE_PATH=") + QUANTD_ORT_NODE_PATH});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

double JsonNumber(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\":\\s*([0-9.eE+-]+)");
  if (!std::regex_search(json, m, re)) {
    ADD_FAILURE() << "no number for " << key << " in: " << json;
    return std::nan("");
  }
  return std::stod(m[1]);
}

double OrtAccuracy(const std::string& model, const std::string& x_npy,
                   const std::string& y_npy) {
  return JsonNumber(
      OrtEval({"accuracy", "--model", model, "--x", x_npy, "--y", y_npy}),
      "accuracy");
}

double OrtSqnr(const std::string& float_model, const std::string& model,
               const std::string& x_npy) {
  return JsonNumber(OrtEval({"compare", "--model", float_model, "--model2",
                             model, "--x", x_npy}),
                    "sqnr_db");
}

}  // namespace quantd::testing
