// quantctl: the command-line client of quantd, on top of the C++ SDK.
//
//   quantctl quantize --server=T --model=IN --output=OUT [--options=F]
//                     [--method=..] [--precision=..] [--op_set=..] [--json]
//                     [--calibration=RANGES.pb]
//                     [--calibration_data=[NAME=]X.npy ...]
//                     [--sample_axis=NAME=K|NAME=none ...] [--unbatched]
//                     [--report=REPORT.html]
//                     [--save_as_external_data=auto|true|false]
//   quantctl calibrate --server=T --model=IN --data=[NAME=]X.npy [...]
//                      --output=RANGES.pb [--batch_size=N] [--method=..]
//                      [--sample_axis=NAME=K|NAME=none ...] [--unbatched]
//                      [--per_channel] [--json]
//
// Calibration arrays are cut into batches along their first axis, or the
// axis --sample_axis gives (a recurrent state [layers, batch, hidden]: 1);
// a scalar, or an array given NAME=none, goes whole with every batch.
// --unbatched sends one sample per batch without its sample axis, for a
// model that takes no batch axis.
// A --model saved with ONNX external data has its data files read from
// beside it (locations below its directory only) and streamed after it, so
// a model over 2 GB goes through.
//   quantctl info --server=T [--json]
//   quantctl health --server=T
//
// Every command also takes the connection flags [--tls_ca_file=CA.pem
// [--tls_cert_file=C.pem --tls_key_file=K.pem]] [--token_file=F]
// [--retries=N]. --server may list several replicas, "IP:PORT,IP:PORT,...":
// calls are spread over them (round_robin, in an order shuffled per run) and
// a call refused with UNAVAILABLE, or cancelled by a replica shutting down
// (CANCELLED), is retried, on another replica if one is up.
//
// Exit codes: 0 success, 1 the call (or a file) failed, 2 usage. Errors go to
// stderr as "<GRPC_CODE>: <message>".
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/calibration_data.h"
#include "client/external_data.h"
#include "client/file_util.h"
#include "client/quantctl_options.h"
#include "client/quantd_client.h"
#include "client/report_html.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(std::string, server, "",
          "quantd target: localhost:50051, dns:///quantd.svc:50051, or a "
          "list of replicas 10.0.0.1:50051,10.0.0.2:50051.");
ABSL_FLAG(std::string, model, "", "Input ONNX model.");
ABSL_FLAG(std::string, output, "",
          "Where to write the quantized model (quantize) or the ranges "
          "(calibrate).");
ABSL_FLAG(std::string, save_as_external_data, "auto",
          "quantize: how to write --output. true: tensors of 1 KiB and more "
          "in a data file beside it (<output>.data), as ONNX's "
          "save_as_external_data writes them; false: one file; auto: the "
          "way --model was saved.");
ABSL_FLAG(std::string, options, "",
          "QuantizationOptions in protobuf text format.");
ABSL_FLAG(std::string, method, "",
          "quantize: dynamic_range | static_range. calibrate: the observer, "
          "min_max (default) | last_value | moving_average | percentile | "
          "mse | entropy | entropy_unguarded.");
ABSL_FLAG(std::string, precision, "", "w8a8 | w4a8 | w4a4 | full.");
ABSL_FLAG(std::string, op_set, "", "tf | xla | uniform_quantized.");
ABSL_FLAG(bool, json, false, "Print one JSON object on stdout.");
ABSL_FLAG(double, timeout, 0,
          "Deadline of the call in seconds, retries included; 0: none.");
ABSL_FLAG(int32_t, retries, 3,
          "Retries of a call refused with UNAVAILABLE (replica down or "
          "draining) or CANCELLED by a replica shutting down, with "
          "exponential backoff and jitter; 0: none.");
ABSL_FLAG(int64_t, batch_size, 0,
          "Samples per calibration batch; 0: 32, or 1 with --unbatched.");
ABSL_FLAG(bool, unbatched, false,
          "The model takes one sample at a time with no batch axis (e.g. "
          "torchvision's detection models, an image [3, H, W]): each "
          "calibration batch is one sample, sent without its sample axis.");
ABSL_FLAG(bool, per_channel, false,
          "calibrate: also collect per-channel ranges.");
ABSL_FLAG(std::string, calibration, "",
          "quantize: a CalibrationResult (binary proto, from quantctl "
          "calibrate) with the activation ranges for static_range.");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle; enables TLS and verifies the server against it.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate for mutual TLS (with --tls_key_file; needs "
          "--tls_ca_file).");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the bearer token (surrounding whitespace trimmed), "
          "sent as 'authorization: Bearer <token>'.");
ABSL_FLAG(std::string, report, "",
          "quantize: also write a self-contained HTML report (model summary, "
          "options, per-tensor table, fidelity with a per-layer SQNR chart) "
          "to this file, atomically.");
ABSL_FLAG(int32_t, block_size, 0,
          "quantize: weight_params.block_size, one weight scale per block of "
          "N values along the input axis of MatMul / Gemm weights and of "
          "4-bit Conv weights (N input channels at each kernel tap; a power "
          "of two, 16..4096); 0: per output channel.");
ABSL_FLAG(std::string, weight_range, "",
          "quantize: weight_params.range, how each weight channel's or "
          "block's range is chosen: min_max (its extremes, the default) or "
          "mse (the range with the least squared rounding error, clipping a "
          "few outliers; helps 4-bit weights most).");
ABSL_FLAG(int32_t, weight_bits, 0,
          "quantize: weight_params.bits (2..8); 0: the precision's (8, or 4 "
          "for w4a8 / w4a4). 7 is ONNX Runtime's reduce_range: on x86 CPUs "
          "without VNNI its u8 x s8 kernels add pairs of products in int16, "
          "which 8-bit weights can saturate.");
ABSL_FLAG(int64_t, min_num_elements_for_weights, 0,
          "quantize: options.min_num_elements_for_weights, set when not 0 "
          "(overrides --options): weights with fewer elements stay float; "
          "-1 quantizes every weight. With static_range, ONNX Runtime's "
          "extended level quantizes a float weight between a "
          "DequantizeLinear and a QuantizeLinear itself, per tensor.");
