// tally-ptx: inspect and transform the PTX of CUDA modules offline.
//
//   tally-ptx list FILE [--arch sm_XX]
//       one line per kernel: "<name> eligible" (every variant), "<name> eligible (sliced only:
//       <reason>)" or "<name> ineligible <reason>"
//   tally-ptx transform --variant sliced|ptb|chained FILE -o OUT.ptx [--arch sm_XX]
//       the module with every eligible kernel's <name>__tally_sliced / <name>__tally_ptb /
//       <name>__tally_chained added
//   tally-ptx print FILE -o OUT.ptx [--arch sm_XX]
//       parse and print back (what the round-trip tests check)
//
// FILE is PTX text, a fatbin, or an ELF object/executable with a .nv_fatbin section; of several
// PTX images the highest arch is used unless --arch picks one. "-o -" writes to stdout.
// Exit status: 0 on success, 1 on bad input (one line on stderr says why), 2 on bad usage.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "server/transform/eligibility.h"
#include "server/transform/parser.h"
#include "server/transform/printer.h"
#include "server/transform/chain.h"
#include "server/transform/ptb.h"
#include "server/transform/ptx_source.h"
#include "server/transform/slice.h"

namespace transform = tally::server::transform;

namespace {

constexpr int kExitBadInput = 1;
constexpr int kExitUsage = 2;

struct Options {
  std::string command;
  std::string file;
  std::string output;
  std::string variant;
  uint32_t arch = 0;
};

int usage(const std::string& why) {
  std::cerr << "tally-ptx: " << why << "\n"
            << "usage: tally-ptx list FILE [--arch sm_XX]\n"
            << "       tally-ptx transform --variant sliced|ptb|chained FILE -o OUT.ptx [--arch sm_XX]\n"
            << "       tally-ptx print FILE -o OUT.ptx [--arch sm_XX]\n";
  return kExitUsage;
}

int fail(const std::string& why) {
  std::cerr << "tally-ptx: " << why << "\n";
  return kExitBadInput;
}

std::optional<uint32_t> parseArch(const std::string& text) {
  std::string digits = text;
  for (const char* prefix : {"sm_", "compute_"}) {
    if (digits.rfind(prefix, 0) == 0) digits = digits.substr(std::string(prefix).size());
  }
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(std::stoul(digits));
}

// Returns an error message, or empty on success.
std::string parseOptions(int argc, char** argv, Options& options) {
  if (argc < 2) return "missing command";
  options.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    if (arg == "-o" || arg == "--variant" || arg == "--arch") {
      std::optional<std::string> v = value();
      if (!v) return arg + " needs a value";
      if (arg == "-o") options.output = *v;
      if (arg == "--variant") options.variant = *v;
      if (arg == "--arch") {
        std::optional<uint32_t> arch = parseArch(*v);
        if (!arch) return "bad --arch '" + *v + "' (expected sm_XX)";
        options.arch = *arch;
      }
    } else if (!arg.empty() && arg[0] == '-' && arg != "-") {
      return "unknown option " + arg;
    } else if (options.file.empty()) {
      options.file = arg;
    } else {
      return "more than one input file";
    }
  }
  if (options.file.empty()) return "missing input FILE";
  return {};
}

bool readFile(const std::string& path, std::vector<uint8_t>& bytes) {
  // A directory opens as a stream on Linux and then throws on read: refuse it first.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

bool writeOutput(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text;
    return static_cast<bool>(std::cout.flush());
  }
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out.flush());
}

// Loads FILE and parses the chosen PTX image; on failure returns false with `error` set.
bool loadModule(const Options& options, transform::Module& module, std::string& error) {
  std::vector<uint8_t> bytes;
  if (!readFile(options.file, bytes)) {
    error = "cannot read " + options.file;
    return false;
  }
  transform::PtxSourceResult source = transform::findPtx(bytes);
  if (!source.ok) {
    error = options.file + ": " + source.error;
    return false;
  }
  const transform::PtxImage* image = transform::choosePtx(source.images, options.arch);
  if (image == nullptr) {
    error = options.file + ": no PTX for sm_" + std::to_string(options.arch);
    return false;
  }
  transform::ParseResult parsed = transform::parseModule(image->text);
  if (!parsed.ok) {
    error = options.file + " (" + image->name + "): " + parsed.error;
    return false;
  }
  module = std::move(parsed.module);
  return true;
}

int list(const transform::Module& module) {
  for (const transform::Eligibility& e : transform::analyzeModule(module)) {
    std::cout << e.kernel;
    if (!e.eligible) {
      std::cout << " ineligible " << e.reason;
    } else if (!e.ptbEligible) {
      std::cout << " eligible (sliced only: " << e.ptbReason << ")";
    } else {
      std::cout << " eligible";
    }
    std::cout << "\n";
  }
  return 0;
}

int transformModule(const Options& options, const transform::Module& module) {
  transform::ModuleTransformResult result = options.variant == "ptb"       ? transform::addPtbKernels(module)
                                            : options.variant == "chained" ? transform::addChainedKernels(module)
                                                                           : transform::addSlicedKernels(module);
  if (!result.ok) return fail(result.error);
  if (!writeOutput(options.output, transform::printModule(result.module))) return fail("cannot write " + options.output);
  return 0;
}

}  // namespace

int run(int argc, char** argv) {
  Options options;
  if (std::string why = parseOptions(argc, argv, options); !why.empty()) return usage(why);
  bool writes = options.command == "transform" || options.command == "print";
  if (options.command != "list" && !writes) return usage("unknown command '" + options.command + "'");
  if (writes && options.output.empty()) return usage(options.command + " needs -o OUT");
  if (options.command == "transform") {
    if (options.variant != "sliced" && options.variant != "ptb" && options.variant != "chained") {
      return usage("--variant must be sliced, ptb or chained");
    }
  }
  transform::Module module;
  std::string error;
  if (!loadModule(options, module, error)) return fail(error);
  if (options.command == "list") return list(module);
  if (options.command == "print") {
    return writeOutput(options.output, transform::printModule(module)) ? 0 : fail("cannot write " + options.output);
  }
  return transformModule(options, module);
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what());
  }
}
