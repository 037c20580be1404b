//go:build tools

// Package tools records the OCI runtime of real nodes. Debian's runc 1.1.5
// fails every CRI sandbox on these machines; this one is built with
// `-tags seccomp` (libseccomp-dev, pkg-config).
package tools

import _ "github.com/opencontainers/runc"