ABSL_FLAG(int32_t, holdout_batches, 0,
          "quantize (static_range with --calibration_data): the first N "
          "batches are kept back from calibration and the fidelity report "
          "(and --target_sqnr_db) is measured on them alone.");
ABSL_FLAG(double, target_sqnr_db, 0,
          "quantize (static_range with --calibration_data): the worst output "
          "SQNR to reach; nodes that add the most error stay float until it "
          "is met. 0: no search.");
ABSL_FLAG(double, target_agreement, 0,
          "quantize (static_range with --calibration_data): the worst top-1 "
          "agreement with float (0..1] over the outputs with a class axis; "
          "same search as --target_sqnr_db (with both, both must be met). "
          "0: no search.");
ABSL_FLAG(std::string, allowed_precisions, "",
          "quantize, with --target_sqnr_db or --target_agreement: the "
          "precisions the search may raise a node to, comma-separated from "
          "w4a4,w4a8,w8a8,full (must include --precision). Empty: all.");
ABSL_FLAG(std::string, weight_algorithm, "",
          "quantize: how weights are rounded: rtn (to nearest, the default), "
          "gptq (GPTQ), awq (AWQ's per-channel factors, then to nearest) or "
          "awq+gptq (AWQ's factors, then GPTQ), from the inputs each layer "
          "sees on --calibration_data; with "
          "dynamic_range the data serves the weights only.");
ABSL_FLAG(double, gptq_dampening, -1,
          "quantize (--weight_algorithm=gptq): gptq.dampening, the fraction "
          "of H's mean diagonal added to it (default 0.01).");
ABSL_FLAG(bool, gptq_act_order, false,
          "quantize (--weight_algorithm=gptq): round the columns of the "
          "inputs with the most energy first.");
ABSL_FLAG(bool, cross_check, false,
          "quantize (--weight_algorithm=gptq, awq or awq+gptq): keep GPTQ's "
          "rounding and AWQ's factors only where, fitted on half of the "
          "calibration samples, they beat rounding to nearest on the other "
          "half (about 1.5x GPTQ's time).");
ABSL_FLAG(bool, bias_correction, false,
          "quantize: add each Conv / Gemm weight's expected output shift on "
          "--calibration_data to its layer's bias (either method).");
ABSL_FLAG(std::string, smoothquant, "",
          "quantize: SmoothQuant with this alpha in [0, 1] (bare "
          "--smoothquant: 0.5), or auto (each value's alpha chosen by the "
          "predicted noise): migrate activation outliers into the weights, "
          "from --calibration_data (either method).");
ABSL_FLAG(bool, equalize, false,
          "quantize: cross-layer equalization of consecutive layers' "
          "weight ranges (data-free, either method).");
ABSL_FLAG(std::string, calibration_method, "",
          "quantize: the observer for --calibration_data (default min_max), "
          "or auto: min_max, percentile, mse, entropy and entropy_unguarded "
          "each quantize the model and the one closest to float at the "
          "outputs is kept (one quantization and fidelity run each).");
ABSL_FLAG(double, headroom, 0,
          "quantize (with --calibration_data) and calibrate: widen every "
          "calibrated activation range by this factor in [1, 16] so that "
          "unseen data a little beyond the calibration extremes is not "
          "clipped; 0: none.");
ABSL_FLAG(bool, auto_headroom, false,
          "quantize (with --calibration_data, observer min_max): choose the "
          "headroom (1, 1.1, 1.25, 1.5, 2, times --headroom) by "
          "cross-validation over the calibration batches (one quantization "
          "per factor and fold).");

