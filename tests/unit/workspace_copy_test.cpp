// The workspace tree walk (sandbox::workspace::copy_tree, save_tree) between
// plain host directories: links are re-created and never followed (nothing
// outside the two trees is read or written), special files are skipped or
// refused, hard links come apart, modes lose their set-id bits, the bounds
// give clear errors and a failed save leaves no half-written destination.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "server/sandbox/workspace.h"

namespace fs = std::filesystem;
namespace ws = sandbox::workspace;

namespace {

// A fresh directory under /tmp holding src/ (the tree to copy), dst/ (an empty
// destination for copy_tree), outside/ (what must never be read or written)
// and room for save_tree's new destination (saved, made by the copy).
struct Fixture {
  std::string root, src, dst, outside, saved;

  Fixture() {
    char tmpl[] = "/tmp/throwbox-workspace-test-XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    REQUIRE_MESSAGE(made != nullptr, "mkdtemp: " << std::strerror(errno));
    root = made;
    src = root + "/src";
    dst = root + "/dst";
    outside = root + "/outside";
    saved = root + "/saved";
    for (const std::string& d : {src, dst, outside}) REQUIRE(::mkdir(d.c_str(), 0700) == 0);
    write(outside + "/secret.txt", "host secret\n");
    REQUIRE(::mkdir((outside + "/dir").c_str(), 0700) == 0);
  }
  ~Fixture() {
    std::error_code ec;
    fs::permissions(root, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
      if (it->is_directory(ec) && !it->is_symlink(ec))
        fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root, ec);
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  static void write(const std::string& path, const std::string& content) {
    std::ofstream f(path, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "open " << path);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    REQUIRE(f.good());
  }

  // What outside/ holds: its names and the secret's content, unchanged by any copy.
  std::set<std::string> outside_names() const {
    std::set<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(outside)) names.insert(e.path().string());
    return names;
  }
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "open " << path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

int open_dir(const std::string& path) {
  int fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  REQUIRE_MESSAGE(fd >= 0, "open " << path << ": " << std::strerror(errno));
  return fd;
}

ws::TreeRules host_rules(ws::Special special = ws::Special::skip) {
  ws::TreeRules r;
  r.special = special;
  r.src_label = "/work";
  r.dst_label = "workspace_out";
  return r;
}

util::Result<ws::Tally> copy(const std::string& from, const std::string& to, const ws::TreeRules& rules) {
  int s = open_dir(from), d = open_dir(to);
  auto r = ws::copy_tree(s, d, rules);
  ::close(s);
  ::close(d);
  return r;
}

util::Result<ws::Tally> save(const std::string& from, const std::string& to, const ws::TreeRules& rules) {
  int s = open_dir(from);
  auto r = ws::save_tree(s, to, rules);
  ::close(s);
  return r;
}

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  REQUIRE_MESSAGE(::lstat(path.c_str(), &st) == 0, "lstat " << path << ": " << std::strerror(errno));
  return st;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("files, directories and their modes and times are copied; set-id and sticky bits are not") {
  Fixture f;
  Fixture::write(f.src + "/a.txt", "alpha");
  Fixture::write(f.src + "/run.sh", "#!/bin/sh\n");
  Fixture::write(f.src + "/suid", "x");
  REQUIRE(::mkdir((f.src + "/sub").c_str(), 0700) == 0);
  REQUIRE(::mkdir((f.src + "/sub/deeper").c_str(), 0700) == 0);
  Fixture::write(f.src + "/sub/deeper/b.bin", std::string("\0\1\2", 3));
  REQUIRE(::mkdir((f.src + "/ro").c_str(), 0700) == 0);
  REQUIRE(::chmod((f.src + "/a.txt").c_str(), 0640) == 0);
  REQUIRE(::chmod((f.src + "/run.sh").c_str(), 0755) == 0);
  REQUIRE(::chmod((f.src + "/suid").c_str(), 06755) == 0);
  REQUIRE(::chmod((f.src + "/sub").c_str(), 01777) == 0);
  REQUIRE(::chmod((f.src + "/ro").c_str(), 0500) == 0);
  const struct timespec old_times[2] = {{1000000000, 0}, {1200000000, 500}};
  REQUIRE(::utimensat(AT_FDCWD, (f.src + "/a.txt").c_str(), old_times, 0) == 0);
  REQUIRE(::utimensat(AT_FDCWD, (f.src + "/sub/deeper").c_str(), old_times, 0) == 0);

  SUBCASE("into the sandbox's side (copy_tree): modes as they were, less the set-id bits") {
    auto r = copy(f.src, f.dst, host_rules(ws::Special::refuse));
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    CHECK(r->entries == 7);  // a.txt run.sh suid sub sub/deeper sub/deeper/b.bin ro
    CHECK(r->bytes == 5 + 10 + 1 + 3);
    CHECK(read_all(f.dst + "/a.txt") == "alpha");
    CHECK(read_all(f.dst + "/sub/deeper/b.bin") == std::string("\0\1\2", 3));
    CHECK((lstat_of(f.dst + "/a.txt").st_mode & 07777) == 0640);
    CHECK((lstat_of(f.dst + "/run.sh").st_mode & 07777) == 0755);
    CHECK((lstat_of(f.dst + "/suid").st_mode & 07777) == 0755);
    CHECK((lstat_of(f.dst + "/sub").st_mode & 07777) == 0777);
    CHECK((lstat_of(f.dst + "/ro").st_mode & 07777) == 0500);
    CHECK(lstat_of(f.dst + "/a.txt").st_mtim.tv_sec == 1200000000);
    CHECK(lstat_of(f.dst + "/a.txt").st_mtim.tv_nsec == 500);
    CHECK(lstat_of(f.dst + "/sub/deeper").st_mtim.tv_sec == 1200000000);
  }
  SUBCASE("onto the host (save_tree): directories keep u+rwx, the top is 0700") {
    ws::TreeRules rules = host_rules();
    rules.dir_mode_add = 0700;
    auto r = save(f.src, f.saved, rules);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    CHECK((lstat_of(f.saved).st_mode & 07777) == 0700);
    CHECK((lstat_of(f.saved + "/ro").st_mode & 07777) == 0700);
    CHECK((lstat_of(f.saved + "/sub").st_mode & 07777) == 0777);
    CHECK((lstat_of(f.saved + "/suid").st_mode & 07777) == 0755);
    CHECK(lstat_of(f.saved + "/a.txt").st_uid == ::geteuid());
  }
}

TEST_CASE("symlinks are re-created as symlinks and never followed") {
  Fixture f;
  const std::string secret = f.outside + "/secret.txt";
  REQUIRE(::symlink(secret.c_str(), (f.src + "/absolute").c_str()) == 0);
  REQUIRE(::symlink("../outside/secret.txt", (f.src + "/relative").c_str()) == 0);
  REQUIRE(::symlink("nowhere/at/all", (f.src + "/dangling").c_str()) == 0);
  REQUIRE(::symlink("/etc/passwd", (f.src + "/etc_passwd").c_str()) == 0);
  // Named like a directory, pointing at the outside directory and at a host file.
  REQUIRE(::symlink((f.outside + "/dir").c_str(), (f.src + "/data").c_str()) == 0);
  REQUIRE(::symlink(secret.c_str(), (f.src + "/lib").c_str()) == 0);
  const auto before = f.outside_names();

  auto r = copy(f.src, f.dst, host_rules());
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  CHECK(r->entries == 6);
  CHECK(r->bytes == 0);  // nothing was read through a link
  for (const char* name : {"absolute", "relative", "dangling", "etc_passwd", "data", "lib"}) {
    CAPTURE(name);
    CHECK(S_ISLNK(lstat_of(f.dst + "/" + name).st_mode));
    CHECK(fs::read_symlink(f.dst + "/" + name) == fs::read_symlink(f.src + "/" + name));
  }
  CHECK(f.outside_names() == before);
  CHECK(read_all(secret) == "host secret\n");
}

TEST_CASE(
    "a destination's links are never followed: a name taken by a symlink is an error, nothing outside is written") {
  Fixture f;
  const auto before = f.outside_names();
  SUBCASE("a directory onto a symlink to a host directory") {
    REQUIRE(::mkdir((f.src + "/data").c_str(), 0700) == 0);
    Fixture::write(f.src + "/data/planted", "x");
    REQUIRE(::symlink((f.outside + "/dir").c_str(), (f.dst + "/data").c_str()) == 0);
    auto r = copy(f.src, f.dst, host_rules());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message == "mkdirat(\"workspace_out/data\"): EEXIST (File exists)");
  }
  SUBCASE("a file onto a symlink to a host file") {
    Fixture::write(f.src + "/main.py", "print('job')");
    REQUIRE(::symlink((f.outside + "/secret.txt").c_str(), (f.dst + "/main.py").c_str()) == 0);
    auto r = copy(f.src, f.dst, host_rules());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message == "openat2(\"workspace_out/main.py\"): EEXIST (File exists)");
  }
  SUBCASE("save_tree onto a symlink named like the new destination") {
    Fixture::write(f.src + "/a", "a");
    REQUIRE(::symlink((f.outside + "/dir").c_str(), f.saved.c_str()) == 0);
    auto r = save(f.src, f.saved, host_rules());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message == "mkdir(\"workspace_out\"): EEXIST (File exists)");
    CHECK(S_ISLNK(lstat_of(f.saved).st_mode));
  }
  CHECK(f.outside_names() == before);
  CHECK(read_all(f.outside + "/secret.txt") == "host secret\n");
}

