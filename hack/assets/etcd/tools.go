//go:build tools

// Package tools records the etcd commands this module builds: etcd, and
// etcdutl (snapshot restore) for the restore test.
package tools

import (
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