namespace {

using quantd::client::Client;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// With the default backoff, 10 retries already wait over half a minute.
constexpr int kMaxRetries = 10;

constexpr char kUsage[] =
    "usage:\n"
    "  quantctl quantize --server=T --model=IN --output=OUT [--options=F]\n"
    "                    [--method=dynamic_range|static_range]\n"
    "                    [--precision=w8a8|w4a8|w4a4|full]\n"
    "                    [--op_set=tf|xla|uniform_quantized] [--json]\n"
    "                    [--block_size=N] [--weight_range=min_max|mse]\n"
    "                    [--target_sqnr_db=DB]\n"
    "                    [--target_agreement=Y]\n"
    "                    [--allowed_precisions=w4a8,w8a8,full]\n"
    "                    [--weight_bits=N] [--holdout_batches=N]\n"
    "                    [--weight_algorithm=rtn|gptq|awq|awq+gptq\n"
    "                     [--gptq_dampening=X] [--gptq_act_order]\n"
    "                     [--cross_check]]\n"
    "                    [--bias_correction]\n"
    "                    [--smoothquant[=ALPHA|auto]] [--equalize]\n"
    "                    [--min_num_elements_for_weights=N]\n"
    "                    [--calibration=RANGES.pb]\n"
    "                    [--calibration_data=[NAME=]X.npy ...]\n"
    "                    [--calibration_method=M] [--batch_size=N]\n"
    "                    [--headroom=F] [--auto_headroom]\n"
    "                    [--sample_axis=NAME=K|NAME=none ...] [--unbatched]\n"
    "                    [--report=REPORT.html]\n"
    "                    [--timeout=SECONDS]\n"
    "  quantctl calibrate --server=T --model=IN --data=[NAME=]X.npy\n"
    "                     [--data=NAME=Y.npy ...] --output=RANGES.pb\n"
    "                     [--batch_size=N (32)] [--per_channel] [--json]\n"
    "                     [--sample_axis=NAME=K|NAME=none ...] [--unbatched]\n"
    "                     [--method=min_max|last_value|moving_average|\n"
    "                               percentile|mse|entropy|\n"
    "                               entropy_unguarded]\n"
    "                     [--headroom=F]\n"
    "                     [--timeout=SECONDS]\n"
    "  quantctl info --server=T [--json] [--timeout=SECONDS]\n"
    "  quantctl health --server=T [--timeout=SECONDS]\n"
    "every command: [--tls_ca_file=CA.pem [--tls_cert_file=CERT.pem\n"
    "                --tls_key_file=KEY.pem]] [--token_file=FILE]\n"
    "               [--retries=N (3)]; --server=IP:PORT,IP:PORT,... spreads\n"
    "               calls over several replicas\n";

int UsageError(absl::string_view message) {
  absl::FPrintF(stderr, "INVALID_ARGUMENT: %s\n%s", message, kUsage);
  return kExitUsage;
}

int Fail(const absl::Status& status) {
  absl::FPrintF(stderr, "%s: %s\n", absl::StatusCodeToString(status.code()),
                status.message());
  return kExitFailure;
}

// The flags each command takes; anything else is a usage error.
const std::map<std::string, std::set<std::string>>& CommandFlags() {
  static auto* flags = new std::map<std::string, std::set<std::string>>{
      {"quantize",
       {"server",
        "model",
        "output",
        "options",
        "method",
        "precision",
        "op_set",
        "json",
        "timeout",
        "calibration",
        "calibration_data",
        "calibration_method",
        "batch_size",
        "sample_axis",
        "unbatched",
        "report",
        "block_size",
        "weight_range",
        "target_sqnr_db",
        "weight_bits",
        "holdout_batches",
        "min_num_elements_for_weights",
        "weight_algorithm",
        "gptq_dampening",
        "gptq_act_order",
        "cross_check",
        "bias_correction",
        "smoothquant",
        "equalize",
        "target_agreement",
        "allowed_precisions",
        "headroom",
        "auto_headroom",
        "save_as_external_data"}},
      {"calibrate",
       {"server", "model", "output", "data", "batch_size", "sample_axis",
        "unbatched", "method", "per_channel", "json", "timeout", "headroom"}},
      {"info", {"server", "json", "timeout"}},
      {"health", {"server", "timeout"}},
  };
  static const bool connection_flags_added = [] {
    for (auto& [command, names] : *flags) {
      names.insert({"tls_ca_file", "tls_cert_file", "tls_key_file",
                    "token_file", "retries"});
    }
    return true;
  }();
  (void)connection_flags_added;
  return *flags;
}

// Flags that may be given more than once; their values are collected here
// rather than in absl flags (which would keep only the last).
std::map<std::string, std::vector<std::string>>& RepeatedFlags() {
  static auto* values = new std::map<std::string, std::vector<std::string>>{
      {"data", {}}, {"calibration_data", {}}, {"sample_axis", {}}};
  return *values;
}

// Sets the flags from `--name=value`, `--name value` and `--[no]bool`. Our
// own loop rather than absl::ParseCommandLine, which exits with 1 on a bad
// flag where we promise 2, and knows nothing of commands.
absl::Status ParseFlags(const std::vector<std::string>& args,
                        const std::set<std::string>& allowed) {
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (!absl::StartsWith(arg, "-")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "'"));
    }
    arg = absl::StripPrefix(absl::StripPrefix(arg, "-"), "-");
    std::string name(arg.substr(0, arg.find('=')));
    std::string value;
    const bool has_value = arg.find('=') != absl::string_view::npos;
    if (has_value) value = std::string(arg.substr(arg.find('=') + 1));
    if (auto repeated = RepeatedFlags().find(name);
        repeated != RepeatedFlags().end() && allowed.count(name)) {
      if (!has_value) {
        if (i + 1 >= args.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("--", name, " needs a value"));
        }
        value = args[++i];
      }
      repeated->second.push_back(value);
      continue;
    }
    absl::CommandLineFlag* flag =
        allowed.count(name) ? absl::FindCommandLineFlag(name) : nullptr;
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no") &&
        allowed.count(name.substr(2))) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>()) {
        value = "false";
      } else {
        flag = nullptr;
      }
    } else if (flag != nullptr && !has_value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (name == "smoothquant") {
        value = "0.5";  // --smoothquant[=ALPHA]: the paper's default.
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value"));
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", args[i], "' for this command"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", error));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Client::Options> ClientOptions() {
  Client::Options options;
  options.target = absl::GetFlag(FLAGS_server);
  if (options.target.empty()) {
    return absl::InvalidArgumentError("--server is required");
  }
  const double timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout < 0 || std::isnan(timeout)) {
    return absl::InvalidArgumentError("--timeout must be >= 0 seconds");
  }
  if (timeout > 0) options.deadline = absl::Seconds(timeout);
  const int retries = absl::GetFlag(FLAGS_retries);
  if (retries < 0 || retries > kMaxRetries) {
    return absl::InvalidArgumentError(
        absl::StrCat("--retries must be in 0..", kMaxRetries));
  }
  options.retry.max_retries = retries;
  // Only for a person watching: scripts get one "<CODE>: <message>" line on
  // stderr, whose message says how many attempts were made. \r\033[K clears
  // the progress line first.
  if (isatty(STDERR_FILENO) != 0) {
    options.on_retry = [](const quantd::client::RetryEvent& event) {
      absl::FPrintF(stderr,
                    "\r\033[Kquantctl: %s failed on %s (%s: %s); retrying in "
                    "%s (attempt %d of %d)\n",
                    event.method,
                    event.peer.empty() ? "no replica" : event.peer,
                    absl::StatusCodeToString(event.status.code()),
                    event.status.message(), absl::FormatDuration(event.backoff),
                    event.failed_attempt + 1, event.max_attempts);
    };
  }

  const std::string ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  const std::string cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  const std::string key_file = absl::GetFlag(FLAGS_tls_key_file);
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together");
  }
  if (!cert_file.empty() && ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file needs --tls_ca_file (which turns TLS on)");
  }
  return options;
}

