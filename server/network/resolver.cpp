// The proxy's resolver (resolver.h). c-ares 1.18's channel is not
// thread-safe: it is touched on the resolver's own thread only. Other threads
// queue a lookup and wake the thread through an eventfd; the thread starts
// queued lookups, waits on the channel's sockets until its next timeout, and
// runs each Done as its lookup ends.
#include "server/network/resolver.h"

#include <ares.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <mutex>
#include <thread>

#include "server/util/fd.h"
#include "server/util/text.h"

namespace network {
namespace {

// The error a lookup ends with, as a job's program reads it after "cannot resolve <name>: ".
std::string lookup_error(int status) {
  switch (status) {
    case ARES_ENOTFOUND:
    case ARES_ENODATA:
      return "no such name";
    case ARES_ETIMEOUT:
      return "the nameservers did not answer in time";
    case ARES_ECONNREFUSED:
      return "the nameservers refused the query";
    case ARES_EDESTRUCTION:
    case ARES_ECANCELLED:
      return "the server is stopping";
    default:
      return ares_strerror(status);
  }
}

}  // namespace

struct Resolver::Impl {
  // A name asked for and where its answer goes (a member type: Impl has
  // external linkage, and a field of an anonymous-namespace type in it is
  // a -Wsubobject-linkage warning wherever this file is not the main one,
  // as in a unity batch).
  struct Lookup {
    std::string name;
    Resolver::Done done;
  };
  ares_channel channel = nullptr;
  util::UniqueFd wake;  // eventfd: a lookup was queued, or stop
  std::mutex mu;
  std::deque<Lookup> queued;
  bool stopping = false;
  std::thread thread;

  ~Impl() {
    if (channel) ares_destroy(channel);  // runs every pending callback with ARES_EDESTRUCTION
    ares_library_cleanup();
  }

  static void on_answer(void* arg, int status, int /*timeouts*/, struct ares_addrinfo* info) {
    std::unique_ptr<Lookup> lookup(static_cast<Lookup*>(arg));
    std::vector<Address> found;
    if (status == ARES_SUCCESS && info) {
      for (const ares_addrinfo_node* n = info->nodes; n; n = n->ai_next) {
        char text[INET6_ADDRSTRLEN] = {};
        const void* raw = n->ai_family == AF_INET6
                              ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(n->ai_addr)->sin6_addr)
                              : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(n->ai_addr)->sin_addr);
        if ((n->ai_family == AF_INET || n->ai_family == AF_INET6) && ::inet_ntop(n->ai_family, raw, text, sizeof text))
          if (auto a = parse_address(text)) found.push_back(*a);
      }
    }
    if (info) ares_freeaddrinfo(info);
    if (status != ARES_SUCCESS) return lookup->done(util::make_error(util::ErrorCode::kNotFound, lookup_error(status)));
    if (found.empty()) return lookup->done(util::make_error(util::ErrorCode::kNotFound, "no address"));
    lookup->done(std::move(found));
  }

  // The host's files first, as glibc's "hosts: files dns" has it: the name
  // exactly (a file lookup never appends a search domain).
  std::vector<Address> from_hosts_file(const std::string& name) {
    std::vector<Address> found;
    for (int family : {AF_INET, AF_INET6}) {
      hostent* h = nullptr;
      if (ares_gethostbyname_file(channel, name.c_str(), family, &h) != ARES_SUCCESS || !h) continue;
      for (char** a = h->h_addr_list; *a; ++a) {
        char text[INET6_ADDRSTRLEN] = {};
        if (::inet_ntop(family, *a, text, sizeof text))
          if (auto parsed = parse_address(text)) found.push_back(*parsed);
      }
      ares_free_hostent(h);
    }
    return found;
  }

  // On the thread: the queued lookups into the channel.
  void start_queued() {
    std::deque<Lookup> now;
    {
      std::lock_guard lock(mu);
      now.swap(queued);
    }
    for (Lookup& l : now) {
      if (std::vector<Address> listed = from_hosts_file(l.name); !listed.empty()) {
        l.done(std::move(listed));
        continue;
      }
      ares_addrinfo_hints hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_flags = ARES_AI_NOSORT;  // the answer's order; no probe sockets
      // The trailing dot makes the name absolute: c-ares 1.18's getaddrinfo
      // applies the search list and ndots despite ARES_FLAG_NOSEARCH.
      const std::string absolute = l.name + ".";
      auto owned = std::make_unique<Lookup>(std::move(l));
      ares_getaddrinfo(channel, absolute.c_str(), nullptr, &hints, on_answer, owned.release());
    }
  }

  void run() {
    for (;;) {
      {
        std::lock_guard lock(mu);
        if (stopping) return;
      }
      start_queued();
      ares_socket_t socks[ARES_GETSOCK_MAXNUM];
      const int bits = ares_getsock(channel, socks, ARES_GETSOCK_MAXNUM);
      pollfd fds[ARES_GETSOCK_MAXNUM + 1];
      nfds_t n = 0;
      fds[n++] = {wake.get(), POLLIN, 0};
      for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
        short events = 0;
        if (ARES_GETSOCK_READABLE(bits, i)) events |= POLLIN;
        if (ARES_GETSOCK_WRITABLE(bits, i)) events |= POLLOUT;
        if (events) fds[n++] = {socks[i], events, 0};
      }
      timeval longest{1, 0}, next{};
      const timeval* tv = ares_timeout(channel, &longest, &next);
      const int timeout_ms = static_cast<int>(tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000);
      const int ready = ::poll(fds, n, timeout_ms);
      if (ready < 0 && errno != EINTR) continue;
      if (fds[0].revents & POLLIN) {
        eventfd_t count;
        (void)::eventfd_read(wake.get(), &count);
      }
      bool any = false;
      for (nfds_t i = 1; i < n; ++i) {
        if (!fds[i].revents) continue;
        any = true;
        const bool in = fds[i].revents & (POLLIN | POLLERR | POLLHUP);
        const bool out = fds[i].revents & POLLOUT;
        ares_process_fd(channel, in ? fds[i].fd : ARES_SOCKET_BAD, out ? fds[i].fd : ARES_SOCKET_BAD);
      }
      if (!any) ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts
    }
  }
};

