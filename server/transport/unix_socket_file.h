// The file of a listening Unix socket, made safely: its directory must be one only tallyd (or
// root) can change, a stale file is removed only if it is a socket nobody listens on, and the
// permissions are set without a window and without following a symlink. Each helper returns ""
// or the reason, naming the path.
#pragma once

#include <string>

namespace tally::server::transport {

// Refuses a directory that another user could rename or replace files in: one owned by neither
// tallyd's effective uid nor root, or writable by every user without the sticky bit.
std::string checkSocketDirectory(const std::string& dir);

// Removes what a previous tallyd left at `path`: nothing there is fine; a socket that refuses
// connections is removed; anything else (a file, a symlink, a socket in use) is refused.
std::string removeStaleSocket(const std::string& path);

// Creates the directory if missing, checks it, removes a stale socket, and binds a new
// SOCK_STREAM socket at `path` whose file has exactly `mode`. Returns the bound socket (close
// on exec, not yet listening), or -1 with `error`.
int bindUnixSocket(const std::string& path, unsigned mode, std::string& error);

// Removes `path` at shutdown if it is still a socket (never whatever replaced it).
void removeSocketFile(const std::string& path);

}  // namespace tally::server::transport
