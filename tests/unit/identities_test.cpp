// Per-sandbox host identities: the range check against the
// account files, and leases that never give one uid to two live sandboxes.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "server/broker/identities.h"

namespace {

policy::Policy range(uint32_t first, uint32_t count) {
  policy::Policy p;
  p.sandbox.uid_first = first;
  p.sandbox.uid_count = count;
  return p;
}

struct EtcDir {
  std::filesystem::path dir;
  EtcDir() {
    char tmpl[] = "/tmp/throwbox-identities-test.XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  ~EtcDir() { std::filesystem::remove_all(dir); }
  void write(const char* name, const std::string& text) const { std::ofstream(dir / name) << text; }
};

}  // namespace

TEST_CASE("an account or a subordinate range inside the range is reported with its line") {
  CHECK(broker::range_conflict("passwd", "root:x:0:0::/root:/bin/sh\nsvc:x:70005:70005::/:/bin/false\n", false, 70000,
                               10) == std::optional<std::string>("passwd: svc:x:70005:70005::/:/bin/false"));
  CHECK_FALSE(broker::range_conflict("passwd", "svc:x:70010:70010::/:/bin/false\n", false, 70000, 10));
  CHECK_FALSE(broker::range_conflict("passwd", "svc:x:69999:1::/:/bin/false\n", false, 70000, 10));
  // subuid: name:start:count overlaps [first, first + count) at either end.
  CHECK(broker::range_conflict("subuid", "alice:69990:11\n", true, 70000, 10));
  CHECK(broker::range_conflict("subuid", "alice:70009:100\n", true, 70000, 10));
  CHECK_FALSE(broker::range_conflict("subuid", "alice:69990:10\nbob:70010:5\n", true, 70000, 10));
  CHECK_FALSE(broker::range_conflict("group", "# comment\n\nbroken line\n", false, 70000, 10));
}

TEST_CASE("a root server refuses a range an account uses; a normal user shares its own ids") {
  EtcDir etc;
  etc.write("passwd", "root:x:0:0::/root:/bin/sh\n");
  etc.write("group", "root:x:0:\nstaff:x:70003:\n");
  auto refused = broker::Identities::make(range(70000, 10), 0, 0, etc.dir.string());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("sandbox.uid_range 70000..70009 is in use on this host") != std::string::npos);
  CHECK(refused.error().message.find("staff:x:70003:") != std::string::npos);
  auto user = broker::Identities::make(range(70000, 10), 1000, 1001, etc.dir.string());
  REQUIRE(user.ok());
  CHECK_FALSE(user->per_sandbox());
  auto l = user->lease();
  REQUIRE(l.ok());
  CHECK(l->identity().uid == 1000);
  CHECK(l->identity().gid == 1001);
  CHECK_FALSE(l->identity().own_user_ns);
}

TEST_CASE("leases: distinct uids while held, busy when all are, free again once released") {
  EtcDir etc;
  etc.write("passwd", "root:x:0:0::/root:/bin/sh\n");
  // A range of this test's own (pid-based), so concurrent runs do not meet.
  const uint32_t first = 1500000000u + static_cast<uint32_t>(::getpid() % 100000) * 4;
  auto ids = broker::Identities::make(range(first, 3), 0, 0, etc.dir.string());
  REQUIRE(ids.ok());
  CHECK(ids->per_sandbox());
  std::vector<broker::IdentityLease> held;
  std::set<uint32_t> uids;
  for (int i = 0; i < 3; ++i) {
    auto l = ids->lease();
    REQUIRE(l.ok());
    CHECK(l->identity().own_user_ns);
    CHECK(l->identity().uid == l->identity().gid);
    CHECK(l->identity().uid >= first);
    CHECK(l->identity().uid < first + 3);
    uids.insert(l->identity().uid);
    held.push_back(std::move(*l));
  }
  CHECK(uids.size() == 3);
  auto none = ids->lease();
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == util::ErrorCode::kBusy);
  // A second server on the host (another Identities, same range) gets none either.
  auto other = broker::Identities::make(range(first, 3), 0, 0, etc.dir.string());
  REQUIRE(other.ok());
  CHECK_FALSE(other->lease().ok());
  held.erase(held.begin());
  auto again = other->lease();
  REQUIRE(again.ok());
  CHECK(uids.count(again->identity().uid) == 1);
}

TEST_CASE("a user's first subordinate range, by name or by uid") {
  const std::string text = "# delegated\nalice:100000:65536\nbob:165536:65536\n1003:231072:10\n";
  CHECK(broker::subordinate_range(text, "bob", 1002) == std::optional(std::pair<uint32_t, uint32_t>{165536, 65536}));
  CHECK(broker::subordinate_range(text, "carol", 1003) == std::optional(std::pair<uint32_t, uint32_t>{231072, 10}));
  CHECK_FALSE(broker::subordinate_range(text, "dave", 1004));
  CHECK_FALSE(broker::subordinate_range("eve:99999999999:5\neve:5:0\n", "eve", 1005));
}

TEST_CASE("a normal user with subordinate ids and newuidmap: a uid and gid of them per sandbox") {
  EtcDir etc;
  const std::string me = std::to_string(::getuid() == 0 ? 4242 : ::getuid());
  etc.write("subuid", me + ":1600000000:3\n");
  etc.write("subgid", me + ":1700000000:5\n");
  etc.write("newuidmap", "");
  etc.write("newgidmap", "");
  const std::string mapper = (etc.dir / "newuidmap").string();
  std::filesystem::permissions(etc.dir / "newuidmap", std::filesystem::perms::owner_all);
  std::filesystem::permissions(etc.dir / "newgidmap", std::filesystem::perms::owner_all);
  const uint32_t uid = static_cast<uint32_t>(std::stoul(me));
  auto ids = broker::Identities::make(range(70000, 10), uid, 1000, etc.dir.string(), mapper);
  REQUIRE(ids.ok());
  CHECK(ids->per_sandbox());
  CHECK(ids->subordinate());
  CHECK(ids->first() == 1600000000);
  CHECK(ids->count() == 3);  // the shorter of the two ranges
  auto l = ids->lease();
  REQUIRE(l.ok());
  CHECK(l->identity().subordinate);
  CHECK(l->identity().uid - 1600000000 == l->identity().gid - 1700000000);
  // Without newgidmap beside newuidmap: shared.
  std::filesystem::remove(etc.dir / "newgidmap");
  auto shared = broker::Identities::make(range(70000, 10), uid, 1000, etc.dir.string(), mapper);
  REQUIRE(shared.ok());
  CHECK_FALSE(shared->per_sandbox());
  CHECK(shared->lease()->identity().uid == uid);
  CHECK(shared->why_shared().find("Debian package uidmap") != std::string::npos);
  CHECK(ids->why_shared().empty());
}
