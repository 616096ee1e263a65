// The tenant-scoped store: input names, media types, opaque handles, tenant
// isolation, immutable blobs, artifact URIs, expiry.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "server/store/store.h"
#include "server/util/fs.h"
#include "tests/unit/temp_dir.h"

using namespace std::string_literals;

namespace {

struct TempDir : unit::TempDir {
  TempDir() : unit::TempDir("store") {}
};

bool is_hex32(const std::string& s) {
  return s.size() == 32 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

const char* kAbcSha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

void check_rejected(const std::string& name, const char* expected_fragment) {
  auto s = store::validate_input_name(name);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == util::ErrorCode::kInvalidArgument);
  CHECK(s.error().message.rfind("name: ", 0) == 0);
  CHECK(s.error().message.find(expected_fragment) != std::string::npos);
}

}  // namespace

TEST_CASE("input names: empty, dot, dotdot and slashes are rejected (path traversal)") {
  check_rejected("", "must not be empty");
  check_rejected(".", "are not file names");
  check_rejected("..", "are not file names");
  check_rejected("a/b", "without \"/\"");
  check_rejected("../x", "without \"/\"");
  check_rejected("/etc/passwd", "without \"/\"");
  check_rejected("x/", "without \"/\"");
}

TEST_CASE("input names: control characters, DEL and embedded NUL are rejected") {
  check_rejected("a\nb", "control characters");
  check_rejected("a\tb", "control characters");
  check_rejected("a\rb", "control characters");
  check_rejected(
      "a\x7f"
      "b",
      "control characters");
  check_rejected("a\x1b[31m", "control characters");
  std::string with_nul = "safe.csv\0../../etc/passwd"s;
  REQUIRE(with_nul.size() == 25);
  check_rejected(with_nul, "");
  check_rejected("evil\0.csv"s, "NUL");
}

TEST_CASE("input names: invalid UTF-8 is rejected") {
  check_rejected("bad\xff.csv", "valid UTF-8");
  check_rejected("\xC0\xAF", "valid UTF-8");          // overlong '/'
  check_rejected("\xED\xA0\x80.txt", "valid UTF-8");  // surrogate
}

TEST_CASE("input names: 255 bytes is the limit") {
  CHECK(store::validate_input_name(std::string(255, 'a')).ok());
  check_rejected(std::string(256, 'a'), "longer than 255 bytes");
}

TEST_CASE("input names: ordinary and non-ASCII names are accepted") {
  CHECK(store::validate_input_name("orders.csv").ok());
  CHECK(store::validate_input_name("donn\xC3\xA9"
                                   "es.csv")
            .ok());
  CHECK(store::validate_input_name("...").ok());
  CHECK(store::validate_input_name(".hidden").ok());
  CHECK(store::validate_input_name("a b.txt").ok());
}

TEST_CASE("media type by extension when the content agrees") {
  CHECK(store::guess_media_type("orders.csv", "a,b\n1,2\n") == "text/csv");
  CHECK(store::guess_media_type("data.json", "{\"a\":1}") == "application/json");
  CHECK(store::guess_media_type("notes.md", "# hi") == "text/markdown");
  std::string png = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR"s;
  CHECK(store::guess_media_type("chart.png", png) == "image/png");
  CHECK(store::guess_media_type("x.pdf", "%PDF-1.4\n\xE2\xE3\xCF\xD3"s) == "application/pdf");
}

TEST_CASE("a .png whose content is text is not served as image/png") {
  std::string t = store::guess_media_type("evil.png", "<script>alert(1)</script>");
  CHECK(t != "image/png");
  CHECK(t == "text/plain");
}

