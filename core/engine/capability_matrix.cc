#include "core/engine/capability_matrix.h"

#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/engine/capabilities.h"
#include "core/engine/resolved_options.h"

namespace quantd {

std::string CapabilityMatrixMarkdown() {
  const auto& table = CapabilityTable();
  // Keep the table's own order for methods, op sets and precisions.
  std::vector<std::string> methods;
  std::vector<int> op_sets;
  std::vector<int> precisions;
  auto add_unique = [](auto& list, const auto& v) {
    for (const auto& x : list) {
      if (x == v) return;
    }
    list.push_back(v);
  };
  std::map<std::tuple<std::string, int, int>, int> cell_index;
  for (int i = 0; i < static_cast<int>(table.size()); ++i) {
    const auto& c = table[i];
    add_unique(methods, c.method());
    add_unique(op_sets, static_cast<int>(c.op_set()));
    add_unique(precisions, static_cast<int>(c.precision()));
    cell_index[{c.method(), c.op_set(), c.precision()}] = i;
  }

  std::string out =
      "# Capability matrix\n\n"
      "<!-- Generated from core/engine/capabilities.cc by "
      "scripts/update_docs.sh; do not edit by hand. -->\n\n"
      "What quantd produces for each `quantization_method` x `op_set` x "
      "`quantization_precision` of `tensorflow.quantization."
      "QuantizationOptions`. A \"no\" cell is refused with an error that "
      "names the combination and says why; `quantctl info` prints the same "
      "table from a running server.\n";
  int footnote = 0;
  std::string notes;
  for (const std::string& method : methods) {
    absl::StrAppend(&out, "\n## ", method, "\n\n| precision |");
    for (int o : op_sets) absl::StrAppend(&out, " ", OpSetName(o), " |");
    absl::StrAppend(&out, "\n|---|");
    for (size_t i = 0; i < op_sets.size(); ++i) absl::StrAppend(&out, "---|");
    absl::StrAppend(&out, "\n");
    for (int p : precisions) {
      absl::StrAppend(&out, "| ", PrecisionName(p), " |");
      for (int o : op_sets) {
        auto it = cell_index.find({method, o, p});
        if (it == cell_index.end()) {
          absl::StrAppend(&out, " - |");
          continue;
        }
        const auto& c = table[it->second];
        ++footnote;
        absl::StrAppend(&out, " ", c.supported() ? "yes" : "no", " [", footnote,
                        "] |");
        absl::StrAppend(&notes, footnote, ". ", method, " + ", OpSetName(o),
                        " + ", PrecisionName(p), ": ", c.note(), "\n");
      }
      absl::StrAppend(&out, "\n");
    }
  }
  absl::StrAppend(&out, "\n## Notes\n\n", notes);
  return out;
}

}  // namespace quantd
