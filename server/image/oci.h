// Runtime images: OCI image layouts pinned by their manifest's digest.
//
// A layout is a directory (oci-layout, index.json, blobs/sha256/<hex>), or a
// tar archive of one (its files taken out first under the rules below). The
// pinned digest names its manifest; every blob it names (the config, each
// layer) is checked against its own digest and size as it is read, and a
// mismatch fails the whole unpack, which then leaves nothing behind.
//
// Layers are applied in order into a new tree: whiteouts (.wh.<name>, and
// .wh..wh..opq for a directory's lower contents) remove what lower layers
// put there; regular files, directories, symbolic links and hard links
// within the tree are made; a device node, FIFO or socket fails the unpack;
// setuid, setgid and sticky bits and every write bit are dropped (the tree is
// read-only once made); file capabilities and other extended attributes are
// not applied. No entry may leave the tree: "..", absolute paths and paths
// through a symbolic link are refused (each parent is opened beneath the
// root with openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS). The sizes are
// bounded (Limits).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "server/image/digest.h"
#include "server/util/result.h"

namespace image {

struct Limits {
  uint64_t bytes_max = 8ull << 30;       // the unpacked files' bytes, all layers
  uint64_t entries_max = 1'000'000;      // entries, all layers
  uint64_t blob_bytes_max = 4ull << 30;  // one layer as stored (compressed)
};

struct Unpacked {
  uint64_t layers = 0;
  uint64_t files = 0;
  uint64_t directories = 0;
  uint64_t symlinks = 0;
  uint64_t hardlinks = 0;
  uint64_t whiteouts = 0;
  uint64_t bytes = 0;
  uint64_t special_bits_dropped = 0;  // setuid, setgid or sticky
};

// Verifies layout's manifest `manifest` and unpacks its layers into `dest`,
// a directory that must not exist yet (its parent must). On any error dest
// is removed and the error names the layout, the blob or the entry.
util::Result<Unpacked> unpack(const std::string& layout, const Digest& manifest, const std::string& dest,
                              const Limits& limits = {});

// The content-addressed cache: the tree of layout's manifest at
// <cache_dir>/sha256-<hex>, unpacked on first use (into a temporary name,
// then renamed: never partly visible; a second process racing finds the
// first's). Returns the tree's path.
util::Result<std::string> ensure_cached(const std::string& cache_dir, const std::string& layout, const Digest& manifest,
                                        const Limits& limits = {});

// Makes an OCI layout at `out` (a directory that must not exist yet) from
// the tree `rootfs`: one gzip layer, entries in byte order of their paths,
// owner 0:0, modification time 0, no device nodes (a sandbox has its own
// /dev), hard links kept. The same tree gives the same digest. Returns the
// manifest's digest.
struct Built {
  Digest manifest;
  uint64_t entries = 0;
  uint64_t skipped = 0;  // device nodes, FIFOs, sockets
  uint64_t layer_bytes = 0;
};
util::Result<Built> build(const std::string& rootfs, const std::string& out);

}  // namespace image