// The files behind the connection flags, read into `options` (NOT_FOUND and
// the like: exit 1, as for any other unreadable file).
absl::Status ReadConnectionFiles(Client::Options* options) {
  const struct {
    std::string path;
    std::string* out;
  } files[] = {
      {absl::GetFlag(FLAGS_tls_ca_file), &options->tls.root_certs_pem},
      {absl::GetFlag(FLAGS_tls_cert_file), &options->tls.cert_chain_pem},
      {absl::GetFlag(FLAGS_tls_key_file), &options->tls.private_key_pem},
      {absl::GetFlag(FLAGS_token_file), &options->bearer_token},
  };
  for (const auto& file : files) {
    if (file.path.empty()) continue;
    absl::StatusOr<std::string> contents = quantd::client::ReadFile(file.path);
    if (!contents.ok()) return contents.status();
    *file.out = std::move(*contents);
  }
  options->tls.use_tls = !absl::GetFlag(FLAGS_tls_ca_file).empty();
  options->bearer_token =
      std::string(absl::StripAsciiWhitespace(options->bearer_token));
  if (!absl::GetFlag(FLAGS_token_file).empty() &&
      options->bearer_token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token_file=", absl::GetFlag(FLAGS_token_file), " is empty"));
  }
  return absl::OkStatus();
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  // Scripts can rely on every field being there, zeros included.
  options.always_print_primitive_fields = true;
  std::string json;
  // Only fails for an Any of an unknown type; our messages have none.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

// "STAGE_RECEIVE" -> "receive".
std::string StageName(quantd::v1::Stage stage) {
  return absl::AsciiStrToLower(
      absl::StripPrefix(quantd::v1::Stage_Name(stage), "STAGE_"));
}

void PrintProgress(const quantd::v1::Progress& progress) {
  // \r and "erase line": one status line that keeps being rewritten.
  absl::FPrintF(stderr, "\r\033[K[%s] %d/%d %s", StageName(progress.stage()),
                progress.done(), progress.total(), progress.message());
}

// Left-aligned columns, two spaces apart, widths from the widest cell.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c],
                      c + 1 == row.size()
                          ? ""
                          : std::string(widths[c] - row[c].size() + 2, ' '));
    }
    absl::PrintF("%s\n", line);
  }
}

std::string SchemeText(const quantd::v1::QuantScheme& scheme) {
  std::string text =
      absl::StrCat(scheme.bits(), "b ", scheme.symmetric() ? "sym" : "asym");
  if (scheme.narrow_range()) absl::StrAppend(&text, " narrow");
  if (scheme.block_size() > 0) {
    absl::StrAppend(&text, " block(", scheme.block_size(), ", axis ",
                    scheme.axis(), ")");
  } else {
    absl::StrAppend(&text, scheme.per_channel()
                               ? absl::StrCat(" per-ch(", scheme.axis(), ")")
                               : " per-tensor");
  }
  if (!scheme.storage_type().empty()) {
    absl::StrAppend(&text, " ", scheme.storage_type());
  }
  if (scheme.range() == "mse") absl::StrAppend(&text, " mse-range");
  return text;
}

std::string ScaleRange(const quantd::v1::TensorReport& report) {
  if (report.scale_min() == report.scale_max()) {
    return absl::StrFormat("%.4g", report.scale_min());
  }
  return absl::StrFormat("%.4g..%.4g", report.scale_min(), report.scale_max());
}

void PrintReports(const std::vector<quantd::v1::TensorReport>& reports) {
  if (reports.empty()) return;
  std::vector<std::vector<std::string>> rows = {{"NODE", "OP", "TENSOR",
                                                 "ELEMENTS", "SCHEME", "SCALE",
                                                 "MSE", "SQNR_DB", "ROUNDING"}};
  for (const quantd::v1::TensorReport& r : reports) {
    std::string rounding = r.weight_algorithm();
    if (const std::string gptq = quantd::client::GptqOutcomeText(r);
        !gptq.empty()) {
      absl::StrAppend(&rounding, " ", gptq);
    }
    rows.push_back({r.node_name(), r.op_type(), r.tensor_name(),
                    absl::StrCat(r.num_elements()), SchemeText(r.scheme()),
                    ScaleRange(r), absl::StrFormat("%.3g", r.mse()),
                    std::isinf(r.sqnr_db())
                        ? std::string("inf")
                        : absl::StrFormat("%.1f", r.sqnr_db()),
                    rounding});
  }
  PrintTable(rows);
  absl::PrintF("\n");
}

// The fidelity report: one line per output, then the per-layer SQNRs in
// graph order with the worst flagged.
void PrintFidelity(const quantd::v1::QuantizeSummary& s) {
  if (!s.has_fidelity()) return;
  const quantd::v1::FidelityReport& f = s.fidelity();
  if (!f.evaluated()) {
    absl::PrintF("fidelity:   skipped: %s\n", f.skipped_reason());
    return;
  }
  absl::PrintF(
      "fidelity:   quantized vs float model over %d of %d calibration "
      "batches%s\n",
      f.batches_evaluated(), f.batches_received(),
      f.note().empty() ? "" : absl::StrCat(" (", f.note(), ")"));
  for (const quantd::v1::OutputFidelity& o : f.outputs()) {
    absl::PrintF("  output %s: SQNR %s dB", o.name(),
                 quantd::client::FormatDb(o.sqnr_db()));
    if (o.has_top1()) {
      absl::PrintF(", top-1 agreement %.4f (%d rows)", o.top1_agreement(),
                   o.top1_rows());
    }
    absl::PrintF(", max |error| %.4g\n", o.max_abs_error());
  }
  if (f.layers_size() == 0) return;
  absl::PrintF(
      "\nper-layer SQNR (quantized vs float activations, graph "
      "order):\n");
  const std::vector<int> worst = quantd::client::WorstLayers(f);
  std::vector<std::vector<std::string>> rows = {
      {"TENSOR", "NODE", "OP", "SQNR_DB", "MAX_ABS_ERR", ""}};
  for (int i = 0; i < f.layers_size(); ++i) {
    const quantd::v1::LayerFidelity& l = f.layers(i);
    const auto w = std::find(worst.begin(), worst.end(), i);
    rows.push_back({l.tensor_name(), l.node_name(), l.op_type(),
                    quantd::client::FormatDb(l.sqnr_db()),
                    absl::StrFormat("%.4g", l.max_abs_error()),
                    w == worst.end()
                        ? std::string()
                        : absl::StrCat("<- worst #", w - worst.begin() + 1)});
  }
  PrintTable(rows);
}

void PrintAccuracySearch(const quantd::v1::QuantizeSummary& s) {
  if (!s.has_accuracy_search()) return;
  const quantd::v1::AccuracySearch& a = s.accuracy_search();
  absl::PrintF("accuracy search: target %s, %s; %s\n",
               quantd::client::AccuracySearchGoal(a),
               a.met() ? "met" : "NOT met", a.note());
  std::vector<std::vector<std::string>> rows(1);
  for (const char* column : quantd::client::kAccuracySearchColumns) {
    rows[0].push_back(column);
  }
  rows[0].push_back("");
  for (int i = 0; i < a.rounds_size(); ++i) {
    rows.push_back(quantd::client::AccuracySearchRoundCells(a, i));
    rows.back().push_back(i == a.chosen_round() ? "<- returned" : "");
  }
  PrintTable(rows);
}

