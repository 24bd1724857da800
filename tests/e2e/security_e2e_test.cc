// End to end: transport security (TLS, mutual TLS), bearer-token auth and the
// concurrent-jobs limit of a real quantd, driven by quantctl and the SDK.
// Certificates are made with Debian's openssl CLI for each test.
#include <chrono>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/calibration_data.h"
#include "client/quantd_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace quantd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kModel = SourcePath("examples/digits/model.onnx");
const std::string kTestX = SourcePath("examples/digits/test_x.npy");

// A CA, a server certificate for 127.0.0.1/localhost and a client
// certificate signed by it, plus an unrelated CA.
class Pki {
 public:
  Pki() {
    ok_ = MakeCa("ca") && MakeCa("other_ca") &&
          MakeLeaf("server",
                   "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                   "extendedKeyUsage=serverAuth\n") &&
          MakeLeaf("client", "extendedKeyUsage=clientAuth\n");
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string Cert(const std::string& name) const {
    return dir_.File(name + ".pem");
  }
  std::string Key(const std::string& name) const {
    return dir_.File(name + ".key");
  }
  std::string File(const std::string& name) const { return dir_.File(name); }

 private:
  bool Run(const std::vector<std::string>& argv) {
    CommandResult r = RunCommand(argv);
    if (r.exit_code != 0) error_ += r.err;
    return r.exit_code == 0;
  }
  bool MakeCa(const std::string& name) {
    return Run({"openssl",
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                Key(name),
                "-out",
                Cert(name),
                "-days",
                "2",
                "-subj",
                "/CN=quantd " + name,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign"});
  }
  bool MakeLeaf(const std::string& name, const std::string& extensions) {
    WriteFileOrDie(dir_.File(name + ".ext"), extensions);
    return Run({"openssl", "req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", Key(name),
                "-out", dir_.File(name + ".csr"), "-subj", "/CN=" + name}) &&
           Run({"openssl", "x509", "-req", "-in", dir_.File(name + ".csr"),
                "-CA", Cert("ca"), "-CAkey", Key("ca"), "-set_serial",
                name == "server" ? "2" : "3", "-days", "2", "-out", Cert(name),
                "-extfile", dir_.File(name + ".ext")});
  }

  TempDir dir_;
  bool ok_ = false;
  std::string error_;
};

CommandResult Quantctl(const ServerProcess& server,
                       std::vector<std::string> args) {
  args.insert(args.begin(), QUANTCTL_BIN);
  args.push_back("--server=" + server.target());
  args.push_back("--timeout=30");
  return RunCommand(args);
}

class SecurityE2eTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(pki_.ok()) << pki_.error(); }
  Pki pki_;
};

TEST_F(SecurityE2eTest, TlsNeedsTheCaThatSignedTheServer) {
  ServerProcess server({"--tls_cert_file=" + pki_.Cert("server"),
                        "--tls_key_file=" + pki_.Key("server")});
  ASSERT_TRUE(server.ok()) << server.startup_output();
  EXPECT_THAT(server.startup_output(), HasSubstr("TLS"));

  CommandResult r =
      Quantctl(server, {"info", "--json", "--tls_ca_file=" + pki_.Cert("ca")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("DYNAMIC_RANGE"));
  r = Quantctl(server, {"health", "--tls_ca_file=" + pki_.Cert("ca")});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // A TLS client that trusts another CA cannot verify the server.
  client::Client::Options options;
  options.target = server.target();
  options.deadline = absl::Seconds(30);
  options.tls.use_tls = true;
  options.tls.root_certs_pem = ReadFileOrDie(pki_.Cert("other_ca"));
  absl::StatusOr<quantd::v1::ServerInfo> info =
      client::Client(options).GetServerInfo();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable)
      << info.status();

  // Neither does a plaintext client.
  r = Quantctl(server, {"info"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("UNAVAILABLE: "));
}

TEST_F(SecurityE2eTest, MutualTlsRefusesClientsWithoutACertificate) {
  ServerProcess server({"--tls_cert_file=" + pki_.Cert("server"),
                        "--tls_key_file=" + pki_.Key("server"),
                        "--tls_client_ca_file=" + pki_.Cert("ca")});
  ASSERT_TRUE(server.ok()) << server.startup_output();
  EXPECT_THAT(server.startup_output(), HasSubstr("mutual TLS"));

  CommandResult r =
      Quantctl(server, {"info", "--tls_ca_file=" + pki_.Cert("ca")});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, StartsWith("UNAVAILABLE: "));

  r = Quantctl(server, {"info", "--tls_ca_file=" + pki_.Cert("ca"),
                        "--tls_cert_file=" + pki_.Cert("client"),
                        "--tls_key_file=" + pki_.Key("client")});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // A certificate from a CA the server does not trust is refused too.
  client::Client::Options options;
  options.target = server.target();
  options.deadline = absl::Seconds(30);
  options.tls.use_tls = true;
  options.tls.root_certs_pem = ReadFileOrDie(pki_.Cert("ca"));
  options.tls.cert_chain_pem = ReadFileOrDie(pki_.Cert("other_ca"));
  options.tls.private_key_pem = ReadFileOrDie(pki_.Key("other_ca"));
  EXPECT_FALSE(client::Client(options).GetServerInfo().ok());
}

TEST_F(SecurityE2eTest, TlsFlagsMustComeInPairs) {
  CommandResult r =
      RunCommand({QUANTD_SERVER_BIN, "--port=0", "--metrics_port=-1",
                  "--tls_cert_file=" + pki_.Cert("server")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--tls_key_file"));
  r = RunCommand({QUANTD_SERVER_BIN, "--port=0", "--metrics_port=-1",
                  "--tls_client_ca_file=" + pki_.Cert("ca")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--tls_cert_file"));
}

TEST_F(SecurityE2eTest, BearerTokenGuardsTheServiceButNotHealth) {
  WriteFileOrDie(pki_.File("token"), "s3cret-token\n");
  WriteFileOrDie(pki_.File("wrong"), "s3cret-tokeN\n");
  ServerProcess server({"--auth_token_file=" + pki_.File("token")});
  ASSERT_TRUE(server.ok()) << server.startup_output();
  TempDir tmp;
  const std::string out = tmp.File("out.onnx");

  CommandResult r = Quantctl(server, {"info"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("UNAUTHENTICATED: "));
  EXPECT_THAT(r.err, HasSubstr("missing or invalid bearer token"));
  r = Quantctl(server, {"quantize", "--model=" + kModel, "--output=" + out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("UNAUTHENTICATED: "));

  r = Quantctl(server, {"info", "--token_file=" + pki_.File("wrong")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("UNAUTHENTICATED: "));
  r = Quantctl(server, {"calibrate", "--model=" + kModel, "--data=" + kTestX,
                        "--output=" + tmp.File("ranges.pb"),
                        "--token_file=" + pki_.File("wrong")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("UNAUTHENTICATED: "));

  r = Quantctl(server, {"info", "--token_file=" + pki_.File("token")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = Quantctl(server, {"quantize", "--model=" + kModel, "--output=" + out,
                        "--token_file=" + pki_.File("token")});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  r = Quantctl(server, {"health"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("SERVING"));
}

TEST_F(SecurityE2eTest, BearerTokenOverTlsUsesCallCredentials) {
  WriteFileOrDie(pki_.File("token"), "tls-token");
  ServerProcess server({"--tls_cert_file=" + pki_.Cert("server"),
                        "--tls_key_file=" + pki_.Key("server"),
                        "--auth_token_file=" + pki_.File("token")});
  ASSERT_TRUE(server.ok()) << server.startup_output();
  CommandResult r =
      Quantctl(server, {"info", "--tls_ca_file=" + pki_.Cert("ca")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, StartsWith("UNAUTHENTICATED: "));
  r = Quantctl(server, {"info", "--tls_ca_file=" + pki_.Cert("ca"),
                        "--token_file=" + pki_.File("token")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Polls /metrics until the in-flight jobs gauge reads `jobs`.
bool WaitForInflightJobs(int metrics_port, int jobs) {
  const std::regex gauge("\nquantd_inflight_jobs " + std::to_string(jobs) +
                         "(\\.0*)?\n");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    if (std::regex_search(HttpGet(metrics_port, "/metrics"), gauge)) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

TEST_F(SecurityE2eTest, JobsBeyondTheLimitAreRefusedAtOnce) {
  ServerProcess server({"--max_concurrent_jobs=1", "--max_queued_jobs=0"});
  ASSERT_TRUE(server.ok()) << server.startup_output();
  TempDir tmp;

  CommandResult r = Quantctl(server, {"info", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"maxConcurrentJobs\":1"));

  // A Calibrate call whose job takes the one slot and waits for batches: the
  // stream stays open (no half-close) until `release`.
  absl::StatusOr<client::CalibrationInput> input =
      client::ParseCalibrationInput(kTestX);
  ASSERT_TRUE(input.ok()) << input.status();
  absl::StatusOr<std::unique_ptr<client::CalibrationData>> data =
      client::CalibrationData::Open({*input}, 16);
  ASSERT_TRUE(data.ok()) << data.status();
  absl::Notification release;
  int batches_sent = 0;
  client::BatchSource source =
      [&]() -> absl::StatusOr<std::optional<quantd::v1::TensorBatch>> {
    if (batches_sent++ == 0) return (*data)->Next();
    release.WaitForNotification();
    return std::nullopt;
  };
  client::Client::Options options;
  options.target = server.target();
  options.deadline = absl::Seconds(120);
  client::Client client(options);
  quantd::v1::CalibrateConfig config;
  config.set_method("min_max");
  const std::string model = ReadFileOrDie(kModel);
  absl::StatusOr<quantd::v1::CalibrationResult> held;
  std::thread holder(
      [&] { held = client.Calibrate(config, model, std::move(source)); });

  const bool running = WaitForInflightJobs(server.metrics_port(), 1);
  EXPECT_TRUE(running) << HttpGet(server.metrics_port(), "/metrics");
  if (running) {
    const absl::Time start = absl::Now();
    r = Quantctl(server, {"quantize", "--model=" + kModel,
                          "--output=" + tmp.File("busy.onnx"),
                          "--method=dynamic_range"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, StartsWith("RESOURCE_EXHAUSTED: server busy: 1 jobs in "
                                  "flight (limit 1)"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  }

  release.Notify();
  holder.join();
  EXPECT_TRUE(held.ok()) << held.status();

  r = Quantctl(
      server, {"quantize", "--model=" + kModel,
               "--output=" + tmp.File("after.onnx"), "--method=dynamic_range"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace quantd::testing