TEST_CASE("binary content is application/octet-stream, even when named .csv or .json") {
  std::string bin =
      "\x7f"
      "ELF\x02\x01\x01\0\0\0"s;
  CHECK(store::guess_media_type("blob.bin", bin) == "application/octet-stream");
  CHECK(store::guess_media_type("noext", bin) == "application/octet-stream");
  CHECK(store::guess_media_type("orders.csv", bin) == "application/octet-stream");
  CHECK(store::guess_media_type("data.json", "{\"a\":\"\xff\"}") == "application/octet-stream");
  CHECK(store::guess_media_type("unknown.xyz", "hello") == "text/plain");
  // Text with a NUL is binary.
  CHECK(store::guess_media_type("a.txt", "a\0b"s) == "application/octet-stream");
}

TEST_CASE("is_text_media_type") {
  CHECK(store::is_text_media_type("text/csv"));
  CHECK(store::is_text_media_type("application/json"));
  CHECK_FALSE(store::is_text_media_type("image/png"));
  CHECK_FALSE(store::is_text_media_type("application/octet-stream"));
}

TEST_CASE("put_input returns a 32-hex id and the sha256 of the content") {
  TempDir dir;
  store::Store st(dir.path);
  auto r = st.put_input("alice", "abc.txt", "abc");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(is_hex32(r->input_id));
  CHECK(r->sha256 == kAbcSha256);
  CHECK(r->size == 3);
  CHECK(r->name == "abc.txt");
  CHECK(r->media_type == "text/plain");

  auto got = st.get_input("alice", r->input_id);
  REQUIRE(got.ok());
  CHECK(got->input_id == r->input_id);
  CHECK(got->name == "abc.txt");
  CHECK(got->sha256 == kAbcSha256);
  CHECK(got->size == 3);
  CHECK(got->blob_path == r->blob_path);
  auto bytes = st.read_blob(got->blob_path, 1024);
  REQUIRE(bytes.ok());
  CHECK(*bytes == "abc");
}

TEST_CASE("put_input is idempotent for the same name and content") {
  TempDir dir;
  store::Store st(dir.path);
  auto a = st.put_input("alice", "orders.csv", "a,b\n");
  auto b = st.put_input("alice", "orders.csv", "a,b\n");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->input_id == b->input_id);

  auto other_content = st.put_input("alice", "orders.csv", "a,c\n");
  REQUIRE(other_content.ok());
  CHECK(other_content->input_id != a->input_id);

  auto other_name = st.put_input("alice", "orders2.csv", "a,b\n");
  REQUIRE(other_name.ok());
  CHECK(other_name->input_id != a->input_id);
  CHECK(other_name->sha256 == a->sha256);
  CHECK(other_name->blob_path == a->blob_path);  // content-addressed blob shared

  // The same upload by another tenant is a different handle.
  auto bob = st.put_input("bob", "orders.csv", "a,b\n");
  REQUIRE(bob.ok());
  CHECK(bob->input_id != a->input_id);
}

TEST_CASE("put_input rejects bad names and bad tenants") {
  TempDir dir;
  store::Store st(dir.path);
  auto r = st.put_input("alice", "../x", "data");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == util::ErrorCode::kInvalidArgument);
  CHECK(r.error().message.find("name:") == 0);

  auto t = st.put_input("../alice", "x.txt", "data");
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().code == util::ErrorCode::kInvalidArgument);
  CHECK(t.error().message == "tenant names are 1-64 of [a-z0-9_-]");
  CHECK_FALSE(st.check_tenant("").ok());
  CHECK_FALSE(st.check_tenant("Alice").ok());
  CHECK_FALSE(st.check_tenant(std::string(65, 'a')).ok());
  CHECK(st.check_tenant(std::string(64, 'a')).ok());
  // Nothing was written outside the state directory.
  CHECK_FALSE(std::filesystem::exists(dir.path + "/alice"));
}

