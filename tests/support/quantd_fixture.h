// A test suite sharing one real quantd process on free ports (starting it
// costs more than the calls), with quantctl pointed at it.
#ifndef QUANTD_TESTS_SUPPORT_QUANTD_FIXTURE_H_
#define QUANTD_TESTS_SUPPORT_QUANTD_FIXTURE_H_

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace quantd::testing {

class QuantdServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->ok())
        << "quantd did not start; it printed: " << server_->startup_output();
  }

  // Runs quantctl ARGS... --server=<this suite's server>.
  CommandResult Quantctl(std::vector<std::string> args) {
    args.insert(args.begin(), QUANTCTL_BIN);
    args.push_back("--server=" + server_->target());
    return RunCommand(args);
  }

  // The server answers health checks with SERVING (after bad calls, say).
  void ExpectServing() {
    CommandResult r = Quantctl({"health"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  }

  static inline ServerProcess* server_ = nullptr;
};

}  // namespace quantd::testing

#endif  // QUANTD_TESTS_SUPPORT_QUANTD_FIXTURE_H_
