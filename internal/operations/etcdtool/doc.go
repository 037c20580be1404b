// Package etcdtool holds Rampart's tools that read etcd directly, in its
// subpackages: usage (what fills the store), check (what the API server
// cannot decode), snapshot (verified snapshots). Its tests run them, as the
// rampart binary, against a real local cluster.
package etcdtool