TEST_CASE("another tenant's input reads exactly like an unknown id") {
  TempDir dir;
  store::Store st(dir.path);
  auto r = st.put_input("alice", "secret.txt", "s3cret");
  REQUIRE(r.ok());

  auto foreign = st.get_input("bob", r->input_id);
  REQUIRE_FALSE(foreign.ok());
  auto unknown = st.get_input("alice", "0123456789abcdef0123456789abcdef");
  REQUIRE_FALSE(unknown.ok());
  auto unknown_bob = st.get_input("bob", "fedcba9876543210fedcba9876543210");
  REQUIRE_FALSE(unknown_bob.ok());

  CHECK(foreign.error().code == util::ErrorCode::kNotFound);
  CHECK(unknown.error().code == util::ErrorCode::kNotFound);
  CHECK(foreign.error().message == unknown.error().message);
  CHECK(foreign.error().message == unknown_bob.error().message);
  CHECK(foreign.error().message.find("input_id") != std::string::npos);
  // The message must not echo the id (no oracle, no reflection).
  CHECK(foreign.error().message.find(r->input_id) == std::string::npos);
}

TEST_CASE("traversal and malformed ids are not_found before any lookup") {
  TempDir dir;
  store::Store st(dir.path);
  auto r = st.put_input("alice", "a.txt", "x");
  REQUIRE(r.ok());
  auto unknown = st.get_input("alice", "0123456789abcdef0123456789abcdef");
  REQUIRE_FALSE(unknown.ok());
  for (std::string bad : {"../../etc/passwd"s, ""s, "../"s + r->input_id, r->input_id + "/"s, r->input_id + ".json"s,
                          "0123456789ABCDEF0123456789ABCDEF"s, r->input_id.substr(0, 31), r->input_id + "\0"s}) {
    CAPTURE(std::string(bad));
    auto g = st.get_input("alice", bad);
    REQUIRE_FALSE(g.ok());
    CHECK(g.error().code == util::ErrorCode::kNotFound);
    CHECK(g.error().message == unknown.error().message);
  }
  // A bad tenant is also not_found on reads, never a different error.
  auto g = st.get_input("../alice", r->input_id);
  REQUIRE_FALSE(g.ok());
  CHECK(g.error().code == util::ErrorCode::kNotFound);
}

TEST_CASE("put_artifact and get_artifact round trip; list_artifacts returns it") {
  TempDir dir;
  store::Store st(dir.path);
  store::ArtifactRecord rec;
  rec.job_id = "job-1";
  rec.name = "out/report.csv";
  rec.media_type = "text/csv";
  rec.verdict = "accepted";
  rec.reason = "";
  auto put = st.put_artifact("alice", rec, "x,y\n1,2\n");
  REQUIRE_MESSAGE(put.ok(), (put.ok() ? "" : put.error().message));
  CHECK(is_hex32(put->artifact_id));
  CHECK(put->size == 8);

  auto got = st.get_artifact("alice", put->artifact_id);
  REQUIRE(got.ok());
  CHECK(got->artifact_id == put->artifact_id);
  CHECK(got->job_id == "job-1");
  CHECK(got->name == "out/report.csv");
  CHECK(got->media_type == "text/csv");
  CHECK(got->verdict == "accepted");
  CHECK(got->size == 8);
  CHECK(got->sha256 == put->sha256);
  auto bytes = st.read_blob(got->blob_path, 1024);
  REQUIRE(bytes.ok());
  CHECK(*bytes == "x,y\n1,2\n");

  auto list = st.list_artifacts("alice", 10);
  REQUIRE(list.size() == 1);
  CHECK(list[0].artifact_id == put->artifact_id);
  CHECK(list[0].name == "out/report.csv");
  CHECK(st.list_artifacts("alice", 0).empty());
  CHECK(st.list_artifacts("bob", 10).empty());

  auto foreign = st.get_artifact("bob", put->artifact_id);
  REQUIRE_FALSE(foreign.ok());
  CHECK(foreign.error().code == util::ErrorCode::kNotFound);
  auto unknown = st.get_artifact("alice", "0123456789abcdef0123456789abcdef");
  REQUIRE_FALSE(unknown.ok());
  CHECK(foreign.error().message == unknown.error().message);
}

