// ONNX Runtime (onnxruntime-node, through scripts/ort_eval.js) as the
// independent judge of the models quantd writes.
#ifndef QUANTD_TESTS_SUPPORT_ORT_H_
#define QUANTD_TESTS_SUPPORT_ORT_H_

#include <string>
#include <vector>

namespace quantd::testing {

// Runs `node scripts/ort_eval.js ARGS...` with onnxruntime-node on
// NODE_PATH; fails the test on a non-zero exit and returns its stdout (one
// JSON line).
std::string OrtEval(const std::vector<std::string>& args);

// The number after "key": in a JSON line; NaN (and a test failure) if absent.
double JsonNumber(const std::string& json, const std::string& key);

// Top-1 accuracy of `model` on inputs `x_npy` and labels `y_npy`.
double OrtAccuracy(const std::string& model, const std::string& x_npy,
                   const std::string& y_npy);

// Output SQNR (dB) of `model` against `float_model` on inputs `x_npy`.
double OrtSqnr(const std::string& float_model, const std::string& model,
               const std::string& x_npy);

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_SUPPORT_ORT_H_
