// End to end: a real Prometheus (Debian's /usr/bin/prometheus, installed by
// scripts/setup.sh) scrapes a real quantd's metrics port, and its query API
// returns quantd_requests_total with the labels and values of the calls the
// test made. Checks what a deployment's monitoring sees, not just the text
// of /metrics: the exposition format parses, names and labels survive.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/quantd_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/support/background_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kPrometheus[] = "/usr/bin/prometheus";

// One series of an instant query: its labels and value.
struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The series of a /api/v1/query answer; empty when it is not a successful
// vector (not up yet, say).
std::vector<Sample> ParseVector(const std::string& json) {
  google::protobuf::Struct answer;
  if (!google::protobuf::util::JsonStringToMessage(json, &answer).ok()) {
    return {};
  }
  const auto& fields = answer.fields();
  if (!fields.count("status") ||
      fields.at("status").string_value() != "success" ||
      !fields.count("data")) {
    return {};
  }
  const auto& data = fields.at("data").struct_value().fields();
  if (!data.count("result")) return {};
  std::vector<Sample> samples;
  for (const google::protobuf::Value& series :
       data.at("result").list_value().values()) {
    const auto& series_fields = series.struct_value().fields();
    if (!series_fields.count("metric") || !series_fields.count("value")) {
      continue;
    }
    Sample sample;
    for (const auto& [name, value] :
         series_fields.at("metric").struct_value().fields()) {
      sample.labels[name] = value.string_value();
    }
    // [timestamp, "value"]
    const auto& pair = series_fields.at("value").list_value().values();
    if (pair.size() != 2) continue;
    sample.value = std::stod(pair[1].string_value());
    samples.push_back(std::move(sample));
  }
  return samples;
}

// The value of the series with all of `labels`; -1 if none.
double ValueWith(const std::vector<Sample>& samples,
                 const std::map<std::string, std::string>& labels) {
  for (const Sample& sample : samples) {
    bool all = true;
    for (const auto& [name, value] : labels) {
      auto it = sample.labels.find(name);
      all = all && it != sample.labels.end() && it->second == value;
    }
    if (all) return sample.value;
  }
  return -1;
}

TEST(PrometheusE2eTest, ScrapesRequestCountersWithTheirLabels) {
  // Fail, not skip: the scrape path is part of what we ship.
  ASSERT_EQ(access(kPrometheus, X_OK), 0)
      << kPrometheus << " is missing: scripts/setup.sh installs it "
      << "(apt-get install prometheus)";

  TempDir tmp;
  ServerProcess quantd({}, QUANTD_SERVER_BIN, tmp.File("quantd.err"));
  ASSERT_TRUE(quantd.ok()) << quantd.startup_output();

  const int prometheus_port = FreePort();
  ASSERT_GT(prometheus_port, 0);
  const std::string metrics_target =
      absl::StrCat("127.0.0.1:", quantd.metrics_port());
  WriteFileOrDie(tmp.File("prometheus.yml"),
                 absl::StrCat("global:\n"
                              "  scrape_interval: 1s\n"
                              "  evaluation_interval: 1s\n"
                              "scrape_configs:\n"
                              "  - job_name: quantd\n"
                              "    static_configs:\n"
                              "      - targets: ['",
                              metrics_target, "']\n"));
  const std::string log = tmp.File("prometheus.log");
  BackgroundProcess prometheus(
      {kPrometheus, "--config.file=" + tmp.File("prometheus.yml"),
       "--storage.tsdb.path=" + tmp.File("tsdb"),
       absl::StrCat("--web.listen-address=127.0.0.1:", prometheus_port)},
      log);
  ASSERT_TRUE(prometheus.started());

  // The calls to count: two Quantize (one OK, one refused) and one
  // GetServerInfo.
  client::Client::Options options;
  options.target = quantd.target();
  options.deadline = absl::Seconds(60);
  client::Client client(options);
  quantd::v1::QuantizeConfig config;
  config.mutable_options()
      ->mutable_quantization_method()
      ->set_experimental_method(
          tensorflow::quantization::QuantizationMethod::DYNAMIC_RANGE);
  const std::string model =
      ReadFileOrDie(SourcePath("examples/digits/model.onnx"));
  ASSERT_TRUE(client.Quantize(config, model).ok());
  EXPECT_EQ(client.Quantize(config, "not a model").status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client.GetServerInfo().ok());

  // Bounded: Prometheus starts, scrapes every second, and answers queries.
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(30);
  std::string answer;
  std::vector<Sample> samples;
  const std::map<std::string, std::string> quantize_ok = {
      {"__name__", "quantd_requests_total"},
      {"job", "quantd"},
      {"instance", metrics_target},
      {"method", "Quantize"},
      {"code", "OK"}};
  while (absl::Now() < end && !prometheus.Exited()) {
    answer =
        HttpGet(prometheus_port, "/api/v1/query?query=quantd_requests_total");
    samples = ParseVector(answer);
    if (ValueWith(samples, quantize_ok) >= 1 &&
        ValueWith(samples, {{"method", "GetServerInfo"}}) >= 1) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::printf(
      "measured: quantd_requests_total visible in Prometheus %s after "
      "the calls\n",
      absl::FormatDuration(absl::Now() - start).c_str());
  ASSERT_FALSE(samples.empty())
      << "no quantd_requests_total in Prometheus after 30 s; last answer: "
      << answer << "\nprometheus log:\n"
      << ReadFileOrDie(log);
  EXPECT_EQ(ValueWith(samples, quantize_ok), 1) << answer;
  EXPECT_EQ(ValueWith(samples,
                      {{"method", "Quantize"}, {"code", "INVALID_ARGUMENT"}}),
            1)
      << answer;
  EXPECT_EQ(ValueWith(samples, {{"method", "GetServerInfo"}, {"code", "OK"}}),
            1)
      << answer;

  // The scrape itself is healthy (Prometheus's own `up` series).
  const std::vector<Sample> up =
      ParseVector(HttpGet(prometheus_port, "/api/v1/query?query=up"));
  EXPECT_EQ(ValueWith(up, {{"job", "quantd"}, {"instance", metrics_target}}),
            1);

  EXPECT_EQ(prometheus.Terminate(), 0) << ReadFileOrDie(log);
  EXPECT_EQ(quantd.Terminate(), 0);
}

}  // namespace
}  // namespace quantd::testing
