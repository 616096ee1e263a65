// The /outputs harvest (sandbox::harvest::copy_tree) against hostile trees
// built in a temp directory: links, special files, floods, deep nesting, huge
// sparse files, bad names. Only regular files inside the tree may be copied,
// and every refusal carries its reason.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/sandbox/harvest.h"
#include "server/sandbox/spec.h"
#include "server/util/text.h"

using sandbox::HarvestedFile;
using sandbox::LaunchSpec;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A fresh directory under /tmp holding out/ (the tree to harvest), harvest/
// (where copies go) and outside/ (what must never be copied); removed at scope end.
struct Fixture {
  std::string root;
  std::string out;
  std::string harvest;
  std::string outside;

  Fixture() {
    char tmpl[] = "/tmp/throwbox-harvest-test-XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    REQUIRE_MESSAGE(made != nullptr, "mkdtemp: " << std::strerror(errno));
    root = made;
    out = root + "/out";
    harvest = root + "/harvest";
    outside = root + "/outside";
    for (const std::string& d : {out, harvest, outside}) REQUIRE(::mkdir(d.c_str(), 0700) == 0);
    write(outside + "/secret.txt", "host secret\n");
  }
  ~Fixture() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  LaunchSpec spec(uint64_t max_files = 64, uint64_t max_bytes = 32 * kMiB, uint64_t artifact_max = 16 * kMiB) const {
    LaunchSpec s;
    s.outputs_max_files = max_files;
    s.outputs_max_bytes = max_bytes;
    s.artifact_max_bytes = artifact_max;
    s.harvest_dir = harvest;
    return s;
  }

  static void write(const std::string& path, const std::string& content) {
    std::ofstream f(path, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "open " << path);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    REQUIRE(f.good());
  }

  // Names in harvest/ (what copy_tree actually wrote).
  std::set<std::string> harvested_names() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(harvest)) names.insert(e.path().filename().string());
    return names;
  }
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "open " << path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<HarvestedFile> harvest_tree(const std::string& dir, const LaunchSpec& spec) {
  int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  REQUIRE_MESSAGE(fd >= 0, "open " << dir << ": " << std::strerror(errno));
  std::vector<HarvestedFile> files = sandbox::harvest::copy_tree(fd, spec);
  ::close(fd);
  return files;
}

// Runs copy_tree in a thread; if it has not returned after `limit`, the test
// fails and `unblock` is called so that the thread can finish and be joined.
template <typename Unblock>
std::vector<HarvestedFile> harvest_with_watchdog(const std::string& dir, const LaunchSpec& spec,
                                                 std::chrono::milliseconds limit, Unblock unblock) {
  int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::packaged_task<std::vector<HarvestedFile>()> task([fd, &spec] { return sandbox::harvest::copy_tree(fd, spec); });
  auto future = task.get_future();
  std::thread worker(std::move(task));
  bool finished = future.wait_for(limit) == std::future_status::ready;
  CHECK_MESSAGE(finished, "copy_tree did not return within " << limit.count() << " ms (it blocked)");
  if (!finished) unblock();
  worker.join();
  ::close(fd);
  return future.get();
}