TEST_CASE("the skipped path (the job's code file) is not copied, wherever it is a file, a link or a directory") {
  Fixture f;
  ws::TreeRules rules = host_rules(ws::Special::refuse);
  rules.skip = "main.py";
  SUBCASE("a file") { Fixture::write(f.src + "/main.py", "old code"); }
  SUBCASE("a symlink") { REQUIRE(::symlink((f.outside + "/secret.txt").c_str(), (f.src + "/main.py").c_str()) == 0); }
  SUBCASE("a directory") {
    REQUIRE(::mkdir((f.src + "/main.py").c_str(), 0700) == 0);
    Fixture::write(f.src + "/main.py/x", "x");
  }
  REQUIRE(::mkdir((f.src + "/sub").c_str(), 0700) == 0);
  Fixture::write(f.src + "/sub/main.py", "kept: not the code path");
  // The job's code, written first (cold) or after (warm): either way the name is its own.
  Fixture::write(f.dst + "/main.py", "new code");
  auto r = copy(f.src, f.dst, rules);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  CHECK(read_all(f.dst + "/main.py") == "new code");
  CHECK(read_all(f.dst + "/sub/main.py") == "kept: not the code path");
  CHECK(r->entries == 2);
}

TEST_CASE("a FIFO and a unix socket are skipped and counted, or refused by name") {
  Fixture f;
  Fixture::write(f.src + "/keep.txt", "kept");
  REQUIRE(::mkfifo((f.src + "/pipe").c_str(), 0600) == 0);  // opening it would block a reader
  int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(sock >= 0);
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = f.src + "/sock";
  REQUIRE(sock_path.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock_path.c_str(), sock_path.size() + 1);
  REQUIRE(::bind(sock, reinterpret_cast<const struct sockaddr*>(&addr), sizeof addr) == 0);
  ::close(sock);

  SUBCASE("skip (copy-out)") {
    auto r = save(f.src, f.saved, host_rules(ws::Special::skip));
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    CHECK(r->entries == 1);
    CHECK(r->skipped == 2);
    std::set<std::string> names(r->skipped_names.begin(), r->skipped_names.end());
    CHECK(names == std::set<std::string>{"/work/pipe (a FIFO)", "/work/sock (a socket)"});
    CHECK(read_all(f.saved + "/keep.txt") == "kept");
    CHECK_FALSE(exists(f.saved + "/pipe"));
    CHECK_FALSE(exists(f.saved + "/sock"));
  }
  SUBCASE("refuse (copy-in): an error naming the entry") {
    ::unlink(sock_path.c_str());
    ws::TreeRules rules = host_rules(ws::Special::refuse);
    rules.src_label = "workspace_in";
    auto r = copy(f.src, f.dst, rules);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message == "workspace_in/pipe: a FIFO (a workspace holds files, directories and symlinks only)");
  }
}

