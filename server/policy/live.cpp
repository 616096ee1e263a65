// What a reload may change (live.h): sections compared in the policy file's
// own shape (effective_json), so a value the loader derives from another
// (server.message_max_bytes from limits) counts where it lands.
#include "server/policy/live.h"

#include <algorithm>
#include <iterator>

namespace policy {

const char* const kReloadableSections[] = {"limits", "admission", "network"};

namespace {

// The credentials' values, which effective_json leaves out: a secret file
// rewritten with the same policy is a change of the network section.
bool secrets_differ(const Policy& a, const Policy& b) {
  auto values = [](const Policy& p) {
    std::vector<std::string> out;
    for (auto& [name, profile] : p.network.profiles)
      for (auto& c : profile.credentials) out.push_back(name + '\0' + c.host + '\0' + c.value);
    return out;
  };
  return values(a) != values(b);
}

}  // namespace

std::vector<std::string> changed_sections(const Policy& running, const Policy& next) {
  const nlohmann::json a = effective_json(running), b = effective_json(next);
  std::vector<std::string> out;
  for (auto& [key, value] : a.items())
    if (!b.contains(key) || b[key] != value) out.push_back(key);
  for (auto& [key, _] : b.items())
    if (!a.contains(key)) out.push_back(key);
  if (secrets_differ(running, next) && std::find(out.begin(), out.end(), "network") == out.end())
    out.push_back("network");
  return out;
}

std::vector<std::string> reload_problems(const Policy& running, const Policy& next) {
  std::vector<std::string> out;
  for (const std::string& s : changed_sections(running, next))
    if (std::find(std::begin(kReloadableSections), std::end(kReloadableSections), s) == std::end(kReloadableSections))
      out.push_back(s);
  return out;
}

}  // namespace policy