void PrintObserverChoice(const quantd::v1::QuantizeSummary& s) {
  if (!s.has_observer_choice()) return;
  const quantd::v1::ObserverChoice& c = s.observer_choice();
  absl::PrintF("%s: kept %s (each candidate compared with float on %s)\n",
               quantd::client::ObserverChoiceSearch(c),
               quantd::client::ObserverChoiceKept(c),
               quantd::client::ObserverChoiceJudgedOn(c));
  std::vector<std::vector<std::string>> rows = {
      {"CANDIDATE", "OUTPUT_SQNR_DB", "TOP1_AGREEMENT", "CLIPPED_TENSORS", ""}};
  for (const quantd::v1::ObserverCandidate& k : c.candidates()) {
    rows.push_back(
        {quantd::client::ObserverCandidateName(k.method(), k.headroom()),
         quantd::client::FormatDb(k.output_sqnr_db()),
         std::isnan(k.top1_agreement())
             ? std::string("-")
             : absl::StrFormat("%.4f", k.top1_agreement()),
         absl::StrCat(k.clipped_tensors()),
         quantd::client::IsKeptCandidate(c, k) ? "<- kept" : ""});
  }
  PrintTable(rows);
}

void PrintChannelScalings(const quantd::v1::QuantizeSummary& s) {
  if (s.channel_scalings_size() == 0) return;
  absl::PrintF("channel scalings (%s):\n",
               quantd::client::kChannelScalingLegend);
  std::vector<std::vector<std::string>> rows(1);
  for (const char* column : quantd::client::kChannelScalingColumns) {
    rows[0].push_back(
        absl::AsciiStrToUpper(absl::StrReplaceAll(column, {{" ", "_"}})));
  }
  for (const quantd::v1::ChannelScaling& c : s.channel_scalings()) {
    rows.push_back(quantd::client::ChannelScalingCells(c));
  }
  PrintTable(rows);
}

void PrintSummary(const quantd::v1::QuantizeSummary& s) {
  const double ratio =
      s.output_bytes() == 0
          ? 0.0
          : static_cast<double>(s.input_bytes()) / s.output_bytes();
  absl::PrintF(
      "model:      %d -> %d bytes (in/out ratio %.2f), opset %d -> %d\n",
      s.input_bytes(), s.output_bytes(), ratio, s.input_opset(),
      s.output_opset());
  absl::PrintF("options:    method=%s op_set=%s precision=%s\n", s.method(),
               s.op_set(), s.precision());
  if (s.model_unchanged()) {
    absl::PrintF("unchanged:  %s\n", s.unchanged_reason());
  }
  absl::PrintF("quantized:  %d tensors, %d nodes; weights %d -> %d bytes\n",
               s.quantized_tensors(), s.quantized_nodes(),
               s.weight_bytes_before(), s.weight_bytes_after());
  absl::PrintF("skipped:    %d tensors\n", s.skipped_tensors());
  for (const quantd::v1::SkippedTensor& t : s.skipped()) {
    absl::PrintF("  %s (%s %s, %d elements): %s%s\n", t.tensor_name(),
                 t.op_type(), t.node_name(), t.num_elements(),
                 quantd::v1::SkipReason_Name(t.reason()),
                 t.detail().empty() ? "" : absl::StrCat(": ", t.detail()));
  }
  std::vector<std::string> stages;
  for (const quantd::v1::StageDuration& d : s.stage_durations()) {
    stages.push_back(
        absl::StrFormat("%s %.3fs", StageName(d.stage()), d.seconds()));
  }
  absl::PrintF("stages:     %s\n", absl::StrJoin(stages, ", "));
  for (const std::string& v : s.validations()) {
    absl::PrintF("validated:  %s\n", v);
  }
  PrintChannelScalings(s);
  PrintObserverChoice(s);
  PrintFidelity(s);
  PrintAccuracySearch(s);
}

// --model: the file and, for a model saved with external data, its data
// files beside it, read while the model is sent (any size).
struct ModelFile {
  std::string bytes;
  quantd::client::ExternalDataSource external;
  bool uses_external_data = false;
  quantd::client::ModelInput input() const {
    return quantd::client::ModelInput(bytes, external);
  }
};

absl::StatusOr<ModelFile> ReadModel(const std::string& path) {
  ModelFile file;
  absl::StatusOr<std::string> bytes = quantd::client::ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  file.uses_external_data = quantd::client::UsesExternalData(*bytes);
  if (!file.uses_external_data) {
    file.bytes = *std::move(bytes);
    return file;
  }
  absl::StatusOr<quantd::client::StreamedModel> streamed =
      quantd::client::OpenModelForStreaming(
          *bytes, std::filesystem::path(path).parent_path().string());
  if (!streamed.ok()) {
    return absl::Status(streamed.status().code(),
                        absl::StrCat(path, ": ", streamed.status().message()));
  }
  absl::FPrintF(stderr,
                "sending %d external tensors (%d bytes) from %d data file(s) "
                "beside %s\n",
                streamed->info.tensors, streamed->info.bytes,
                streamed->info.files, path);
  file.bytes = std::move(streamed->model);
  file.external = std::move(streamed->external);
  return file;
}

// --calibration: a CalibrationResult in binary proto format.
absl::StatusOr<quantd::v1::CalibrationResult> ReadCalibrationResult(
    const std::string& path) {
  absl::StatusOr<std::string> bytes = quantd::client::ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  quantd::v1::CalibrationResult result;
  if (!result.ParseFromString(*bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": not a CalibrationResult (binary proto, as quantctl calibrate "
        "writes)"));
  }
  return result;
}

// --data / --calibration_data values, zipped and batched by --batch_size.
absl::StatusOr<std::unique_ptr<quantd::client::CalibrationData>>
OpenCalibrationData(const std::vector<std::string>& flags) {
  std::vector<quantd::client::CalibrationInput> inputs;
  for (const std::string& flag : flags) {
    absl::StatusOr<quantd::client::CalibrationInput> input =
        quantd::client::ParseCalibrationInput(flag);
    if (!input.ok()) return input.status();
    inputs.push_back(std::move(*input));
  }
  if (absl::Status s = quantd::client::ApplySampleAxes(
          RepeatedFlags()["sample_axis"], &inputs);
      !s.ok()) {
    return s;
  }
  const bool unbatched = absl::GetFlag(FLAGS_unbatched);
  int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  if (batch_size == 0) batch_size = unbatched ? 1 : 32;
  return quantd::client::CalibrationData::Open(inputs, batch_size, unbatched);
}