TEST_CASE("list_artifacts honours the limit") {
  TempDir dir;
  store::Store st(dir.path);
  for (int i = 0; i < 3; ++i) {
    store::ArtifactRecord rec;
    rec.name = "f" + std::to_string(i);
    REQUIRE(st.put_artifact("alice", rec, "content " + std::to_string(i)).ok());
  }
  CHECK(st.list_artifacts("alice", 10).size() == 3);
  CHECK(st.list_artifacts("alice", 2).size() == 2);
}

TEST_CASE("blob files are immutable: mode 0444") {
  TempDir dir;
  store::Store st(dir.path);
  auto r = st.put_input("alice", "a.txt", "abc");
  REQUIRE(r.ok());
  CHECK(r->blob_path == dir.path + "/tenants/alice/blobs/" + kAbcSha256);
  struct stat sb {};
  REQUIRE(::stat(r->blob_path.c_str(), &sb) == 0);
  CHECK(S_ISREG(sb.st_mode));
  CHECK((sb.st_mode & 07777) == 0444);

  store::ArtifactRecord rec;
  rec.name = "o.bin";
  auto a = st.put_artifact("alice", rec, "artifact bytes");
  REQUIRE(a.ok());
  REQUIRE(::stat(a->blob_path.c_str(), &sb) == 0);
  CHECK((sb.st_mode & 07777) == 0444);

  // Tenant directories are private.
  REQUIRE(::stat((dir.path + "/tenants/alice").c_str(), &sb) == 0);
  CHECK((sb.st_mode & 077) == 0);
}

TEST_CASE("artifact URI round trip; other schemes and paths are rejected") {
  std::string id = "0123456789abcdef0123456789abcdef";
  CHECK(store::artifact_uri(id) == "throwbox://artifacts/" + id);
  CHECK(store::artifact_id_from_uri(store::artifact_uri(id)) == id);
  for (std::string bad :
       {"file:///etc/passwd"s, "http://artifacts/"s + id, "throwbox://inputs/"s + id, "throwbox://artifacts/"s,
        "throwbox://artifacts/../"s + id, "throwbox://artifacts/"s + id + "/x", "throwbox://artifacts/"s + id + "?a=1",
        "THROWBOX://artifacts/"s + id, "throwbox://artifacts/0123456789ABCDEF0123456789ABCDEF"s,
        " throwbox://artifacts/"s + id, ""s}) {
    CAPTURE(std::string(bad));
    CHECK(store::artifact_id_from_uri(bad) == "");
  }
}

TEST_CASE("artifact part URIs: one spelling per part, nothing else") {
  std::string id = "0123456789abcdef0123456789abcdef";
  CHECK(store::artifact_part_uri(id, 0) == "throwbox://artifacts/" + id + "/parts/0");
  auto p = store::artifact_part_from_uri(store::artifact_part_uri(id, 12));
  REQUIRE(p);
  CHECK(p->artifact_id == id);
  CHECK(p->index == 12);
  CHECK(store::artifact_part_from_uri("throwbox://artifacts/" + id + "/parts/999999999999999999")->index ==
        999999999999999999ull);
  for (std::string tail :
       {"/parts/"s, "/parts/01"s, "/parts/-1"s, "/parts/+1"s, "/parts/1 "s, "/parts/1/"s, "/parts/1x"s, "/parts/0x1"s,
        "/parts/1000000000000000000"s, "/part/1"s, "/PARTS/1"s, "/parts//1"s, ""s, "/x"s}) {
    CAPTURE(tail);
    CHECK_FALSE(store::artifact_part_from_uri("throwbox://artifacts/" + id + tail));
  }
  CHECK_FALSE(store::artifact_part_from_uri("throwbox://artifacts/0123456789ABCDEF0123456789ABCDEF/parts/0"));
  CHECK_FALSE(store::artifact_part_from_uri("throwbox://artifacts/../parts/0"));
  // The whole URI is not a part, and a part URI is not the whole.
  CHECK_FALSE(store::artifact_part_from_uri(store::artifact_uri(id)));
  CHECK(store::artifact_id_from_uri(store::artifact_part_uri(id, 0)) == "");
  CHECK(store::artifact_parts(2600, 1024) == 3);
  CHECK(store::artifact_parts(2048, 1024) == 2);
  CHECK(store::artifact_parts(2049, 1024) == 3);
}