TEST_CASE("a hard-linked pair becomes two separate files") {
  Fixture f;
  Fixture::write(f.src + "/one", "shared content");
  REQUIRE(::link((f.src + "/one").c_str(), (f.src + "/two").c_str()) == 0);
  auto r = save(f.src, f.saved, host_rules());
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  CHECK(r->entries == 2);
  CHECK(r->bytes == 2 * std::string("shared content").size());
  const struct stat one = lstat_of(f.saved + "/one"), two = lstat_of(f.saved + "/two");
  CHECK(one.st_ino != two.st_ino);
  CHECK(one.st_nlink == 1);
  CHECK(two.st_nlink == 1);
  CHECK(read_all(f.saved + "/two") == "shared content");
}

TEST_CASE("names are copied byte for byte, invalid UTF-8 included") {
  Fixture f;
  const std::string name = "caf\xc3\xa9 \xff\xfe";
  Fixture::write(f.src + "/" + name, "bytes");
  auto r = copy(f.src, f.dst, host_rules());
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  CHECK(read_all(f.dst + "/" + name) == "bytes");
}

TEST_CASE("the bounds: entries, depth and bytes, each a clear error, and save_tree then leaves nothing") {
  Fixture f;
  ws::TreeRules rules = host_rules();
  SUBCASE("entries") {
    for (int i = 0; i < 11; ++i) Fixture::write(f.src + "/f" + std::to_string(i), "x");
    rules.entries_max = 10;
    auto r = save(f.src, f.saved, rules);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message == "/work: more than 10 entries");
  }
  SUBCASE("depth: 64 nested directories are copied, 65 are not") {
    std::string path = f.src;
    for (int i = 0; i < ws::kDepthMax; ++i) {
      path += "/d";
      REQUIRE(::mkdir(path.c_str(), 0700) == 0);
    }
    Fixture::write(path + "/leaf", "deep");
    auto ok = copy(f.src, f.dst, rules);
    REQUIRE_MESSAGE(ok.ok(), ok.error().message);
    CHECK(ok->entries == ws::kDepthMax + 1);
    path += "/d";
    REQUIRE(::mkdir(path.c_str(), 0700) == 0);
    auto r = save(f.src, f.saved, rules);
    REQUIRE_FALSE(r.ok());
    std::string rel;
    for (int i = 0; i <= ws::kDepthMax; ++i) rel += i ? "/d" : "d";
    CHECK(r.error().message == "/work/" + rel + ": directories nested deeper than 64");
  }
  SUBCASE("bytes") {
    Fixture::write(f.src + "/a", std::string(60, 'a'));
    Fixture::write(f.src + "/b", std::string(60, 'b'));
    rules.bytes_max = 100;
    auto r = save(f.src, f.saved, rules);
    REQUIRE_FALSE(r.ok());
    CHECK(contains(r.error().message, ": the files reach more than 100 bytes together"));
  }
  CHECK_FALSE(exists(f.saved));
}

