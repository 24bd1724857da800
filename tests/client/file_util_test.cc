#include "client/file_util.h"

#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quantd::client {
namespace {

namespace fs = std::filesystem;

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::path(::testing::TempDir()) /
        ("file_util_" +
         std::string(
             ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every file in the directory, so stray temp files show up.
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  fs::path dir_;
};

TEST_F(FileUtilTest, WritesThenReadsBackBinaryData) {
  const std::string data("a\0b\xff", 4);
  const std::string path = (dir_ / "out.onnx").string();
  ASSERT_TRUE(WriteFileAtomically(path, data).ok());
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, data);
  EXPECT_THAT(Files(), ::testing::ElementsAre("out.onnx"));
}

TEST_F(FileUtilTest, ReplacesAnExistingFile) {
  const std::string path = (dir_ / "out.onnx").string();
  ASSERT_TRUE(WriteFileAtomically(path, "old contents").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "new").ok());
  EXPECT_EQ(*ReadFile(path), "new");
}

TEST_F(FileUtilTest, FailedWriteLeavesNothingBehind) {
  // The target is a directory: the final rename fails.
  const fs::path target = dir_ / "taken";
  fs::create_directories(target / "inside");
  const absl::Status status = WriteFileAtomically(target.string(), "data");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr(target.string()));
  EXPECT_THAT(Files(), ::testing::ElementsAre("taken"));
}

TEST_F(FileUtilTest, AtomicFileAppearsWholeOnCommit) {
  const std::string path = (dir_ / "out.data").string();
  absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::Create(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Append("abc").ok());
  ASSERT_TRUE((*file)->Append(std::string("\0d", 2)).ok());
  EXPECT_EQ((*file)->size(), 5u);
  EXPECT_FALSE(fs::exists(path));  // Not before Commit.
  ASSERT_TRUE((*file)->Commit().ok());
  EXPECT_EQ(*ReadFile(path), std::string("abc\0d", 5));
  EXPECT_EQ((*file)->Commit().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*file)->Append("x").code(), absl::StatusCode::kFailedPrecondition);
  file->reset();
  EXPECT_EQ(*ReadFile(path), std::string("abc\0d", 5));  // Kept.
  EXPECT_THAT(Files(), ::testing::ElementsAre("out.data"));
}

TEST_F(FileUtilTest, AtomicFileNotCommittedLeavesNothingBehind) {
  const std::string path = (dir_ / "out.data").string();
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    absl::StatusOr<std::unique_ptr<AtomicFile>> file = AtomicFile::Create(path);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->Append("new, but never committed").ok());
  }
  EXPECT_EQ(*ReadFile(path), "old");
  EXPECT_THAT(Files(), ::testing::ElementsAre("out.data"));
  EXPECT_EQ(AtomicFile::Create((dir_ / "no" / "out").string()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(FileUtilTest, MissingDirectoryIsAnError) {
  const absl::Status status =
      WriteFileAtomically((dir_ / "no" / "such" / "out").string(), "data");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
}

TEST_F(FileUtilTest, ReadingAMissingFileIsNotFound) {
  absl::StatusOr<std::string> read = ReadFile((dir_ / "absent").string());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      std::string(read.status().message()),
      ::testing::HasSubstr("cannot read " + (dir_ / "absent").string()));
}

// Several MiB: more than one read() may return, and the string is sized once.
TEST_F(FileUtilTest, ReadsALargeFileWhole) {
  std::string data(5 * 1024 * 1024 + 7, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  const std::string path = (dir_ / "big.onnx").string();
  ASSERT_TRUE(WriteFileAtomically(path, data).ok());
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), data.size());
  EXPECT_TRUE(*read == data);
}

TEST_F(FileUtilTest, ReadsAnEmptyFile) {
  const std::string path = (dir_ / "empty").string();
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "");
}

// /proc files report size 0: read to the end regardless of the stated size.
TEST_F(FileUtilTest, ReadsAFileWithoutAStatedSize) {
  absl::StatusOr<std::string> read = ReadFile("/proc/self/status");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ::testing::HasSubstr("VmRSS"));
}

TEST_F(FileUtilTest, ReadingADirectoryIsAnError) {
  absl::StatusOr<std::string> read = ReadFile(dir_.string());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.status().message()),
              ::testing::HasSubstr(dir_.string()));
}

}  // namespace
}  // namespace quantd::client