TEST_CASE("read_blob_range reads from an offset, shorter at the end") {
  TempDir dir;
  store::Store st(dir.path);
  store::ArtifactRecord rec;
  rec.job_id = "job-1";
  rec.name = "data.bin";
  rec.media_type = "application/octet-stream";
  rec.verdict = "accepted";
  std::string content;
  for (int i = 0; i < 2600; ++i) content += static_cast<char>(i * 7);
  auto put = st.put_artifact("alice", rec, content);
  REQUIRE(put.ok());
  std::string joined;
  for (uint64_t k = 0; k < 3; ++k) {
    auto part = st.read_blob_range(put->blob_path, k * 1024, 1024);
    REQUIRE(part.ok());
    CHECK(part->size() == (k < 2 ? 1024u : 552u));
    joined += *part;
  }
  CHECK(joined == content);
  auto past = st.read_blob_range(put->blob_path, 4096, 1024);
  REQUIRE(past.ok());
  CHECK(past->empty());
  CHECK_FALSE(st.read_blob_range(dir.path + "/no-such-blob", 0, 10).ok());
}

TEST_CASE("input names with C1 controls or bidi overrides are refused") {
  for (const char* bad : {"a\xC2\x85"
                          "b.csv",
                          "invoice\xE2\x80\xAE"
                          "vsc.exe",
                          "x\xE2\x81\xA6"
                          "y",
                          "l\xE2\x80\x8F"
                          "r"}) {
    CAPTURE(std::string(bad));
    auto s = store::validate_input_name(bad);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code == util::ErrorCode::kInvalidArgument);
  }
  CHECK(store::validate_input_name("r\xC3\xA9sum\xC3\xA9.csv").ok());
}

namespace {

// Moves a file's mtime `age_s` seconds into the past.
void backdate(const std::string& path, int age_s) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= age_s;
  times[1] = times[0];
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

// Takes a tenant's lock file as another server's janitor would; closing
// the descriptor gives it back.
int hold_lock(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX) == 0);
  return fd;
}

}  // namespace

TEST_CASE("expire: old records go, then blobs no record references; a referenced or reused blob stays") {
  TempDir dir;
  store::Store s(dir.path);
  auto old_in = s.put_input("alice", "old.txt", "old content");
  auto kept_in = s.put_input("alice", "kept.txt", "kept content");
  auto shared_old = s.put_input("alice", "shared-old.txt", "shared");
  auto shared_new = s.put_input("alice", "shared-new.txt", "shared");
  auto reused = s.put_input("alice", "reused.txt", "reused content");
  REQUIRE((old_in && kept_in && shared_old && shared_new && reused));
  const std::string inputs = dir.path + "/tenants/alice/inputs/";
  for (auto* r : {&old_in, &shared_old, &reused}) {
    backdate(inputs + (*r)->input_id + ".json", 7200);
    backdate((*r)->blob_path, 7200);
  }
  backdate(kept_in->blob_path, 7200);  // old blob, but its record is young
  // Reused after it grew old: put_blob refreshes the blob, the new record is young.
  auto again = s.put_input("alice", "reused-again.txt", "reused content");
  REQUIRE(again);

  s.expire(3600, 3600);
  CHECK_FALSE(s.get_input("alice", old_in->input_id));
  CHECK_FALSE(std::filesystem::exists(old_in->blob_path));
  CHECK(s.get_input("alice", kept_in->input_id));
  CHECK(std::filesystem::exists(kept_in->blob_path));
  CHECK_FALSE(s.get_input("alice", shared_old->input_id));
  CHECK(s.get_input("alice", shared_new->input_id));
  CHECK(std::filesystem::exists(shared_new->blob_path));  // still referenced by the young record
  CHECK_FALSE(s.get_input("alice", reused->input_id));
  CHECK(s.get_input("alice", again->input_id));
  CHECK(std::filesystem::exists(again->blob_path));
}

