// declaresModuleData on nvcc output (data_kernels.cu built four ways, as cubin and PTX), on
// the cubins inside a real fatbin, and on hand-written PTX corner cases.
#include "common/fatbin/fatbin.h"
#include "common/fatbin/module_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tally::fatbin {
namespace {

std::vector<uint8_t> readInput(const std::string& name) {
  std::ifstream file(std::string(TALLY_FATBIN_INPUT_DIR) + "/" + name, std::ios::binary);
  const std::string data(std::istreambuf_iterator<char>(file), {});
  return std::vector<uint8_t>(data.begin(), data.end());
}

bool declares(std::string_view text) {
  return declaresModuleData({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

class ModuleDataOfNvccOutput : public testing::TestWithParam<const char*> {};

TEST_P(ModuleDataOfNvccOutput, PlainKernelsDeclareNoneEveryVariableKindIsSeen) {
  const std::string form = GetParam();
  const auto plain = readInput("data_PLAIN." + form);
  ASSERT_FALSE(plain.empty());
  EXPECT_FALSE(declaresModuleData(plain)) << form;
  for (const char* kind : {"DEVICE_GLOBAL", "CONSTANT", "STATIC_GLOBAL"}) {
    const auto image = readInput(std::string("data_") + kind + "." + form);
    ASSERT_FALSE(image.empty()) << kind;
    EXPECT_TRUE(declaresModuleData(image)) << kind << " as " << form;
  }
}

INSTANTIATE_TEST_SUITE_P(CubinAndPtx, ModuleDataOfNvccOutput, testing::Values("cubin", "ptx"));

TEST(ModuleData, KernelsOfARealFatbinDeclareNone) {
  const auto container = readInput("kernels_default.fatbin");
  std::vector<Entry> entries;
  std::string error;
  ASSERT_TRUE(parseContainer(container, entries, error)) << error;
  ASSERT_FALSE(entries.empty());
  for (const Entry& entry : entries) {
    EXPECT_FALSE(declaresModuleData({reinterpret_cast<const uint8_t*>(entry.payload.data()), entry.payload.size()}))
        << entryName(entry);
  }
}

TEST(ModuleData, PtxParameterAttributesAndSharedMemoryAreNotData) {
  EXPECT_FALSE(declares(".version 8.0\n.target sm_90\n.address_size 64\n"
                        ".extern .shared .align 16 .b8 smem[];\n"
                        "// .global .u32 commented;\n/* .const .f32 alsoCommented; */\n"
                        ".visible .entry k(.param .u64 .ptr .global .align 8 k_param_0)\n"
                        "{\n .reg .b64 %rd<2>;\n ld.param.u64 %rd1, [k_param_0];\n"
                        " st.global.u32 [%rd1], 0;\n ret;\n}\n"));
}

TEST(ModuleData, PtxModuleScopeDataIsSeen) {
  EXPECT_TRUE(declares(".version 8.0\n.target sm_90\n.address_size 64\n.global .align 4 .u32 counter;\n"));
  EXPECT_TRUE(declares(".version 8.0\n.target sm_90\n.address_size 64\n.visible .const .align 4 .f32 c[4];\n"));
  EXPECT_TRUE(declares(".version 8.0\n.target sm_90\n.address_size 64\n.global .texref tex;\n"));
}

TEST(ModuleData, UnknownOrMalformedImagesCountAsData) {
  EXPECT_TRUE(declares("not a module"));
  std::vector<uint8_t> truncated = readInput("data_PLAIN.cubin");
  ASSERT_GT(truncated.size(), 80u);
  truncated.resize(80);  // the ELF header survives, the section table does not
  EXPECT_TRUE(declaresModuleData(truncated));
}

}  // namespace
}  // namespace tally::fatbin