TEST_CASE("a failure late in the walk leaves no half-written destination, read-only directories included") {
  Fixture f;
  REQUIRE(::mkdir((f.src + "/a").c_str(), 0700) == 0);
  for (int i = 0; i < 20; ++i) Fixture::write(f.src + "/a/f" + std::to_string(i), std::string(100, 'x'));
  REQUIRE(::mkdir((f.src + "/a/ro").c_str(), 0700) == 0);
  Fixture::write(f.src + "/a/ro/inside", "x");
  REQUIRE(::chmod((f.src + "/a/ro").c_str(), 0500) == 0);
  REQUIRE(::mkdir((f.src + "/z").c_str(), 0700) == 0);
  REQUIRE(::mkfifo((f.src + "/z/pipe").c_str(), 0600) == 0);
  auto r = save(f.src, f.saved, host_rules(ws::Special::refuse));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "/work/z/pipe: a FIFO (a workspace holds files, directories and symlinks only)");
  CHECK_FALSE(exists(f.saved));
}

TEST_CASE("save_tree refuses a destination that exists and leaves it as it was") {
  Fixture f;
  Fixture::write(f.src + "/a", "a");
  REQUIRE(::mkdir(f.saved.c_str(), 0700) == 0);
  Fixture::write(f.saved + "/previous", "kept");
  auto r = save(f.src, f.saved, host_rules());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "mkdir(\"workspace_out\"): EEXIST (File exists)");
  CHECK(read_all(f.saved + "/previous") == "kept");
  CHECK_FALSE(exists(f.saved + "/a"));
}