// A store several servers share: a second Store on the same root (another
// server) sees what the first wrote; the janitor's removal of a blob and a
// reuse of it exclude each other across servers through the blobs lock.
TEST_CASE("a shared store: another server's Store reads the records; a blob reuse waits for the janitor's lock") {
  TempDir local_a, local_b, shared;
  store::Store a(local_a.path, shared.path);
  store::Store b(local_b.path, shared.path);
  CHECK(a.root() == shared.path);
  CHECK(a.state_dir() == local_a.path);
  auto in = a.put_input("t1", "x.csv", "a,b\n1,2\n");
  REQUIRE(in.ok());
  auto seen = b.get_input("t1", in->input_id);
  REQUIRE(seen.ok());
  CHECK(seen->sha256 == in->sha256);
  CHECK(seen->blob_path.rfind(shared.path + "/", 0) == 0);
  CHECK_FALSE(std::filesystem::exists(local_a.path + "/tenants"));  // nothing of it in the server's own directory

  // The janitor of some server holds the blobs lock: a reuse (the same
  // content again) waits for it rather than refresh a blob being removed.
  const std::string lock_path = shared.path + "/tenants/t1/blobs/.lock";
  const int held = hold_lock(lock_path);
  auto again = std::async(std::launch::async, [&] { return b.put_input("t1", "y.csv", "a,b\n1,2\n").ok(); });
  CHECK(again.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
  ::close(held);  // the lock goes with it
  CHECK(again.get());
  // The lock file is never taken for a blob: an expiry keeps it.
  a.expire(0, 0);
  CHECK(std::filesystem::exists(lock_path));
}

// What one tenant may keep: the bytes of its blobs (each content once) and
// the number of its records, counted from the directory with the tenant's
// lock held, so concurrent puts and other servers' puts count too.
TEST_CASE("a tenant's share of the store: bytes and files bounded, the same upload again kept, others untouched") {
  TempDir dir;
  store::Store s(dir.path);
  s.set_tenant_quota(100, 3);
  auto a = s.put_input("alice", "a.txt", std::string(60, 'a'));
  REQUIRE(a);
  // 60 + 50 bytes pass 100: refused, nothing of it written.
  auto b = s.put_input("alice", "b.txt", std::string(50, 'b'));
  REQUIRE_FALSE(b);
  CHECK(b.error().code == util::ErrorCode::kTooLarge);
  CHECK(b.error().message.rfind(store::Store::kQuotaFull, 0) == 0);
  CHECK(b.error().message.find("admission.store_bytes_per_tenant_max (100)") != std::string::npos);
  CHECK(store::client_message(b.error()) == b.error().message);  // the tenant's own limit: told as it is
  CHECK(s.tenant_usage("alice").bytes == 60);
  CHECK(s.tenant_usage("alice").records == 1);
  // The same content under another name takes no byte: a record more.
  auto a2 = s.put_input("alice", "a2.txt", std::string(60, 'a'));
  REQUIRE(a2);
  CHECK(a2->blob_path == a->blob_path);
  store::ArtifactRecord art;
  art.job_id = "job";
  art.name = "c.txt";
  art.verdict = "accepted";
  auto c = s.put_artifact("alice", art, std::string(40, 'c'));
  REQUIRE(c);
  CHECK(s.tenant_usage("alice").bytes == 100);
  CHECK(s.tenant_usage("alice").records == 3);
  // Three records: a fourth is refused, even of content already kept.
  auto d = s.put_artifact("alice", art, std::string(40, 'c'));
  REQUIRE_FALSE(d);
  CHECK(d.error().code == util::ErrorCode::kTooLarge);
  CHECK(d.error().message.find("admission.store_files_per_tenant_max") != std::string::npos);
  // The same upload again names the input it has, quota or not.
  auto again = s.put_input("alice", "a.txt", std::string(60, 'a'));
  REQUIRE(again);
  CHECK(again->input_id == a->input_id);
  // Another tenant has a share of its own.
  CHECK(s.put_input("bob", "b.txt", std::string(50, 'b')));
  // Expiry gives the room back.
  s.expire(0, 0);
  CHECK(s.tenant_usage("alice").bytes == 0);
  CHECK(s.tenant_usage("alice").records == 0);
  CHECK(s.put_input("alice", "b.txt", std::string(50, 'b')));
}

TEST_CASE("a tenant's share of the store holds against concurrent puts, through two servers sharing it") {
  TempDir local_a, local_b, shared;
  store::Store a(local_a.path, shared.path);
  store::Store b(local_b.path, shared.path);
  a.set_tenant_quota(1 << 20, 10);
  b.set_tenant_quota(1 << 20, 10);
  std::vector<std::future<int>> threads;
  for (int t = 0; t < 8; ++t)
    threads.push_back(std::async(std::launch::async, [&, t] {
      int kept = 0;
      for (int i = 0; i < 5; ++i) {
        store::Store& s = (t % 2) ? a : b;
        const std::string content = "thread " + std::to_string(t) + " file " + std::to_string(i);
        auto r = s.put_input("alice", "f" + std::to_string(t) + "-" + std::to_string(i) + ".txt", content);
        if (r)
          ++kept;
        else
          CHECK(r.error().code == util::ErrorCode::kTooLarge);
      }
      return kept;
    }));
  int kept = 0;
  for (auto& f : threads) kept += f.get();
  CHECK(kept == 10);
  CHECK(a.tenant_usage("alice").records == 10);
}

// The tenant's lock is the tenant's alone: a put that waits for it (a slow
// write, another server's janitor) holds up no other tenant's put.
TEST_CASE("a put waiting for its tenant's lock does not hold up another tenant's") {
  TempDir dir;
  store::Store s(dir.path);
  REQUIRE(s.put_input("alice", "first.txt", "first"));
  const std::string lock_path = dir.path + "/tenants/alice/blobs/.lock";
  const int held = hold_lock(lock_path);
  auto alice = std::async(std::launch::async, [&] { return s.put_input("alice", "second.txt", "second").ok(); });
  CHECK(alice.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  auto bob = std::async(std::launch::async, [&] { return s.put_input("bob", "b.txt", "bob's").ok(); });
  const bool bob_done = bob.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  CHECK(bob_done);
  ::close(held);  // alice's put goes on
  CHECK(alice.get());
  if (bob_done) CHECK(bob.get());
}

// The count a put reads is the tenant's usage file, which each put moves and
// each janitor's round counts again from the directory: a count gone wrong
// (a put a crash cut short, a file removed by hand) holds until that round.
TEST_CASE("a tenant's usage file: moved by puts, missing or wrong until the janitor counts again") {
  TempDir dir;
  store::Store s(dir.path);
  s.set_tenant_quota(1000, 10);
  REQUIRE(s.put_input("alice", "a.txt", std::string(100, 'a')));
  const std::string usage = dir.path + "/tenants/alice/usage";
  auto read = [&] {
    auto text = util::read_file(usage, 64);
    return text ? *text : std::string();
  };
  CHECK(read() == "100 1\n");
  REQUIRE(s.put_input("alice", "b.txt", std::string(200, 'b')));
  CHECK(read() == "300 2\n");
  // Wrong: the puts believe it.
  REQUIRE(util::write_file_atomic(usage, "990 2\n", 0600));
  auto refused = s.put_input("alice", "c.txt", std::string(20, 'c'));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == util::ErrorCode::kTooLarge);
  // The janitor's round counts again; nothing was old enough to go.
  s.expire(3600, 3600);
  CHECK(read() == "300 2\n");
  CHECK(s.put_input("alice", "c.txt", std::string(20, 'c')));
  CHECK(read() == "320 3\n");
  // Missing: counted from the directory at the next put.
  std::filesystem::remove(usage);
  CHECK(s.put_input("alice", "d.txt", std::string(30, 'd')));
  CHECK(read() == "350 4\n");
}