util::Result<std::unique_ptr<Resolver>> Resolver::start() {
  if (int s = ares_library_init(ARES_LIB_INIT_ALL); s != ARES_SUCCESS)
    return util::make_error(util::ErrorCode::kInternal, std::string("ares_library_init: ") + ares_strerror(s));
  auto impl = std::make_unique<Impl>();
  ares_options options{};
  options.flags = ARES_FLAG_NOSEARCH;
  options.timeout = kLookupTryTimeoutMs;
  options.tries = kLookupTries;
  char dns_only[] = "b";  // the files were read first (from_hosts_file)
  options.lookups = dns_only;
  if (int s = ares_init_options(&impl->channel, &options,
                                ARES_OPT_FLAGS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS);
      s != ARES_SUCCESS) {
    impl->channel = nullptr;
    return util::make_error(util::ErrorCode::kInternal,
                            std::string("ares_init_options (the host's resolver configuration): ") + ares_strerror(s));
  }
  impl->wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->wake.valid())
    return util::make_error(util::ErrorCode::kInternal, util::call_error("eventfd", "resolver", errno));
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<Resolver>(new Resolver(std::move(impl)));
}

Resolver::Resolver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Resolver::~Resolver() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  (void)::eventfd_write(impl_->wake.get(), 1);
  if (impl_->thread.joinable()) impl_->thread.join();
  // Lookups queued but never started end here; those in the channel end with
  // ares_destroy in ~Impl, on this thread now that the resolver's has ended.
  for (Impl::Lookup& l : impl_->queued) l.done(util::make_error(util::ErrorCode::kNotFound, "the server is stopping"));
}

void Resolver::resolve(const std::string& name, Done done) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping) {
      done(util::make_error(util::ErrorCode::kNotFound, "the server is stopping"));
      return;
    }
    impl_->queued.push_back({name, std::move(done)});
  }
  (void)::eventfd_write(impl_->wake.get(), 1);
}

}  // namespace network