// The observers the server knows, as CalibrateConfig.method spells them.
// "auto" only where the call quantizes (`allow_auto`): it judges each
// candidate by the quantized model.
absl::StatusOr<std::string> ObserverMethod(absl::string_view flag,
                                           const std::string& given,
                                           bool allow_auto) {
  std::vector<std::string> methods = {
      "min_max", "last_value", "moving_average",   "percentile",
      "mse",     "entropy",    "entropy_unguarded"};
  if (allow_auto) methods.push_back("auto");
  const std::string lower = absl::AsciiStrToLower(given);
  for (const std::string& method : methods) {
    if (lower == method) return lower;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", given,
                   " is not one of: ", absl::StrJoin(methods, ", ")));
}

int RunQuantize() {
  const std::string model_path = absl::GetFlag(FLAGS_model);
  const std::string output_path = absl::GetFlag(FLAGS_output);
  if (model_path.empty() || output_path.empty()) {
    return UsageError("quantize needs --model and --output");
  }
  absl::StatusOr<Client::Options> client_options = ClientOptions();
  if (!client_options.ok())
    return UsageError(client_options.status().message());

  quantd::client::QuantctlOptionFlags option_flags;
  option_flags.options_file = absl::GetFlag(FLAGS_options);
  option_flags.method = absl::GetFlag(FLAGS_method);
  option_flags.precision = absl::GetFlag(FLAGS_precision);
  option_flags.op_set = absl::GetFlag(FLAGS_op_set);
  absl::StatusOr<tensorflow::quantization::QuantizationOptions> options =
      quantd::client::BuildQuantizationOptions(option_flags);
  if (!options.ok()) return Fail(options.status());

  const std::vector<std::string>& data_flags =
      RepeatedFlags()["calibration_data"];
  const std::string calibration_method =
      absl::GetFlag(FLAGS_calibration_method);
  if (!calibration_method.empty() && data_flags.empty()) {
    return UsageError("--calibration_method needs --calibration_data");
  }
  const double headroom = absl::GetFlag(FLAGS_headroom);
  const bool auto_headroom = absl::GetFlag(FLAGS_auto_headroom);
  if ((headroom != 0 || auto_headroom) && data_flags.empty()) {
    return UsageError(
        absl::StrCat(headroom != 0 ? "--headroom" : "--auto_headroom",
                     " widens the ranges calibrated from --calibration_data"));
  }

  const std::string save_external = absl::GetFlag(FLAGS_save_as_external_data);
  if (save_external != "auto" && save_external != "true" &&
      save_external != "false") {
    return UsageError(absl::StrCat("--save_as_external_data is '",
                                   save_external,
                                   "'; it must be auto, true or false"));
  }
  absl::StatusOr<ModelFile> model = ReadModel(model_path);
  if (!model.ok()) return Fail(model.status());
  const bool output_external =
      save_external == "true" ||
      (save_external == "auto" && model->uses_external_data);

  const std::string report_path = absl::GetFlag(FLAGS_report);
  quantd::client::QuantizeReportInput report;
  report.model_path = model_path;
  report.output_path = output_path;
  google::protobuf::TextFormat::PrintToString(*options, &report.options_text);

  quantd::v1::QuantizeConfig config;
  *config.mutable_options() = std::move(*options);
  if (const double target = absl::GetFlag(FLAGS_target_sqnr_db); target != 0) {
    config.set_target_sqnr_db(target);
  }
  if (const double target = absl::GetFlag(FLAGS_target_agreement);
      target != 0) {
    config.set_target_agreement(target);
  }
  if (const std::string allowed = absl::GetFlag(FLAGS_allowed_precisions);
      !allowed.empty()) {
    absl::StatusOr<std::vector<tensorflow::quantization::QuantizationPrecision>>
        list =
            quantd::client::ParsePrecisionList("allowed_precisions", allowed);
    if (!list.ok()) return UsageError(list.status().message());
    for (auto p : *list) config.add_allowed_precisions(p);
  }
  if (const int32_t n = absl::GetFlag(FLAGS_holdout_batches); n != 0) {
    config.set_holdout_batches(n);
  }
  if (const int64_t min = absl::GetFlag(FLAGS_min_num_elements_for_weights);
      min != 0) {
    config.mutable_options()->set_min_num_elements_for_weights(min);
  }
  if (const std::string a = absl::GetFlag(FLAGS_weight_algorithm); !a.empty()) {
    if (a == "rtn") {
      config.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_RTN);
    } else if (a == "gptq") {
      config.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_GPTQ);
    } else if (a == "awq") {
      config.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_AWQ);
    } else if (a == "awq+gptq") {
      config.set_weight_algorithm(quantd::v1::WEIGHT_ALGORITHM_AWQ_GPTQ);
    } else {
      return UsageError(
          absl::StrCat("--weight_algorithm is '", a,
                       "'; it must be rtn, gptq, awq or awq+gptq"));
    }
  }
  if (const double d = absl::GetFlag(FLAGS_gptq_dampening); d != -1) {
    config.mutable_gptq()->set_dampening(d);
  }
  if (absl::GetFlag(FLAGS_gptq_act_order)) {
    config.mutable_gptq()->set_act_order(true);
  }
  if (absl::GetFlag(FLAGS_cross_check)) config.set_cross_check(true);
  if (absl::GetFlag(FLAGS_bias_correction)) config.set_bias_correction(true);
  if (const std::string a = absl::GetFlag(FLAGS_smoothquant); a == "auto") {
    config.mutable_smoothquant()->set_auto_alpha(true);
  } else if (!a.empty()) {
    double alpha = 0;
    if (!absl::SimpleAtod(a, &alpha)) {
      return UsageError(absl::StrCat("--smoothquant is '", a,
                                     "'; it must be a number in [0, 1] or "
                                     "auto"));
    }
    config.mutable_smoothquant()->set_alpha(alpha);
  }
  if (absl::GetFlag(FLAGS_equalize)) config.set_equalize(true);
  if (const int32_t bits = absl::GetFlag(FLAGS_weight_bits); bits != 0) {
    config.mutable_weight_params()->set_bits(bits);
  }
  if (const int32_t block = absl::GetFlag(FLAGS_block_size); block != 0) {
    config.mutable_weight_params()->set_block_size(block);
  }
  if (const std::string r = absl::GetFlag(FLAGS_weight_range); !r.empty()) {
    if (r == "min_max") {
      config.mutable_weight_params()->set_range(
          quantd::v1::WEIGHT_RANGE_MIN_MAX);
    } else if (r == "mse") {
      config.mutable_weight_params()->set_range(quantd::v1::WEIGHT_RANGE_MSE);
    } else {
      return UsageError(absl::StrCat("--weight_range is '", r,
                                     "'; it must be min_max or mse"));
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_calibration);
      !path.empty()) {
    absl::StatusOr<quantd::v1::CalibrationResult> ranges =
        ReadCalibrationResult(path);
    if (!ranges.ok()) return Fail(ranges.status());
    *config.mutable_calibration() = std::move(*ranges);
  }
  std::unique_ptr<quantd::client::CalibrationData> data;
  quantd::client::BatchSource batches;
  quantd::client::BatchRewind rewind;  // A retry sends the batches again.
  if (!data_flags.empty()) {
    absl::StatusOr<std::unique_ptr<quantd::client::CalibrationData>> opened =
        OpenCalibrationData(data_flags);
    if (!opened.ok()) return Fail(opened.status());
    data = std::move(*opened);
    batches = data->AsSource();
    rewind = [&data] {
      data->Rewind();
      return absl::OkStatus();
    };
    if (!calibration_method.empty()) {
      absl::StatusOr<std::string> method =
          ObserverMethod("calibration_method", calibration_method,
                         /*allow_auto=*/true);
      if (!method.ok()) return Fail(method.status());
      config.mutable_calibration_config()->set_method(*method);
    }
    if (headroom != 0) {
      config.mutable_calibration_config()->set_headroom(headroom);
    }
    if (auto_headroom) {
      config.mutable_calibration_config()->set_auto_headroom(true);
    }
  }
  quantd::client::QuantizeCallbacks callbacks;
  const bool show_progress = isatty(STDERR_FILENO) != 0;
  if (show_progress) callbacks.on_progress = PrintProgress;

  if (absl::Status status = ReadConnectionFiles(&*client_options);
      !status.ok()) {
    return Fail(status);
  }
  // An output saved with external data is written as it arrives: the
  // client holds one chunk of its data at a time.
  std::unique_ptr<quantd::client::StreamedModelWriter> writer;
  if (output_external) {
    absl::StatusOr<std::unique_ptr<quantd::client::StreamedModelWriter>>
        created = quantd::client::StreamedModelWriter::Create(output_path);
    if (!created.ok()) return Fail(created.status());
    writer = std::move(*created);
    callbacks.on_external_data = writer->Sink();
  }
  Client client(*client_options);
  absl::StatusOr<quantd::client::QuantizeOutcome> outcome =
      client.Quantize(std::move(config), model->input(), callbacks,
                      std::move(batches), std::move(rewind));
  if (show_progress) absl::FPrintF(stderr, "\r\033[K");
  if (!outcome.ok()) return Fail(outcome.status());
  const absl::Status saved =
      writer != nullptr ? writer->Finish(outcome->model)
                        : quantd::client::SaveQuantizedModel(
                              outcome->model, std::move(outcome->external_data),
                              output_path, /*as_external=*/false);
  if (!saved.ok()) return Fail(saved);
  if (!report_path.empty()) {
    report.summary = outcome->summary;
    report.tensors = outcome->reports;
    if (absl::Status status = quantd::client::WriteFileAtomically(
            report_path, quantd::client::RenderQuantizeReportHtml(report));
        !status.ok()) {
      return Fail(status);
    }
  }

  if (absl::GetFlag(FLAGS_json)) {
    std::vector<std::string> tensors;
    for (const quantd::v1::TensorReport& r : outcome->reports) {
      tensors.push_back(ToJson(r));
    }
    absl::PrintF("{\"summary\":%s,\"tensors\":[%s]}\n",
                 ToJson(outcome->summary), absl::StrJoin(tensors, ","));
    return 0;
  }
  PrintReports(outcome->reports);
  PrintSummary(outcome->summary);
  absl::PrintF("wrote:      %s%s\n", output_path,
               output_external ? absl::StrCat(" (tensors of 1 KiB and more in ",
                                              output_path, ".data)")
                               : "");
  if (!report_path.empty()) absl::PrintF("report:     %s\n", report_path);
  return 0;
}