const HarvestedFile* find(const std::vector<HarvestedFile>& files, const std::string& name) {
  for (const HarvestedFile& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

size_t count_copied(const std::vector<HarvestedFile>& files) {
  size_t n = 0;
  for (const HarvestedFile& f : files) n += f.rejected.empty() ? 1 : 0;
  return n;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Every copy lies directly in harvest/ with a decimal name, exists, and is the
// only thing there; rejected entries have no copy. Nothing else was written.
void check_copies_consistent(const Fixture& fx, const std::vector<HarvestedFile>& files) {
  std::set<std::string> expected;
  for (const HarvestedFile& f : files) {
    CHECK_MESSAGE(util::is_valid_utf8(f.name), "reported name is not UTF-8");
    if (!f.rejected.empty()) {
      CHECK_MESSAGE(f.host_path.empty(), f.name << " rejected but has a copy at " << f.host_path);
      continue;
    }
    REQUIRE_MESSAGE(f.host_path.rfind(fx.harvest + "/", 0) == 0, f.host_path);
    std::string leaf = f.host_path.substr(fx.harvest.size() + 1);
    CHECK_MESSAGE((!leaf.empty() && leaf.find_first_not_of("0123456789") == std::string::npos), "copy named " << leaf);
    CHECK_MESSAGE(expected.insert(leaf).second, "two entries share the copy " << leaf);
  }
  CHECK(fx.harvested_names() == expected);
}

void check_no_host_content(const std::vector<HarvestedFile>& files) {
  for (const HarvestedFile& f : files) {
    if (f.host_path.empty()) continue;
    std::string content = read_all(f.host_path);
    CHECK_MESSAGE(!contains(content, "host secret"), f.name << " carries outside content");
    CHECK_MESSAGE(!contains(content, "root:x:0:0"), f.name << " carries /etc/passwd");
  }
}

}  // namespace

TEST_CASE("a regular file is copied byte-exact; nested files keep their relative name") {
  Fixture fx;
  std::string binary;
  for (int round = 0; round < 800; ++round)  // 200 KiB: crosses the 64 KiB copy buffer
    for (int b = 0; b < 256; ++b) binary.push_back(static_cast<char>((b + round) & 0xff));
  Fixture::write(fx.out + "/data.bin", binary);
  fs::create_directories(fx.out + "/sub/dir");
  Fixture::write(fx.out + "/sub/dir/x.txt", "nested\n");
  Fixture::write(fx.out + "/empty.txt", "");

  auto files = harvest_tree(fx.out, fx.spec());
  check_copies_consistent(fx, files);
  REQUIRE(files.size() == 3);
  CHECK(count_copied(files) == 3);

  const HarvestedFile* data = find(files, "data.bin");
  REQUIRE(data != nullptr);
  CHECK(data->rejected == "");
  CHECK(data->size == binary.size());
  CHECK(read_all(data->host_path) == binary);

  const HarvestedFile* nested = find(files, "sub/dir/x.txt");
  REQUIRE_MESSAGE(nested != nullptr, "sub/dir/x.txt not reported by that name");
  CHECK(nested->rejected == "");
  CHECK(nested->size == 7);
  CHECK(read_all(nested->host_path) == "nested\n");

  const HarvestedFile* empty = find(files, "empty.txt");
  REQUIRE(empty != nullptr);
  CHECK(empty->rejected == "");
  CHECK(empty->size == 0);
  CHECK(read_all(empty->host_path) == "");
}

TEST_CASE("a symlink to a host file (/etc/passwd) is rejected, never followed") {
  Fixture fx;
  REQUIRE(::symlink("/etc/passwd", (fx.out + "/passwd_link").c_str()) == 0);
  REQUIRE(::symlink((fx.outside + "/secret.txt").c_str(), (fx.out + "/secret_link").c_str()) == 0);
  REQUIRE(::symlink("../outside/secret.txt", (fx.out + "/relative_link").c_str()) == 0);
  REQUIRE(::symlink("/proc/self/root/etc/passwd", (fx.out + "/magic_link").c_str()) == 0);
  REQUIRE(::symlink("/nonexistent/target", (fx.out + "/dangling").c_str()) == 0);

  auto files = harvest_tree(fx.out, fx.spec());
  check_copies_consistent(fx, files);
  check_no_host_content(files);
  CHECK(files.size() == 5);
  CHECK(count_copied(files) == 0);
  for (const char* name : {"passwd_link", "secret_link", "relative_link", "magic_link", "dangling"}) {
    const HarvestedFile* f = find(files, name);
    REQUIRE_MESSAGE(f != nullptr, name);
    CHECK_MESSAGE(contains(f->rejected, "symbolic link"), name << ": " << f->rejected);
    CHECK(f->size == 0);
  }
  CHECK(fx.harvested_names().empty());
}

TEST_CASE("a symlink to a directory is rejected and its target is not walked") {
  Fixture fx;
  fs::create_directories(fx.outside + "/tree/deeper");
  Fixture::write(fx.outside + "/tree/deeper/leak.txt", "host secret in a tree\n");
  REQUIRE(::symlink(fx.outside.c_str(), (fx.out + "/outside_link").c_str()) == 0);
  REQUIRE(::symlink("/etc", (fx.out + "/etc_link").c_str()) == 0);
  REQUIRE(::symlink(".", (fx.out + "/self_link").c_str()) == 0);
  fs::create_directories(fx.out + "/sub");
  REQUIRE(::symlink("..", (fx.out + "/sub/up").c_str()) == 0);
  REQUIRE(::symlink("../../outside", (fx.out + "/sub/out2").c_str()) == 0);
  Fixture::write(fx.out + "/ok.txt", "ok\n");

  auto files = harvest_tree(fx.out, fx.spec());
  check_copies_consistent(fx, files);
  check_no_host_content(files);
  for (const char* name : {"outside_link", "etc_link", "self_link", "sub/up", "sub/out2"}) {
    const HarvestedFile* f = find(files, name);
    REQUIRE_MESSAGE(f != nullptr, name);
    CHECK_MESSAGE(contains(f->rejected, "symbolic link"), name << ": " << f->rejected);
  }
  // Nothing under a link was even listed.
  for (const HarvestedFile& f : files) {
    for (const char* link : {"outside_link/", "etc_link/", "self_link/", "sub/up/", "sub/out2/"})
      CHECK_MESSAGE(f.name.rfind(link, 0) != 0, "walked into " << f.name);
  }
  CHECK(files.size() == 6);
  CHECK(count_copied(files) == 1);
  REQUIRE(find(files, "ok.txt") != nullptr);
  CHECK(find(files, "ok.txt")->rejected == "");
}

TEST_CASE("a symlink loop (a -> b, b -> a) is rejected without looping") {
  Fixture fx;
  REQUIRE(::symlink("b", (fx.out + "/a").c_str()) == 0);
  REQUIRE(::symlink("a", (fx.out + "/b").c_str()) == 0);
  fs::create_directories(fx.out + "/d");
  REQUIRE(::symlink("../d", (fx.out + "/d/loop").c_str()) == 0);

  auto files = harvest_with_watchdog(fx.out, fx.spec(), std::chrono::seconds(10), [] {});
  check_copies_consistent(fx, files);
  CHECK(files.size() == 3);
  for (const char* name : {"a", "b", "d/loop"}) {
    const HarvestedFile* f = find(files, name);
    REQUIRE_MESSAGE(f != nullptr, name);
    CHECK_MESSAGE(contains(f->rejected, "symbolic link"), name << ": " << f->rejected);
  }
  CHECK(fx.harvested_names().empty());
}

TEST_CASE("a hard-linked file is rejected, including a link to a file outside the tree") {
  Fixture fx;
  Fixture::write(fx.out + "/a.txt", "linked\n");
  REQUIRE(::link((fx.out + "/a.txt").c_str(), (fx.out + "/b.txt").c_str()) == 0);
  REQUIRE(::link((fx.outside + "/secret.txt").c_str(), (fx.out + "/h.txt").c_str()) == 0);
  struct stat st {};
  REQUIRE(::stat((fx.out + "/a.txt").c_str(), &st) == 0);
  REQUIRE(st.st_nlink == 2);

  auto files = harvest_tree(fx.out, fx.spec());
  check_copies_consistent(fx, files);
  check_no_host_content(files);
  CHECK(files.size() == 3);
  CHECK(count_copied(files) == 0);
  for (const char* name : {"a.txt", "b.txt", "h.txt"}) {
    const HarvestedFile* f = find(files, name);
    REQUIRE_MESSAGE(f != nullptr, name);
    CHECK_MESSAGE(contains(f->rejected, "hard-linked"), name << ": " << f->rejected);
  }
  CHECK(fx.harvested_names().empty());
}

TEST_CASE("a FIFO with no writer is rejected and the walk does not hang") {
  Fixture fx;
  const std::string fifo = fx.out + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  fs::create_directories(fx.out + "/sub");
  REQUIRE(::mkfifo((fx.out + "/sub/pipe.txt").c_str(), 0644) == 0);  // a FIFO named like text
  Fixture::write(fx.out + "/ok.txt", "ok\n");

  auto started = std::chrono::steady_clock::now();
  // If the walk opened a FIFO for reading it would block; opening the write end
  // (non-blocking: a reader is waiting) releases it so the thread can be joined.
  auto files = harvest_with_watchdog(fx.out, fx.spec(), std::chrono::seconds(5), [&] {
    for (const std::string& p : {fifo, fx.out + "/sub/pipe.txt"}) {
      int w = ::open(p.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (w >= 0) ::close(w);
    }
  });
  auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(elapsed < std::chrono::seconds(2));
  check_copies_consistent(fx, files);
  for (const char* name : {"fifo", "sub/pipe.txt"}) {
    const HarvestedFile* f = find(files, name);
    REQUIRE_MESSAGE(f != nullptr, name);
    CHECK_MESSAGE(contains(f->rejected, "not a regular file"), name << ": " << f->rejected);
  }
  CHECK(count_copied(files) == 1);
}

TEST_CASE("a unix socket file is rejected") {
  Fixture fx;
  const std::string path = fx.out + "/sock";
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(s >= 0);
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(::bind(s, reinterpret_cast<const struct sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(s, 1) == 0);

  auto files = harvest_with_watchdog(fx.out, fx.spec(), std::chrono::seconds(5), [] {});
  ::close(s);
  check_copies_consistent(fx, files);
  REQUIRE(files.size() == 1);
  CHECK(files[0].name == "sock");
  CHECK_MESSAGE(contains(files[0].rejected, "not a regular file"), files[0].rejected);
  CHECK(files[0].host_path == "");
}

TEST_CASE("a device node is rejected (needs CAP_MKNOD)") {
  Fixture fx;
  const std::string path = fx.out + "/null";
  if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    MESSAGE("mknod not permitted here (" << std::strerror(errno) << "); device case skipped");
    return;
  }
  auto files = harvest_tree(fx.out, fx.spec());
  check_copies_consistent(fx, files);
  REQUIRE(files.size() == 1);
  CHECK(files[0].name == "null");
  CHECK_MESSAGE(contains(files[0].rejected, "not a regular file"), files[0].rejected);
}

TEST_CASE("10,000 files with outputs_max_files 64: at most 64 copied and one overflow entry") {
  Fixture fx;
  for (int i = 0; i < 10000; ++i) Fixture::write(fx.out + "/f" + std::to_string(i) + ".txt", std::to_string(i));

  auto files = harvest_tree(fx.out, fx.spec(64));
  check_copies_consistent(fx, files);
  size_t overflow = 0;
  for (const HarvestedFile& f : files) {
    if (contains(f.rejected, "more than 64"))
      ++overflow;
    else
      CHECK_MESSAGE(f.rejected == "", f.name << ": " << f.rejected);
  }
  CHECK(overflow == 1);
  CHECK(count_copied(files) <= 64);
  CHECK(count_copied(files) == 64);  // every entry before the cut is a plain file
  CHECK(files.size() == 65);
  CHECK(fx.harvested_names().size() == 64);
}

TEST_CASE("10,000 files with outputs_max_files 20000: all copied, names unique, sizes right") {
  Fixture fx;
  for (int i = 0; i < 10000; ++i)
    Fixture::write(fx.out + "/f" + std::to_string(i) + ".txt", "content " + std::to_string(i));

  auto files = harvest_tree(fx.out, fx.spec(20000));
  check_copies_consistent(fx, files);
  REQUIRE(files.size() == 10000);
  CHECK(count_copied(files) == 10000);
  std::set<std::string> names;
  size_t wrong = 0;
  for (const HarvestedFile& f : files) {
    names.insert(f.name);
    REQUIRE(f.name.size() > 5);
    std::string expected = "content " + f.name.substr(1, f.name.size() - 5);  // "f123.txt" -> "123"
    if (f.size != expected.size() || read_all(f.host_path) != expected) ++wrong;
  }
  CHECK(names.size() == 10000);
  CHECK(wrong == 0);
}

TEST_CASE("directories nested deeper than 16 are rejected, not walked") {
  Fixture fx;
  std::string dir = fx.out;
  std::string rel;
  std::vector<std::string> rels;  // "d0", "d0/d1", ...
  for (int i = 0; i < 20; ++i) {
    rel += (rel.empty() ? "" : "/") + std::string("d") + std::to_string(i);
    dir += "/d" + std::to_string(i);
    REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
    Fixture::write(dir + "/f.txt", "level " + std::to_string(i) + "\n");
    rels.push_back(rel);
  }

  auto files = harvest_tree(fx.out, fx.spec());
  check_copies_consistent(fx, files);
  // /outputs itself is depth 0; d0 .. d15 are walked (16 levels), d16 is refused.
  const HarvestedFile* cut = find(files, rels[16]);
  REQUIRE_MESSAGE(cut != nullptr, "no entry for " << rels[16]);
  CHECK_MESSAGE(contains(cut->rejected, "nesting deeper"), cut->rejected);
  CHECK(contains(cut->rejected, "16"));
  for (int i = 0; i < 16; ++i) {
    const HarvestedFile* f = find(files, rels[static_cast<size_t>(i)] + "/f.txt");
    REQUIRE_MESSAGE(f != nullptr, "level " << i);
    CHECK(f->rejected == "");
    CHECK(read_all(f->host_path) == "level " + std::to_string(i) + "\n");
  }
  for (const HarvestedFile& f : files)
    CHECK_MESSAGE(f.name.rfind(rels[16] + "/", 0) != 0, "walked below the limit: " << f.name);
  CHECK(files.size() == 17);
  CHECK(count_copied(files) == 16);
}

TEST_CASE("a path longer than 1024 bytes is rejected") {
  Fixture fx;
  std::string dir = fx.out;
  std::string rel;
  for (int i = 0; i < 6; ++i) {
    std::string component(200, static_cast<char>('a' + i));
    dir += "/" + component;
    rel += (rel.empty() ? "" : "/") + component;
    REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  }
  Fixture::write(dir + "/bottom.txt", "deep\n");
  auto files = harvest_tree(fx.out, fx.spec());
  check_copies_consistent(fx, files);
  const HarvestedFile* cut = find(files, rel);  // 1205 bytes
  REQUIRE(cut != nullptr);
  CHECK_MESSAGE(contains(cut->rejected, "too long"), cut->rejected);
  CHECK(count_copied(files) == 0);
}

TEST_CASE("a 300 MB sparse file over artifact_max_bytes is rejected unread, quickly") {
  Fixture fx;
  const std::string path = fx.out + "/big.bin";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(300 * kMiB)) == 0);
  ::close(fd);
  Fixture::write(fx.out + "/small.txt", "small\n");

  auto started = std::chrono::steady_clock::now();
  auto files = harvest_tree(fx.out, fx.spec(64, 512 * kMiB, 16 * kMiB));
  auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(elapsed < std::chrono::seconds(1));
  check_copies_consistent(fx, files);
  const HarvestedFile* big = find(files, "big.bin");
  REQUIRE(big != nullptr);
  CHECK_MESSAGE(contains(big->rejected, "not read"), big->rejected);
  CHECK(contains(big->rejected, std::to_string(16 * kMiB)));
  CHECK(big->host_path == "");
  CHECK(big->size == 300 * kMiB);
  CHECK(count_copied(files) == 1);
  CHECK(fx.harvested_names().size() == 1);
}

TEST_CASE("a file exactly at artifact_max_bytes is copied") {
  Fixture fx;
  Fixture::write(fx.out + "/edge.bin", std::string(4096, 'e'));
  auto files = harvest_tree(fx.out, fx.spec(64, kMiB, 4096));
  REQUIRE(files.size() == 1);
  CHECK(files[0].rejected == "");
  CHECK(files[0].size == 4096);
}

TEST_CASE("files totalling more than outputs_max_bytes: the overflowing one is rejected") {
  Fixture fx;
  for (const char* name : {"a.txt", "b.txt", "c.txt"}) Fixture::write(fx.out + "/" + name, std::string(40, 'x'));

  auto files = harvest_tree(fx.out, fx.spec(64, 100, 16 * kMiB));
  check_copies_consistent(fx, files);
  REQUIRE(files.size() == 3);
  CHECK(count_copied(files) == 2);
  size_t over = 0;
  uint64_t copied_bytes = 0;
  for (const HarvestedFile& f : files) {
    if (f.rejected.empty()) {
      copied_bytes += f.size;
      continue;
    }
    ++over;
    CHECK_MESSAGE(contains(f.rejected, "in total"), f.rejected);
    CHECK(contains(f.rejected, "100 bytes"));
    CHECK(f.host_path == "");
  }
  CHECK(over == 1);
  CHECK(copied_bytes == 80);
}

TEST_CASE("files totalling exactly outputs_max_bytes are all copied") {
  Fixture fx;
  Fixture::write(fx.out + "/a.txt", std::string(50, 'a'));
  Fixture::write(fx.out + "/b.txt", std::string(50, 'b'));
  auto files = harvest_tree(fx.out, fx.spec(64, 100, 16 * kMiB));
  check_copies_consistent(fx, files);
  CHECK(files.size() == 2);
  CHECK(count_copied(files) == 2);
}

TEST_CASE("a file name that is not valid UTF-8 is rejected and reported as valid UTF-8") {
  Fixture fx;
  Fixture::write(fx.out + "/\xff.txt", "bad name\n");
  fs::create_directories(fx.out + "/ok\xc3\xa9");  // "oké": valid UTF-8 directory
  Fixture::write(fx.out + "/ok\xc3\xa9/bad\xc0\xafname.txt", "overlong slash\n");
  Fixture::write(fx.out + "/ok\xc3\xa9/caf\xc3\xa9.txt", "good\n");

  auto files = harvest_tree(fx.out, fx.spec());
  check_copies_consistent(fx, files);
  CHECK(files.size() == 3);
  size_t bad = 0;
  for (const HarvestedFile& f : files) {
    if (f.name == "ok\xc3\xa9/caf\xc3\xa9.txt") {
      CHECK(f.rejected == "");
      CHECK(read_all(f.host_path) == "good\n");
      continue;
    }
    ++bad;
    CHECK_MESSAGE(contains(f.rejected, "not valid UTF-8"), f.name << ": " << f.rejected);
    CHECK(f.host_path == "");
  }
  CHECK(bad == 2);
  CHECK(count_copied(files) == 1);
}
