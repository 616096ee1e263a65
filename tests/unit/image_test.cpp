// Runtime images (server/image/oci.h): a layout built from a tree unpacks to
// the same tree, read-only and without setuid bits; the same tree gives the
// same digest; a blob whose bytes are not its digest's fails the whole unpack;
// hostile layers (paths leaving the tree, through a symbolic link, device
// nodes, hard links out, bombs) are refused with nothing written outside and
// nothing left; whiteouts remove what lower layers put there. The hostile
// layouts are written here with libarchive, layer by layer.
#include <doctest/doctest.h>

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/image/oci.h"
#include "server/util/crypto.h"
#include "tests/unit/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct TempDir : unit::TempDir {
  TempDir() : unit::TempDir("image") {}
  ~TempDir() {
    std::error_code ec;
    // Unpacked trees are read-only: writable again before they go.
    for (auto it = fs::recursive_directory_iterator(path, ec); it != fs::recursive_directory_iterator(); ++it)
      if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0755);
    ::chmod(path.c_str(), 0755);
  }
};

std::string read(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write(const std::string& p, const std::string& text) {
  fs::create_directories(fs::path(p).parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// One tar entry of a hand-made layer.
struct Entry {
  std::string path;
  mode_t type = AE_IFREG;
  std::string data;      // a file's bytes
  std::string link;      // a symbolic link's target
  std::string hardlink;  // a hard link's target
  mode_t perm = 0644;
};

std::string tar(const std::vector<Entry>& entries, bool gzip = true) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (gzip) archive_write_add_filter_gzip(a);
  auto sink = [](archive*, void* s, const void* p, size_t n) -> la_ssize_t {
    static_cast<std::string*>(s)->append(static_cast<const char*>(p), n);
    return static_cast<la_ssize_t>(n);
  };
  archive_write_open(a, &out, nullptr, sink, nullptr);
  for (const Entry& e : entries) {
    archive_entry* ae = archive_entry_new();
    archive_entry_set_pathname(ae, e.path.c_str());
    archive_entry_set_filetype(ae, e.type);
    archive_entry_set_perm(ae, e.perm);
    if (e.type == AE_IFLNK) archive_entry_set_symlink(ae, e.link.c_str());
    if (!e.hardlink.empty()) archive_entry_set_hardlink(ae, e.hardlink.c_str());
    if (e.type == AE_IFCHR) archive_entry_set_rdev(ae, makedev(1, 3));
    archive_entry_set_size(ae, e.type == AE_IFREG && e.hardlink.empty() ? static_cast<la_int64_t>(e.data.size()) : 0);
    archive_write_header(a, ae);
    if (!e.data.empty()) archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(ae);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

std::string blob(const std::string& layout, const std::string& bytes) {
  const std::string hex = util::sha256_hex(bytes);
  write(layout + "/blobs/sha256/" + hex, bytes);
  return "sha256:" + hex;
}

// A layout of these layers; returns its manifest's digest.
image::Digest layout_of(const std::string& layout, const std::vector<std::vector<Entry>>& layers,
                        const std::string& arch = "amd64", bool gzip = true) {
  write(layout + "/oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  const std::string config = json{{"architecture", arch}, {"os", "linux"}, {"rootfs", {{"type", "layers"}}}}.dump();
  json manifest = {{"schemaVersion", 2},
                   {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                   {"config",
                    {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                     {"digest", blob(layout, config)},
                     {"size", config.size()}}},
                   {"layers", json::array()}};
  for (const auto& entries : layers) {
    const std::string t = tar(entries, gzip);
    manifest["layers"].push_back(
        {{"mediaType", gzip ? "application/vnd.oci.image.layer.v1.tar+gzip" : "application/vnd.oci.image.layer.v1.tar"},
         {"digest", blob(layout, t)},
         {"size", t.size()}});
  }
  return *image::parse_digest(blob(layout, manifest.dump()));
}

std::string refusal(const std::string& layout, const image::Digest& d, const std::string& dest,
                    const image::Limits& limits = {}) {
  auto u = image::unpack(layout, d, dest, limits);
  REQUIRE_FALSE(u.ok());
  CHECK_FALSE(fs::exists(dest));  // nothing of a refused image is left
  return u.error().message;
}

}  // namespace

TEST_CASE("image: a built layout unpacks to its tree, read-only, setuid dropped; the same tree, the same digest") {
  TempDir t;
  const std::string root = t.path + "/root";
  write(root + "/usr/bin/tool", "#!/bin/sh\necho hi\n");
  ::chmod((root + "/usr/bin/tool").c_str(), 04755);
  write(root + "/etc/secret", "only the owner\n");
  ::chmod((root + "/etc/secret").c_str(), 0600);
  fs::create_symlink("usr/bin", root + "/bin");
  fs::create_hard_link(root + "/usr/bin/tool", root + "/usr/bin/tool2");
  auto a = image::build(root, t.path + "/a");
  auto b = image::build(root, t.path + "/b");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->manifest.hex == b->manifest.hex);
  CHECK(a->entries == 7);  // bin etc etc/secret usr usr/bin usr/bin/tool usr/bin/tool2
  auto u = image::unpack(t.path + "/a", a->manifest, t.path + "/out");
  REQUIRE_MESSAGE(u.ok(), (u.ok() ? std::string() : u.error().message));
  CHECK(u->files == 2);
  CHECK(u->hardlinks == 1);
  CHECK(u->symlinks == 1);
  CHECK(u->special_bits_dropped == 1);
  CHECK(read(t.path + "/out/usr/bin/tool") == "#!/bin/sh\necho hi\n");
  struct stat st {};
  REQUIRE(::stat((t.path + "/out/usr/bin/tool").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0555);  // no setuid, no write bit
  CHECK(st.st_nlink == 2);
  REQUIRE(::stat((t.path + "/out/etc/secret").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0400);  // still only its owner's
  REQUIRE(::stat((t.path + "/out/usr").c_str(), &st) == 0);
  CHECK((st.st_mode & 0222) == 0);
  CHECK(fs::read_symlink(t.path + "/out/bin") == "usr/bin");
  // The cache: one tree per digest, the second call finds the first's.
  auto c1 = image::ensure_cached(t.path + "/cache", t.path + "/a", a->manifest);
  auto c2 = image::ensure_cached(t.path + "/cache", t.path + "/b", b->manifest);
  REQUIRE(c1.ok());
  REQUIRE(c2.ok());
  CHECK(*c1 == t.path + "/cache/sha256-" + a->manifest.hex);
  CHECK(*c1 == *c2);
  CHECK(read(*c1 + "/usr/bin/tool2") == "#!/bin/sh\necho hi\n");
}

TEST_CASE("image: a blob that is not its digest's fails the whole unpack") {
  TempDir t;
  const std::string layout = t.path + "/l";
  // Plain tar layers: a changed byte still makes a valid archive.
  const image::Digest d =
      layout_of(layout, {{{"a.txt", AE_IFREG, "one"}}, {{"b.txt", AE_IFREG, "two"}}}, "amd64", false);
  // Another manifest than the one pinned.
  CHECK(refusal(layout, *image::parse_digest("sha256:" + std::string(64, '0')), t.path + "/o").find("no manifest") !=
        std::string::npos);
  // The second layer's bytes changed under its name: its first layer went in
  // before the check failed, and is gone too.
  const json manifest = json::parse(read(layout + "/blobs/sha256/" + d.hex));
  const std::string second = manifest["layers"][1]["digest"].get<std::string>().substr(7);
  std::string bytes = read(layout + "/blobs/sha256/" + second);
  const size_t at = bytes.find("two");
  REQUIRE(at != std::string::npos);
  bytes.replace(at, 3, "TWO");
  write(layout + "/blobs/sha256/" + second, bytes);
  CHECK(refusal(layout, d, t.path + "/o").find("does not have that digest") != std::string::npos);
  // A manifest whose bytes changed.
  write(layout + "/blobs/sha256/" + d.hex, read(layout + "/blobs/sha256/" + d.hex) + " ");
  CHECK(refusal(layout, d, t.path + "/o").find("does not have that digest") != std::string::npos);
  // Digests are sha256 in lowercase hex, whole.
  CHECK_FALSE(image::parse_digest("sha256:ABC").ok());
  CHECK_FALSE(image::parse_digest("sha512:" + std::string(64, 'a')).ok());
  CHECK(image::parse_digest("sha256:" + std::string(64, 'a')).ok());
}

TEST_CASE("image: hostile layers are refused; nothing is written outside the tree") {
  TempDir t;
  const std::string outside = t.path + "/outside";
  fs::create_directories(outside);
  struct Case {
    std::string what;
    std::vector<Entry> layer;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"dot-dot", {{"../outside/x", AE_IFREG, "x"}}, "leaves the tree"},
      {"deep dot-dot", {{"a/../../outside/x", AE_IFREG, "x"}}, "leaves the tree"},
      {"absolute", {{"/tmp/x", AE_IFREG, "x"}}, "absolute path"},
      {"through a symlink", {{"l", AE_IFLNK, "", outside}, {"l/x", AE_IFREG, "x"}}, "symbolic link"},
      {"through a relative symlink", {{"l", AE_IFLNK, "", "../outside"}, {"l/x", AE_IFREG, "x"}}, "symbolic link"},
      {"a device node", {{"dev/null", AE_IFCHR}}, "device node"},
      {"a FIFO", {{"fifo", AE_IFIFO}}, "FIFO"},
      {"a hard link out", {{"h", AE_IFREG, "", "", "../outside/target"}}, "leaves the tree"},
      {"a hard link through a symlink",
       {{"l", AE_IFLNK, "", outside}, {"h", AE_IFREG, "", "", "l/target"}},
       "symbolic link"},
  };
  write(outside + "/target", "host file\n");
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string layout = t.path + "/l-" + std::to_string(&c - cases.data());
    const image::Digest d = layout_of(layout, {c.layer});
    const std::string why = refusal(layout, d, t.path + "/o");
    MESSAGE(c.what << ": " << why);
    CHECK_MESSAGE(why.find(c.says) != std::string::npos, why);
    CHECK_FALSE(fs::exists(outside + "/x"));
    CHECK(read(outside + "/target") == "host file\n");
  }
  // Bombs: bytes and entries are bounded.
  const image::Digest big = layout_of(t.path + "/big", {{{"a", AE_IFREG, std::string(4096, 'a')}}});
  image::Limits small;
  small.bytes_max = 1024;
  CHECK(refusal(t.path + "/big", big, t.path + "/o", small).find("over 1024 bytes") != std::string::npos);
  std::vector<Entry> many;
  for (int i = 0; i < 20; ++i) many.push_back({"f" + std::to_string(i), AE_IFREG, "x"});
  const image::Digest lots = layout_of(t.path + "/many", {many});
  small.bytes_max = 1 << 20;
  small.entries_max = 10;
  CHECK(refusal(t.path + "/many", lots, t.path + "/o", small).find("over 10 entries") != std::string::npos);
  // Another platform's image.
  const image::Digest arm = layout_of(t.path + "/arm", {{{"a", AE_IFREG, "x"}}}, "arm64");
  CHECK(refusal(t.path + "/arm", arm, t.path + "/o").find("linux/arm64, not linux/amd64") != std::string::npos);
}

TEST_CASE("image: whiteouts remove what lower layers put there, never what their own layer does") {
  TempDir t;
  const std::string layout = t.path + "/l";
  const image::Digest d = layout_of(
      layout, {{{"a/x", AE_IFREG, "x"}, {"a/y", AE_IFREG, "y"}, {"b/deep/f", AE_IFREG, "f"}, {"c", AE_IFREG, "c"}},
               {{"a/z", AE_IFREG, "z"}, {"a/.wh..wh..opq", AE_IFREG}, {"b/.wh.deep", AE_IFREG}, {"c", AE_IFREG, "C"}}});
  auto u = image::unpack(layout, d, t.path + "/out");
  REQUIRE_MESSAGE(u.ok(), (u.ok() ? std::string() : u.error().message));
  CHECK(u->layers == 2);
  CHECK(u->whiteouts == 2);
  CHECK(fs::exists(t.path + "/out/a/z"));  // its own layer's, listed before the opaque marker
  CHECK_FALSE(fs::exists(t.path + "/out/a/x"));
  CHECK_FALSE(fs::exists(t.path + "/out/a/y"));
  CHECK_FALSE(fs::exists(t.path + "/out/b/deep"));
  CHECK(fs::exists(t.path + "/out/b"));
  CHECK(read(t.path + "/out/c") == "C");  // replaced by the upper layer
  CHECK_FALSE(fs::exists(t.path + "/out/a/.wh..wh..opq"));
}

TEST_CASE("image: a wide, deep tree with names in any encoding comes back entry for entry") {
  TempDir t;
  const std::string root = t.path + "/root";
  std::vector<std::string> want;
  for (int i = 0; i < 40; ++i)
    for (int j = 0; j < 8; ++j) {
      const std::string rel = "d" + std::to_string(i) + "/sub" + std::to_string(j) + "/f" + std::to_string(i * 8 + j);
      write(root + "/" + rel, rel);
      want.push_back(rel);
    }
  // A Latin-1 name (not UTF-8) and a UTF-8 one, and a link to each.
  const std::string latin1 = "caf\xe9.txt", utf8 = "Főtanúsítvány.pem";
  write(root + "/names/" + latin1, "latin-1");
  write(root + "/names/" + utf8, "utf-8");
  fs::create_symlink(latin1, root + "/names/to-latin1");
  fs::create_symlink(utf8, root + "/names/to-utf8");
  auto built = image::build(root, t.path + "/l");
  REQUIRE_MESSAGE(built.ok(), (built.ok() ? std::string() : built.error().message));
  auto u = image::unpack(t.path + "/l", built->manifest, t.path + "/out");
  REQUIRE_MESSAGE(u.ok(), (u.ok() ? std::string() : u.error().message));
  CHECK(u->files == want.size() + 2);
  for (const std::string& rel : want) CHECK(read(t.path + "/out/" + rel) == rel);
  CHECK(read(t.path + "/out/names/" + latin1) == "latin-1");
  CHECK(read(t.path + "/out/names/" + utf8) == "utf-8");
  CHECK(fs::read_symlink(t.path + "/out/names/to-latin1").string() == latin1);
  CHECK(fs::read_symlink(t.path + "/out/names/to-utf8").string() == utf8);
}

TEST_CASE("image: a layout archive (a tar of the layout) unpacks as the layout does, under the same rules") {
  TempDir t;
  const std::string root = t.path + "/root";
  write(root + "/etc/greeting", "hello\n");
  auto built = image::build(root, t.path + "/l");
  REQUIRE(built.ok());
  // The layout's files as one plain tar, as `tar -C l -cf l.tar .` makes it.
  std::vector<Entry> files;
  for (const auto& e : fs::recursive_directory_iterator(t.path + "/l"))
    if (e.is_regular_file())
      files.push_back({fs::relative(e.path(), t.path + "/l").string(), AE_IFREG, read(e.path().string())});
  write(t.path + "/l.tar", tar(files, false));
  auto u = image::unpack(t.path + "/l.tar", built->manifest, t.path + "/out");
  REQUIRE_MESSAGE(u.ok(), (u.ok() ? std::string() : u.error().message));
  CHECK(read(t.path + "/out/etc/greeting") == "hello\n");
  CHECK_FALSE(fs::exists(t.path + "/out.layout"));  // the archive's files are gone again
  // An archive with an entry leaving its directory is refused like a layer.
  files.push_back({"../escaped", AE_IFREG, "x"});
  write(t.path + "/bad.tar", tar(files, false));
  const std::string why = refusal(t.path + "/bad.tar", built->manifest, t.path + "/out2");
  CHECK_MESSAGE(why.find("leaves the tree") != std::string::npos, why);
  CHECK_FALSE(fs::exists(t.path + "/escaped"));
  CHECK_FALSE(fs::exists(t.path + "/out2.layout"));
}