void PrintRanges(const quantd::v1::CalibrationResult& result) {
  std::vector<std::vector<std::string>> rows = {
      {"TENSOR", "MIN", "MAX", "CHANNELS"}};
  int kept_count = 0, unbounded_count = 0;
  for (const quantd::v1::TensorRange& r : result.ranges()) {
    if (r.unbounded()) {
      rows.push_back({r.tensor_name(), "unbounded", "unbounded", "-"});
      ++unbounded_count;
      continue;
    }
    std::string channels = "-";
    if (r.channel_min_size() > 0) {
      channels =
          absl::StrFormat("%d along axis %d", r.channel_min_size(), r.axis());
    }
    const char* kept = r.kept_observed_range() ? "*" : "";
    rows.push_back({r.tensor_name(), absl::StrFormat("%.6g%s", r.min(), kept),
                    absl::StrFormat("%.6g%s", r.max(), kept), channels});
    kept_count += r.kept_observed_range() ? 1 : 0;
  }
  PrintTable(rows);
  absl::PrintF("\nmethod:     %s\nbatches:    %d\nranges:     %d\n",
               result.method(), result.batch_count(), result.ranges_size());
  if (kept_count > 0) {
    absl::PrintF(
        "kept:       %d (*: the KL threshold would have cost more squared "
        "error than it saved; the observed range was kept)\n",
        kept_count);
  }
  if (unbounded_count > 0) {
    absl::PrintF(
        "unbounded:  %d (an infinity or a value of magnitude >= 1e30: an "
        "additive mask; STATIC_RANGE leaves these float)\n",
        unbounded_count);
  }
}