TEST_CASE("create_as: the copies are made with that file-system identity, the source read with the caller's") {
  if (::geteuid() != 0) {
    MESSAGE("not root: setfsuid to another user is not possible, skipped");
    return;
  }
  Fixture f;
  constexpr uid_t kUid = 54321;
  constexpr gid_t kGid = 54322;
  Fixture::write(f.src + "/a", "a");
  REQUIRE(::mkdir((f.src + "/sub").c_str(), 0700) == 0);
  Fixture::write(f.src + "/sub/b", "b");
  REQUIRE(::symlink("a", (f.src + "/link").c_str()) == 0);
  REQUIRE(::chown(f.dst.c_str(), kUid, kGid) == 0);
  ws::TreeRules rules = host_rules(ws::Special::refuse);
  rules.create_as = ws::CreateAs{kUid, kGid};
  auto r = copy(f.src, f.dst, rules);  // src/ is root's 0700: the new identity alone could not read it
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  for (const char* name : {"a", "sub", "sub/b", "link"}) {
    CAPTURE(name);
    CHECK(lstat_of(f.dst + "/" + name).st_uid == kUid);
    CHECK(lstat_of(f.dst + "/" + name).st_gid == kGid);
  }
  // Back to the caller's own identity afterwards.
  Fixture::write(f.root + "/after", "x");
  CHECK(lstat_of(f.root + "/after").st_uid == 0);

  // A destination the identity may not write to: EACCES, not a write as root.
  Fixture f2;
  Fixture::write(f2.src + "/x", "x");
  auto denied = copy(f2.src, f2.dst, rules);
  REQUIRE_FALSE(denied.ok());
  CHECK(denied.error().message == "openat2(\"workspace_out/x\"): EACCES (Permission denied)");
}

TEST_CASE("nearly_full: under 64 KiB or 1% free, or no inode free") {
  struct statfs st {};
  st.f_bsize = 4096;
  st.f_blocks = 256 * 1024;  // 1 GiB
  st.f_files = 16384;
  st.f_ffree = 100;
  st.f_bavail = 1024;  // 4 MiB: 0.4%
  CHECK(ws::nearly_full(st));
  st.f_bavail = 4096;  // 16 MiB: 1.6%
  CHECK_FALSE(ws::nearly_full(st));
  st.f_ffree = 0;
  CHECK(ws::nearly_full(st));
  st.f_ffree = 100;
  st.f_blocks = 64;  // 256 KiB
  st.f_bavail = 15;  // 60 KiB
  CHECK(ws::nearly_full(st));
  st.f_bavail = 17;  // 68 KiB
  CHECK_FALSE(ws::nearly_full(st));
}

TEST_CASE(
    "unlock_unreadable: what its owner cannot read is read all the same, the copy and the source keep their mode") {
  Fixture f;
  Fixture::write(f.src + "/locked", "x");
  REQUIRE(::chmod((f.src + "/locked").c_str(), 0) == 0);
  REQUIRE(::mkdir((f.src + "/closed").c_str(), 0700) == 0);
  Fixture::write(f.src + "/closed/f", "y");
  REQUIRE(::chmod((f.src + "/closed").c_str(), 0) == 0);
  ws::TreeRules rules = host_rules();
  rules.dir_mode_add = 0700;
  if (::geteuid() != 0) {
    // Without the rule a runner that is not root cannot read them.
    auto denied = save(f.src, f.saved, rules);
    REQUIRE_FALSE(denied.ok());
    CHECK(contains(denied.error().message, "EACCES"));
    CHECK_FALSE(exists(f.saved));
  }
  rules.unlock_unreadable = true;
  auto r = save(f.src, f.saved, rules);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  CHECK(r->entries == 3);
  CHECK((lstat_of(f.saved + "/locked").st_mode & 07777) == 0);
  CHECK(lstat_of(f.saved + "/locked").st_size == 1);
  CHECK((lstat_of(f.saved + "/closed").st_mode & 07777) == 0700);
  CHECK(read_all(f.saved + "/closed/f") == "y");
  // The source is as it was.
  CHECK((lstat_of(f.src + "/locked").st_mode & 07777) == 0);
  CHECK((lstat_of(f.src + "/closed").st_mode & 07777) == 0);

  // And back (copy-in): the host copy's 0000 file, read by its owner.
  ws::TreeRules in_rules = host_rules(ws::Special::refuse);
  in_rules.unlock_unreadable = true;
  auto back = copy(f.saved, f.dst, in_rules);
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  CHECK((lstat_of(f.dst + "/locked").st_mode & 07777) == 0);
  CHECK((lstat_of(f.saved + "/locked").st_mode & 07777) == 0);
}
