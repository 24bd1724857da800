// Reads tests/data/executor_ops/golden.txt (scripts/make_activation_golden.py:
// PyTorch / numpy values for the activation and elementwise op tests): one
// array a line, `<case> <name> <dims|scalar> <values...>`.
#ifndef QUANTD_TESTS_CORE_EXECUTOR_OP_GOLDEN_H_
#define QUANTD_TESTS_CORE_EXECUTOR_OP_GOLDEN_H_

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/executor/tensor.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace quantd::executor {

struct GoldenArray {
  std::vector<int64_t> dims;
  std::vector<double> values;  // Parsed as double: exact for every entry.

  template <typename T>
  Tensor As() const {
    std::vector<T> v(values.size());
    for (size_t i = 0; i < values.size(); ++i) v[i] = static_cast<T>(values[i]);
    return Tensor::FromVector<T>(dims, v);
  }
};

// case -> array name -> array.
using GoldenCase = absl::flat_hash_map<std::string, GoldenArray>;

inline const absl::flat_hash_map<std::string, GoldenCase>& Golden() {
  static const auto* golden = [] {
    auto* g = new absl::flat_hash_map<std::string, GoldenCase>;
    std::istringstream in(::quantd::testing::ReadFileOrDie(
        ::quantd::testing::SourcePath("tests/data/executor_ops/golden.txt")));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      std::string name, array, dims;
      ls >> name >> array >> dims;
      GoldenArray a;
      if (dims != "scalar") {
        for (absl::string_view d : absl::StrSplit(dims, ',')) {
          int64_t v = 0;
          if (absl::SimpleAtoi(d, &v)) a.dims.push_back(v);
        }
      }
      std::string tok;
      // strtod reads "inf", "-inf", "nan" and "-0" as numpy writes them.
      while (ls >> tok) a.values.push_back(std::strtod(tok.c_str(), nullptr));
      (*g)[name][array] = std::move(a);
    }
    return g;
  }();
  return *golden;
}

// The case's array, or a test failure (and an empty array).
inline GoldenArray GoldenGet(const std::string& case_name,
                             const std::string& array) {
  auto c = Golden().find(case_name);
  if (c == Golden().end() || !c->second.contains(array)) {
    ADD_FAILURE() << "golden.txt has no " << case_name << " " << array
                  << " (re-run scripts/make_activation_golden.py)";
    return {};
  }
  return c->second.at(array);
}

}  // namespace quantd::executor

#endif  // QUANTD_TESTS_CORE_EXECUTOR_OP_GOLDEN_H_