int RunCalibrate() {
  const std::string model_path = absl::GetFlag(FLAGS_model);
  const std::string output_path = absl::GetFlag(FLAGS_output);
  const std::vector<std::string>& data_flags = RepeatedFlags()["data"];
  if (model_path.empty() || output_path.empty() || data_flags.empty()) {
    return UsageError("calibrate needs --model, --data and --output");
  }
  absl::StatusOr<Client::Options> client_options = ClientOptions();
  if (!client_options.ok())
    return UsageError(client_options.status().message());

  quantd::v1::CalibrateConfig config;
  const std::string method_flag = absl::GetFlag(FLAGS_method);
  absl::StatusOr<std::string> method =
      ObserverMethod("method", method_flag.empty() ? "min_max" : method_flag,
                     /*allow_auto=*/false);
  if (!method.ok()) return Fail(method.status());
  config.set_method(*method);
  config.set_per_channel(absl::GetFlag(FLAGS_per_channel));
  if (absl::GetFlag(FLAGS_headroom) != 0) {
    config.set_headroom(absl::GetFlag(FLAGS_headroom));
  }

  absl::StatusOr<std::unique_ptr<quantd::client::CalibrationData>> data =
      OpenCalibrationData(data_flags);
  if (!data.ok()) return Fail(data.status());
  absl::StatusOr<ModelFile> model = ReadModel(model_path);
  if (!model.ok()) return Fail(model.status());

  const bool show_progress = isatty(STDERR_FILENO) != 0;
  if (absl::Status status = ReadConnectionFiles(&*client_options);
      !status.ok()) {
    return Fail(status);
  }
  Client client(*client_options);
  absl::StatusOr<quantd::v1::CalibrationResult> result = client.Calibrate(
      std::move(config), model->input(), (*data)->AsSource(),
      show_progress ? PrintProgress
                    : std::function<void(const quantd::v1::Progress&)>(),
      [&data] {
        (*data)->Rewind();
        return absl::OkStatus();
      });
  if (show_progress) absl::FPrintF(stderr, "\r\033[K");
  if (!result.ok()) return Fail(result.status());
  if (absl::Status status = quantd::client::WriteFileAtomically(
          output_path, result->SerializeAsString());
      !status.ok()) {
    return Fail(status);
  }
  if (absl::GetFlag(FLAGS_json)) {
    absl::PrintF("%s\n", ToJson(*result));
    return 0;
  }
  PrintRanges(*result);
  absl::PrintF("wrote:      %s\n", output_path);
  return 0;
}

int RunInfo() {
  absl::StatusOr<Client::Options> client_options = ClientOptions();
  if (!client_options.ok())
    return UsageError(client_options.status().message());
  if (absl::Status status = ReadConnectionFiles(&*client_options);
      !status.ok()) {
    return Fail(status);
  }
  Client client(*client_options);
  absl::StatusOr<quantd::v1::ServerInfo> info = client.GetServerInfo();
  if (!info.ok()) return Fail(info.status());
  if (absl::GetFlag(FLAGS_json)) {
    absl::PrintF("%s\n", ToJson(*info));
    return 0;
  }
  absl::PrintF("version:       %s\n", info->version());
  absl::PrintF("methods:       %s\n", absl::StrJoin(info->methods(), ", "));
  absl::PrintF("op types:      %s\n",
               absl::StrJoin(info->quantizable_op_types(), ", "));
  absl::PrintF("input opsets:  >= %d (checker knows <= %d)\n",
               info->min_input_opset(), info->max_checked_opset());
  absl::PrintF(
      "limits:        model %d bytes, message %d bytes, chunk %d "
      "bytes, %d concurrent jobs, %d queued, call %s\n",
      info->limits().max_model_bytes(), info->limits().max_message_bytes(),
      info->limits().model_chunk_bytes(), info->limits().max_concurrent_jobs(),
      info->limits().max_queued_jobs(),
      info->limits().max_call_duration_seconds() > 0
          ? absl::StrCat("<= ", info->limits().max_call_duration_seconds(),
                         " s")
          : std::string("uncapped"));
  absl::PrintF("core threads:  %d\n\n", info->core_threads());
  std::vector<std::vector<std::string>> rows = {
      {"METHOD", "OP_SET", "PRECISION", "SUPPORTED", "NOTE"}};
  for (const quantd::v1::Capability& c : info->capabilities()) {
    rows.push_back(
        {c.method(), tensorflow::quantization::OpSet_Name(c.op_set()),
         tensorflow::quantization::QuantizationPrecision_Name(c.precision()),
         c.supported() ? "yes" : "no", c.note()});
  }
  PrintTable(rows);
  return 0;
}

int RunHealth() {
  absl::StatusOr<Client::Options> client_options = ClientOptions();
  if (!client_options.ok())
    return UsageError(client_options.status().message());
  if (absl::Status status = ReadConnectionFiles(&*client_options);
      !status.ok()) {
    return Fail(status);
  }
  Client client(*client_options);
  absl::StatusOr<quantd::client::ServingStatus> status = client.Health();
  if (!status.ok()) return Fail(status.status());
  absl::PrintF("%s\n", quantd::client::ServingStatusName(*status));
  return *status == quantd::client::ServingStatus::kServing ? 0 : kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  // A call streams the model through 1 MiB buffers that are freed and
  // allocated again per chunk. With glibc's defaults each one lands at the
  // top of the heap and is trimmed back to the kernel, so every chunk
  // faults its pages in anew: on a virtual machine whose page faults are
  // dear that was most of a big upload (perf: 3-4 s of a 537 MB call). A
  // short-lived tool can keep what it freed.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  if (argc < 2) return UsageError("missing command");
  const std::string command = argv[1];
  if (command == "help" || command == "--help" || command == "-h") {
    absl::PrintF("%s", kUsage);
    return 0;
  }
  const auto it = CommandFlags().find(command);
  if (it == CommandFlags().end()) {
    return UsageError(absl::StrCat("unknown command '", command, "'"));
  }
  if (absl::Status status = ParseFlags(
          std::vector<std::string>(argv + 2, argv + argc), it->second);
      !status.ok()) {
    return UsageError(status.message());
  }
  if (command == "quantize") return RunQuantize();
  if (command == "calibrate") return RunCalibrate();
  if (command == "info") return RunInfo();
  return RunHealth();
}
